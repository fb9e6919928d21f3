/* A CPU stand-in for the part of the CUDA runtime that trainer/src/gpu/device.cu uses,
 * so that test-gpu-emul can run the GPU path's host code (arenas, double-buffered
 * batches, cuDNN and cuBLAS calls, CUDA graph capture and replay) and its kernels on a
 * machine without a GPU. Used by tests only (KT_CUDA_EMUL); it is not CUDA and says
 * nothing about how the real runtime, driver or device behave beyond what it checks:
 *
 * - memory: cudaMalloc'd blocks are host blocks filled with NaN bytes (a read of device
 *   memory nobody wrote shows up as NaN); copies check that their pointers lie in the
 *   kind of memory their cudaMemcpyKind names;
 * - streams: work waits in its stream's queue until the host synchronizes with it (or
 *   frees memory), then the streams' queues run interleaved in a random order that only
 *   events constrain (FAKECUDA_SEED), so a missing wait between two streams shows up as
 *   stale or NaN data; copies from pageable memory take their source at the call and
 *   copies to it return when done, as the runtime's do;
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
#include "cuda_runtime_api.h"

/* the typed forms of the C++ API */
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
template <typename T> static inline cudaError_t cudaMallocHost(T **p, size_t bytes)
{
    return cudaMallocHost((void **)p, bytes);
}

/* For the fake libraries: runs op now, or records it when s is capturing. */
cudaError_t fake_submit(cudaStream_t s, std::function<void()> op);
/* Kernel launches on the stream s (device.cu's LAUNCH and EW under KT_CUDA_EMUL). */
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
