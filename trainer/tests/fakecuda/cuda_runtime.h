/* A CPU stand-in for the part of the CUDA runtime that trainer/src/gpu/device.cu uses,
 * so that test-gpu-emul can run the GPU path's host code (arenas, double-buffered
 * batches, cuDNN and cuBLAS calls, CUDA graph capture and replay) and its kernels on a
 * machine without a GPU. Used by tests only (KT_CUDA_EMUL); it is not CUDA and says
 * nothing about how the real runtime, driver or device behave beyond what it checks:
 *
 * - memory: cudaMalloc'd blocks are host blocks filled with NaN bytes (a read of device
 *   memory nobody wrote shows up as NaN); copies check that their pointers lie in the
 *   kind of memory their cudaMemcpyKind names;
 * - streams: work runs at once, in program order (so stream races cannot show here);
 * - capture: between cudaStreamBeginCapture and cudaStreamEndCapture the work submitted
 *   to that stream is recorded, not run, and a call the real runtime refuses while a
 *   capture is under way in this thread (synchronization, allocation, synchronous
 *   copies) fails and invalidates the capture, as with cudaStreamCaptureModeThreadLocal;
 *   a graph replays what was recorded, with the arguments it was recorded with.
 *
 * Kernels run under trainer/tests/cuda_emul.h. */
#ifndef KT_FAKE_CUDA_RUNTIME_H
#define KT_FAKE_CUDA_RUNTIME_H

#include <cstddef>
#include <functional>

#include "cuda_emul.h"

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorIllegalState = 401,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureWrongThread = 908,
};

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};

#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02

typedef struct FakeStream *cudaStream_t;
typedef struct FakeEvent *cudaEvent_t;
typedef struct FakeGraph *cudaGraph_t;
typedef struct FakeGraphExec *cudaGraphExec_t;

struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
};

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
/* the typed forms of the C++ API */
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
template <typename T> static inline cudaError_t cudaMallocHost(T **p, size_t bytes)
{
    return cudaMallocHost((void **)p, bytes);
}
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

/* For the fake libraries: runs op now, or records it when s is capturing. Returns
 * cudaErrorInvalidValue for a destroyed stream. */
cudaError_t fake_submit(cudaStream_t s, std::function<void()> op);
/* A call the runtime refuses during a capture in this thread: invalidates that capture
 * and returns the error to give (cudaSuccess when no capture is under way). */
cudaError_t fake_capture_unsafe(void);
/* 1 when [p, p + bytes) lies inside one cudaMalloc'd block. */
int fake_is_device(const void *p, size_t bytes);
/* Kernel launches on the stream s (device.cu's LAUNCH and EW under KT_CUDA_EMUL). */
void fake_set_launch_error(cudaError_t e);

template <typename... P, typename... A>
static void emul_launch_on(cudaStream_t s, unsigned grid, unsigned block, void (*kernel)(P...),
                           A... args)
{
    if (grid == 0 || block == 0 || block > 1024) {
        fake_set_launch_error(cudaErrorInvalidValue);
        return;
    }
    cudaError_t e = fake_submit(s, [=] { emul_launch(grid, block, kernel, args...); });
    if (e != cudaSuccess) fake_set_launch_error(e);
}

#endif
