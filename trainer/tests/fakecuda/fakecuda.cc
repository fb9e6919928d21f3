// fakecuda.cc — the CPU stand-ins of cuda_runtime.h, cublas_v2.h and cudnn.h here, for
// test-gpu-emul only. What each checks is said in its header.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <deque>
#include <map>
#include <vector>

#include <cblas.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cublas_v2.h"
#include "cuda_runtime.h"
#include "cudnn.h"
#include "nccl.h"

// ------------------------------------------------------------------------------------
// runtime

namespace
{

typedef std::vector<std::function<void()>> Ops;

thread_local cudaError_t last_error = cudaSuccess;
std::map<uintptr_t, size_t> device_blocks, pinned_blocks;

cudaError_t set_error(cudaError_t e)
{
    if (e != cudaSuccess) last_error = e;
    return e;
}

bool inside(const std::map<uintptr_t, size_t> &blocks, const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    auto it = blocks.upper_bound(a);
    if (it == blocks.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

} // namespace

// Streams: work submitted to a stream waits in its queue until the host synchronizes
// with something that needs it (or frees memory); then the queues' heads run one at a
// time, the next stream picked at random among those whose head may run (a wait for an
// event runs once that event's record has run). So work on two streams runs in either
// order unless an event orders it, as on a device, and a missing wait shows up as
// stale or NaN data. FAKECUDA_SEED picks the sequence (default 1).
struct FakeEvent {
    unsigned long recorded = 0, completed = 0; // records asked for, and those that ran
};
struct QueuedOp {
    std::function<void()> run;
    FakeEvent *wait = nullptr; // a stream wait: runnable once wait->completed >= gen
    FakeEvent *record = nullptr; // an event record: sets record->completed = gen
    unsigned long gen = 0;
};
struct FakeStream {
    bool capturing = false, invalidated = false;
    bool stuck = false; // behind a failed NCCL operation: nothing more runs until an abort
    Ops ops; // recorded by a capture
    std::deque<QueuedOp> queue;
};
struct FakeGraph {
    Ops ops;
};
struct FakeGraphExec {
    Ops ops;
};

static std::vector<FakeStream *> live_streams;
static uint64_t pick_state = 0;

// the stream capturing in this thread, if any
static thread_local FakeStream *capture_here = nullptr;

static bool runnable(const FakeStream *s)
{
    if (s->queue.empty() || s->stuck) return false;
    const QueuedOp &op = s->queue.front();
    return !op.wait || op.wait->completed >= op.gen;
}

// Runs queued work, one op at a time from a randomly picked runnable stream, until
// done() holds (true) or no stream can run (false).
template <typename Done> static bool drain_while_runnable(Done done)
{
    if (!pick_state) {
        const char *seed = getenv("FAKECUDA_SEED");
        pick_state = seed ? strtoull(seed, nullptr, 10) | 1 : 1;
    }
    while (!done()) {
        std::vector<FakeStream *> ready;
        for (FakeStream *s : live_streams)
            if (runnable(s)) ready.push_back(s);
        if (ready.empty()) return false;
        pick_state ^= pick_state << 13, pick_state ^= pick_state >> 7,
            pick_state ^= pick_state << 17;
        FakeStream *s = ready[pick_state % ready.size()];
        QueuedOp op = std::move(s->queue.front());
        s->queue.pop_front();
        if (op.run) op.run();
        if (op.record && op.record->completed < op.gen) op.record->completed = op.gen;
    }
    return true;
}

// drain_while_runnable for a host that blocks until done() holds: when no stream can
// run, the wait would never return on a device, so the process aborts with why.
template <typename Done> static void drain(Done done)
{
    if (drain_while_runnable(done)) return;
    bool stuck = false;
    for (FakeStream *st : live_streams) stuck |= st->stuck;
    fprintf(stderr,
            "fakecuda: the host waits for work no stream can run (%s): on a device "
            "this wait would never return\n",
            stuck ? "a stream is stuck behind a failed NCCL operation"
                  : "queued event waits that can never be met");
    abort();
}

static void drain_stream(FakeStream *s)
{
    drain([s] { return s->queue.empty(); });
}

static void drain_all(void)
{
    drain([] {
        for (FakeStream *s : live_streams)
            if (!s->queue.empty()) return false;
        return true;
    });
}

cudaError_t fake_capture_unsafe(void)
{
    if (!capture_here) return cudaSuccess;
    capture_here->invalidated = true;
    return set_error(cudaErrorStreamCaptureUnsupported);
}

cudaError_t fake_submit(cudaStream_t s, std::function<void()> op)
{
    if (s && s->capturing) {
        if (s->invalidated) return set_error(cudaErrorStreamCaptureInvalidated);
        s->ops.push_back(std::move(op));
        return cudaSuccess;
    }
    if (!s) { // the legacy stream: synchronous here (device.cu's streams do not wait for it)
        if (capture_here) return fake_capture_unsafe();
        op();
        return cudaSuccess;
    }
    QueuedOp q;
    q.run = std::move(op);
    s->queue.push_back(std::move(q));
    return cudaSuccess;
}

int fake_is_device(const void *p, size_t bytes)
{
    return inside(device_blocks, p, bytes);
}

void fake_set_launch_error(cudaError_t e)
{
    set_error(e);
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (fake CUDA)";
    case cudaErrorMemoryAllocation: return "out of memory (fake CUDA)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (fake CUDA)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (fake CUDA)";
    case cudaErrorIllegalState: return "illegal state (fake CUDA)";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing (fake CUDA)";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture (fake CUDA)";
    case cudaErrorStreamCaptureWrongThread: return "capture from another thread (fake CUDA)";
    case cudaErrorNotReady: return "device not ready (fake CUDA)";
    }
    return "unknown error (fake CUDA)";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

// Devices: FAKECUDA_DEVICES of them (default 2, so that two ranks can each have one);
// they share this process's memory, as the ranks on one host of a real run do not.
static int fake_devices(void)
{
    const char *v = getenv("FAKECUDA_DEVICES");
    int n = v ? atoi(v) : 2;
    return n >= 0 ? n : 0;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = fake_devices();
    return *n ? cudaSuccess : set_error(cudaErrorNoDevice);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    if (dev < 0 || dev >= fake_devices()) return set_error(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulation of CUDA (kubetrain's fakecuda, not a GPU)");
    p->pciBusID = dev + 1;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = 0;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = 0;
    return cudaSuccess;
}

// The device cudaSetDevice chose (one per process here, as the trainer has it).
static int current_device;

cudaError_t cudaSetDevice(int dev)
{
    if (dev < 0 || dev >= fake_devices()) return set_error(cudaErrorInvalidDevice);
    current_device = dev;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (cudaError_t e = fake_capture_unsafe()) return e;
    drain_all();
    return cudaSuccess;
}

static cudaError_t alloc(std::map<uintptr_t, size_t> &blocks, void **p, size_t bytes)
{
    if (cudaError_t e = fake_capture_unsafe()) return e;
    void *q = malloc(bytes ? bytes : 1);
    if (!q) return set_error(cudaErrorMemoryAllocation);
    memset(q, 0xFF, bytes); // NaN floats and doubles: unwritten memory shows
    blocks[(uintptr_t)q] = bytes;
    *p = q;
    return cudaSuccess;
}

static cudaError_t release(std::map<uintptr_t, size_t> &blocks, void *p)
{
    if (cudaError_t e = fake_capture_unsafe()) return e;
    if (!p) return cudaSuccess;
    drain_all(); // cudaFree and cudaFreeHost wait for the device
    auto it = blocks.find((uintptr_t)p);
    if (it == blocks.end()) return set_error(cudaErrorInvalidValue);
    blocks.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    return alloc(device_blocks, p, bytes);
}
cudaError_t cudaFree(void *p)
{
    return release(device_blocks, p);
}
cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    return alloc(pinned_blocks, p, bytes);
}
cudaError_t cudaFreeHost(void *p)
{
    return release(pinned_blocks, p);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    if (!fake_is_device(p, bytes)) return set_error(cudaErrorInvalidValue);
    return fake_submit(s, [=] { memset(p, value, bytes); });
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    if (cudaError_t e = fake_capture_unsafe()) return e;
    return cudaMemsetAsync(p, value, bytes, nullptr);
}

static bool copy_fits(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    const bool dd = fake_is_device(dst, bytes), sd = fake_is_device(src, bytes);
    switch (kind) {
    case cudaMemcpyHostToHost: return !dd && !sd;
    case cudaMemcpyHostToDevice: return dd && !sd;
    case cudaMemcpyDeviceToHost: return !dd && sd;
    case cudaMemcpyDeviceToDevice: return dd && sd;
    case cudaMemcpyDefault: return true;
    }
    return false;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s)
{
    if (!copy_fits(dst, src, bytes, kind)) return set_error(cudaErrorInvalidValue);
    const bool src_pageable = !fake_is_device(src, bytes) && !inside(pinned_blocks, src, bytes);
    const bool dst_pageable = !fake_is_device(dst, bytes) && !inside(pinned_blocks, dst, bytes);
    cudaError_t e;
    if (src_pageable && !(s && s->capturing)) {
        // from pageable memory the runtime stages the source before it returns
        std::vector<unsigned char> staged((const unsigned char *)src,
                                          (const unsigned char *)src + bytes);
        e = fake_submit(s, [=] { memcpy(dst, staged.data(), bytes); });
    } else {
        e = fake_submit(s, [=] { memmove(dst, src, bytes); });
    }
    // to pageable memory it returns once the copy is done
    if (e == cudaSuccess && dst_pageable && s && !s->capturing) drain_stream(s);
    return e;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    memset(a, 0, sizeof *a);
    a->type = fake_is_device(p, 1)          ? cudaMemoryTypeDevice
              : inside(pinned_blocks, p, 1) ? cudaMemoryTypeHost
                                            : cudaMemoryTypeUnregistered;
    void *q = const_cast<void *>(p);
    if (a->type == cudaMemoryTypeDevice) a->devicePointer = q;
    else a->hostPointer = q;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    if (cudaError_t e = fake_capture_unsafe()) return e;
    return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = new FakeStream;
    live_streams.push_back(*s);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s) return set_error(cudaErrorInvalidValue);
    if (capture_here == s) capture_here = nullptr;
    drain_stream(s); // its work still runs, as on a device
    for (size_t i = 0; i < live_streams.size(); i++)
        if (live_streams[i] == s) live_streams.erase(live_streams.begin() + (long)i);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (cudaError_t e = fake_capture_unsafe()) return e;
    if (s) drain_stream(s);
    else drain_all();
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    if (!e || !s) return set_error(cudaErrorInvalidValue);
    if (s->capturing || !e->recorded) return cudaSuccess; // nothing to wait for
    QueuedOp q;
    q.wait = e;
    q.gen = e->recorded; // the event's most recent record
    s->queue.push_back(std::move(q));
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    if (s && s->capturing) return fake_capture_unsafe();
    if (!s) return cudaSuccess;
    // not ready while work is queued, also when it never can run (behind a stuck stream)
    bool done = drain_while_runnable([s] { return s->queue.empty() || s->stuck; });
    return done && !s->stuck ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = new FakeEvent();
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, 0);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (!e) return set_error(cudaErrorInvalidValue);
    drain_all(); // queued waits and records may still name it
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!e) return set_error(cudaErrorInvalidValue);
    if (s && s->capturing) return fake_submit(s, [] {});
    if (!s) { // the legacy stream runs at once
        if (cudaError_t err = fake_capture_unsafe()) return err;
        e->completed = ++e->recorded;
        return cudaSuccess;
    }
    QueuedOp q;
    q.record = e;
    q.gen = ++e->recorded;
    s->queue.push_back(std::move(q));
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (cudaError_t err = fake_capture_unsafe()) return err;
    if (!e) return set_error(cudaErrorInvalidValue);
    const unsigned long want = e->recorded;
    drain([e, want] { return e->completed >= want; });
    return cudaSuccess;
}

// Not ready while the event's last record has not run, also when it never can (queued
// behind a stream stuck on a failed NCCL operation): the host polls, as on a device.
cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (cudaError_t err = fake_capture_unsafe()) return err;
    if (!e) return set_error(cudaErrorInvalidValue);
    const unsigned long want = e->recorded;
    return drain_while_runnable([e, want] { return e->completed >= want; }) ? cudaSuccess
                                                                            : cudaErrorNotReady;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
    if (!s || s->capturing || capture_here || mode == cudaStreamCaptureModeRelaxed)
        return set_error(cudaErrorIllegalState);
    s->capturing = true;
    s->invalidated = false;
    s->ops.clear();
    capture_here = s;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    *graph = nullptr;
    if (!s || !s->capturing) return set_error(cudaErrorIllegalState);
    s->capturing = false;
    capture_here = nullptr;
    if (s->invalidated) {
        s->ops.clear();
        return set_error(cudaErrorStreamCaptureInvalidated);
    }
    *graph = new FakeGraph{std::move(s->ops)};
    s->ops.clear();
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    (void)flags;
    if (!graph) return set_error(cudaErrorInvalidValue);
    *exec = new FakeGraphExec{graph->ops};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    if (!exec) return set_error(cudaErrorInvalidValue);
    return fake_submit(s, [exec] {
        for (auto &op : exec->ops) op();
    });
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    delete exec;
    return cudaSuccess;
}

// ------------------------------------------------------------------------------------
// cuBLAS

struct FakeCublas {
    cudaStream_t stream = nullptr;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new FakeCublas;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    (void)h;
    return mode == CUBLAS_DEFAULT_MATH ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
    (void)h;
    return fake_is_device(ws, bytes) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED (fake)";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (fake)";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED (fake)";
    }
    return "unknown cuBLAS status (fake)";
}

// A (rows x cols, column-major, leading dimension ld) lies in device memory.
static bool matrix_on_device(const float *a, int rows, int cols, int ld)
{
    if (rows == 0 || cols == 0) return true;
    return fake_is_device(a, ((size_t)(cols - 1) * ld + rows) * sizeof(float));
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc)
{
    const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    if (m < 0 || n < 0 || k < 0 || lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) ||
        ldc < (m > 1 ? m : 1) || !matrix_on_device(A, ar, ac, lda) ||
        !matrix_on_device(B, br, bc, ldb) || !matrix_on_device(C, m, n, ldc))
        return CUBLAS_STATUS_INVALID_VALUE;
    const float al = *alpha, be = *beta;
    // BLAS's own column-major sgemm (OpenBLAS): cuBLAS has BLAS's interface and meaning
    cudaError_t e = fake_submit(h->stream, [=] {
        cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                    tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, al, A, lda, B, ldb, be,
                    C, ldc);
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// ------------------------------------------------------------------------------------
// cuDNN

struct FakeCudnn {
    cudaStream_t stream = nullptr;
};
struct FakeTensorDesc {
    int set = 0, n, c, h, w;
};
struct FakeFilterDesc {
    int set = 0, k, c, h, w;
};
struct FakeConvDesc {
    int set = 0, ph, pw, u, v;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

// The three algorithms the queries offer, in this order: a tensor-op one (device.cu asks
// for FMA math and must not pick it; these calls refuse it), a non-deterministic FMA one
// that needs no workspace (device.cu must pass it over too, or the bits of a run would
// change from run to run: the fake's sums come out a last bit apart at random, seeded
// from the clock, as cuDNN's atomics make them) and the deterministic FMA one, whose
// workspace grows with the batch so that device.cu's workspace and graph bookkeeping is
// exercised. FAKECUDNN_ALGOS (see offer) takes the last ones away.
enum { FMA_ALGO = 0, TENSOR_OP_ALGO = 1, NONDET_FMA_ALGO = 2, FAKE_ALGOS = 3 };
static size_t workspace_need(const FakeTensorDesc *x, int algo)
{
    return algo == FMA_ALGO ? (size_t)x->n * 4096 : 0;
}

// The last-bit differences of NONDET_FMA_ALGO: about one value in eight moves one ulp.
static void nondeterministic_bits(float *o, size_t n)
{
    static uint64_t state;
    if (!state) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        state = ((uint64_t)ts.tv_nsec << 20 ^ (uint64_t)getpid() ^ (uint64_t)ts.tv_sec) | 1;
    }
    for (size_t i = 0; i < n; i++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        if (state % 8 == 0) o[i] = nextafterf(o[i], state & 8 ? INFINITY : -INFINITY);
    }
}

size_t cudnnGetVersion(void)
{
    return 0;
}

const char *cudnnGetErrorString(cudnnStatus_t s)
{
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED (fake)";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM (fake)";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED (fake)";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED (fake)";
    }
    return "unknown cuDNN status (fake)";
}

// the library's objects: a handle and the descriptors are plain structs here
template <typename T> static cudnnStatus_t make(T **p)
{
    *p = new T();
    return CUDNN_STATUS_SUCCESS;
}
template <typename T> static cudnnStatus_t drop(T *p)
{
    delete p;
    return CUDNN_STATUS_SUCCESS;
}

// What cudnnSet{Tensor,Filter}4dDescriptor accept: positive sizes, NHWC floats.
static cudnnStatus_t check_4d(cudnnTensorFormat_t format, cudnnDataType_t type, int n, int c, int h,
                              int w)
{
    if (n < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    if (format != CUDNN_TENSOR_NHWC || type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    return make(h);
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
    return drop(h);
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d)
{
    return make(d);
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d)
{
    return drop(d);
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w)
{
    cudnnStatus_t s = check_4d(format, type, n, c, h, w);
    if (s == CUDNN_STATUS_SUCCESS) *d = FakeTensorDesc{1, n, c, h, w};
    return s;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d)
{
    return make(d);
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d)
{
    return drop(d);
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w)
{
    cudnnStatus_t s = check_4d(format, type, k, c, h, w);
    if (s == CUDNN_STATUS_SUCCESS) *d = FakeFilterDesc{1, k, c, h, w};
    return s;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d)
{
    return make(d);
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d)
{
    return drop(d);
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w,
                                              int u, int v, int dil_h, int dil_w,
                                              cudnnConvolutionMode_t mode, cudnnDataType_t compute)
{
    if (pad_h < 0 || pad_w < 0 || u < 1 || v < 1) return CUDNN_STATUS_BAD_PARAM;
    if (dil_h != 1 || dil_w != 1 || mode != CUDNN_CROSS_CORRELATION || compute != CUDNN_DATA_FLOAT)
        return CUDNN_STATUS_NOT_SUPPORTED;
    *d = FakeConvDesc{1, pad_h, pad_w, u, v, d->math};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m)
{
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}

// x, w, conv and y fit together: y's shape is the convolution's output.
static bool conv_fits(const FakeTensorDesc *x, const FakeFilterDesc *w, const FakeConvDesc *cv,
                      const FakeTensorDesc *y)
{
    if (!x->set || !w->set || !cv->set || !y->set) return false;
    const int oh = (x->h + 2 * cv->ph - w->h) / cv->u + 1,
              ow = (x->w + 2 * cv->pw - w->w) / cv->v + 1;
    return x->c == w->c && y->n == x->n && y->c == w->k && y->h == oh && y->w == ow &&
           x->h + 2 * cv->ph >= w->h && x->w + 2 * cv->pw >= w->w;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t conv,
                                                    cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int *n, int *c,
                                                    int *h, int *wd)
{
    if (!conv->set || !x->set || !w->set || x->c != w->c) return CUDNN_STATUS_BAD_PARAM;
    *n = x->n;
    *c = w->k;
    *h = (x->h + 2 * conv->ph - w->h) / conv->u + 1;
    *wd = (x->w + 2 * conv->pw - w->w) / conv->v + 1;
    return CUDNN_STATUS_SUCCESS;
}

template <typename Perf>
static cudnnStatus_t offer(const FakeTensorDesc *x, const FakeFilterDesc *w, const FakeConvDesc *cv,
                           const FakeTensorDesc *y, int requested, int *returned, Perf *perf)
{
    if (!conv_fits(x, w, cv, y) || requested < 1) return CUDNN_STATUS_BAD_PARAM;
    Perf all[FAKE_ALGOS];
    memset(all, 0, sizeof all);
    const int algos[FAKE_ALGOS] = {TENSOR_OP_ALGO, NONDET_FMA_ALGO, FMA_ALGO};
    for (int i = 0; i < FAKE_ALGOS; i++) {
        all[i].algo = (decltype(all[i].algo))algos[i];
        all[i].status = CUDNN_STATUS_SUCCESS;
        all[i].memory = workspace_need(x, algos[i]);
        all[i].mathType = algos[i] == TENSOR_OP_ALGO ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
        all[i].determinism =
            algos[i] == NONDET_FMA_ALGO ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
    }
    // FAKECUDNN_ALGOS=nondeterministic leaves out the deterministic FMA algorithm,
    // =tensor-op both FMA ones (what device.cu does when cuDNN offers no such algorithm)
    const char *only = getenv("FAKECUDNN_ALGOS");
    const int offered = !only                               ? FAKE_ALGOS
                        : !strcmp(only, "nondeterministic") ? 2
                        : !strcmp(only, "tensor-op")        ? 1
                                                            : FAKE_ALGOS;
    *returned = requested < offered ? requested : offered;
    for (int i = 0; i < *returned; i++) perf[i] = all[i];
    return CUDNN_STATUS_SUCCESS;
}

// The workspace queries: what algo needs with these descriptors (the tensor-op
// algorithm is not supported under the FMA math device.cu sets).
static cudnnStatus_t workspace_query(const FakeTensorDesc *x, const FakeFilterDesc *w,
                                     const FakeConvDesc *cv, const FakeTensorDesc *y, int algo,
                                     size_t *bytes)
{
    if (!conv_fits(x, w, cv, y) || !bytes) return CUDNN_STATUS_BAD_PARAM;
    if (algo != FMA_ALGO && algo != NONDET_FMA_ALGO) return CUDNN_STATUS_NOT_SUPPORTED;
    *bytes = workspace_need(x, algo);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                      cudnnFilterDescriptor_t w,
                                                      cudnnConvolutionDescriptor_t conv,
                                                      cudnnTensorDescriptor_t y,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t *bytes)
{
    (void)h;
    return workspace_query(x, w, conv, y, algo, bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t h, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dx,
    cudnnConvolutionBwdDataAlgo_t algo, size_t *bytes)
{
    (void)h;
    return workspace_query(dx, w, conv, dy, algo, bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t h, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dw,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes)
{
    (void)h;
    return workspace_query(x, dw, conv, dy, algo, bytes);
}

// The fake ranks FAKE_ALGOS algorithms of each pass (offer).
static cudnnStatus_t algo_count(cudnnHandle_t h, int *count)
{
    if (!h || !count) return CUDNN_STATUS_BAD_PARAM;
    *count = FAKE_ALGOS;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t h, int *count)
{
    return algo_count(h, count);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t h, int *count)
{
    return algo_count(h, count);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t h, int *count)
{
    return algo_count(h, count);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                     cudnnFilterDescriptor_t w,
                                                     cudnnConvolutionDescriptor_t conv,
                                                     cudnnTensorDescriptor_t y, int requested,
                                                     int *returned,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf)
{
    (void)h;
    return offer(x, w, conv, y, requested, returned, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dx, int requested, int *returned,
    cudnnConvolutionBwdDataAlgoPerf_t *perf)
{
    (void)h;
    return offer(dx, w, conv, dy, requested, returned, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dw, int requested, int *returned,
    cudnnConvolutionBwdFilterAlgoPerf_t *perf)
{
    (void)h;
    return offer(x, dw, conv, dy, requested, returned, perf);
}

// The checks every convolution call makes: descriptors that fit, an FMA algorithm, its
// workspace, and buffers inside device memory.
static cudnnStatus_t conv_check(const FakeTensorDesc *x, const void *xp, const FakeFilterDesc *w,
                                const void *wp, const FakeConvDesc *cv, int algo, void *ws,
                                size_t ws_bytes, const FakeTensorDesc *y, const void *yp)
{
    if (!conv_fits(x, w, cv, y)) return CUDNN_STATUS_BAD_PARAM;
    if ((algo != FMA_ALGO && algo != NONDET_FMA_ALGO) || cv->math != CUDNN_FMA_MATH)
        return CUDNN_STATUS_NOT_SUPPORTED;
    const size_t need = workspace_need(x, algo);
    if (ws_bytes < need || (need && !fake_is_device(ws, need))) return CUDNN_STATUS_BAD_PARAM;
    const size_t xs = (size_t)x->n * x->h * x->w * x->c, ws_ = (size_t)w->k * w->h * w->w * w->c,
                 ys = (size_t)y->n * y->h * y->w * y->c;
    if (!fake_is_device(xp, xs * sizeof(float)) || !fake_is_device(wp, ws_ * sizeof(float)) ||
        !fake_is_device(yp, ys * sizeof(float)))
        return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

// Calls f(xi, wi, yi) for every product x[xi] * w[wi] that contributes to y[yi].
template <typename F>
static void conv_loop(const FakeTensorDesc x, const FakeFilterDesc w, const FakeConvDesc cv,
                      const FakeTensorDesc y, F f)
{
    for (int n = 0; n < y.n; n++)
        for (int oy = 0; oy < y.h; oy++)
            for (int ox = 0; ox < y.w; ox++)
                for (int k = 0; k < y.c; k++)
                    for (int r = 0; r < w.h; r++)
                        for (int s = 0; s < w.w; s++) {
                            const int iy = oy * cv.u - cv.ph + r, ix = ox * cv.v - cv.pw + s;
                            if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) continue;
                            for (int c = 0; c < x.c; c++)
                                f((((size_t)n * x.h + iy) * x.w + ix) * x.c + c,
                                  (((size_t)k * w.h + r) * w.w + s) * w.c + c,
                                  (((size_t)n * y.h + oy) * y.w + ox) * y.c + k);
                        }
}

// Submits out = alpha * sums + beta * out (out not read when beta is 0, as cuDNN has
// it), where sums (n values) gathers add(sums, xi, wi, yi) over conv_loop's products;
// algo NONDET_FMA_ALGO then moves some of them a last bit.
template <typename Add>
static cudnnStatus_t conv_submit(cudnnHandle_t h, int algo, const FakeTensorDesc *x,
                                 const FakeFilterDesc *w, const FakeConvDesc *cv,
                                 const FakeTensorDesc *y, const void *alpha, const void *beta,
                                 void *out, size_t n, Add add)
{
    const float al = *(const float *)alpha, be = *(const float *)beta;
    const FakeTensorDesc X = *x, Y = *y;
    const FakeFilterDesc W = *w;
    const FakeConvDesc C = *cv;
    float *o = (float *)out;
    cudaError_t e = fake_submit(h->stream, [=] {
        std::vector<double> sums(n, 0.0);
        conv_loop(X, W, C, Y, [&](size_t xi, size_t wi, size_t yi) { add(sums, xi, wi, yi); });
        for (size_t i = 0; i < n; i++)
            o[i] = be == 0.0f ? (float)(al * sums[i]) : (float)(al * sums[i] + be * o[i]);
        if (algo == NONDET_FMA_ALGO) nondeterministic_bits(o, n);
    });
    return e == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha,
                                      cudnnTensorDescriptor_t xd, const void *x,
                                      cudnnFilterDescriptor_t wd, const void *w,
                                      cudnnConvolutionDescriptor_t conv,
                                      cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes,
                                      const void *beta, cudnnTensorDescriptor_t yd, void *y)
{
    if (cudnnStatus_t s = conv_check(xd, x, wd, w, conv, algo, ws, ws_bytes, yd, y)) return s;
    const float *xp = (const float *)x, *wp = (const float *)w;
    return conv_submit(h, algo, xd, wd, conv, yd, alpha, beta, y,
                       (size_t)yd->n * yd->h * yd->w * yd->c,
                       [=](std::vector<double> &sums, size_t xi, size_t wi, size_t yi) {
                           sums[yi] += (double)xp[xi] * wp[wi];
                       });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha,
                                           cudnnFilterDescriptor_t wd, const void *w,
                                           cudnnTensorDescriptor_t dyd, const void *dy,
                                           cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *ws,
                                           size_t ws_bytes, const void *beta,
                                           cudnnTensorDescriptor_t dxd, void *dx)
{
    if (cudnnStatus_t s = conv_check(dxd, dx, wd, w, conv, algo, ws, ws_bytes, dyd, dy)) return s;
    const float *wp = (const float *)w, *dyp = (const float *)dy;
    return conv_submit(h, algo, dxd, wd, conv, dyd, alpha, beta, dx,
                       (size_t)dxd->n * dxd->h * dxd->w * dxd->c,
                       [=](std::vector<double> &sums, size_t xi, size_t wi, size_t yi) {
                           sums[xi] += (double)dyp[yi] * wp[wi];
                       });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha,
                                             cudnnTensorDescriptor_t xd, const void *x,
                                             cudnnTensorDescriptor_t dyd, const void *dy,
                                             cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws,
                                             size_t ws_bytes, const void *beta,
                                             cudnnFilterDescriptor_t dwd, void *dw)
{
    if (cudnnStatus_t s = conv_check(xd, x, dwd, dw, conv, algo, ws, ws_bytes, dyd, dy)) return s;
    const float *xp = (const float *)x, *dyp = (const float *)dy;
    return conv_submit(h, algo, xd, dwd, conv, dyd, alpha, beta, dw,
                       (size_t)dwd->k * dwd->h * dwd->w * dwd->c,
                       [=](std::vector<double> &sums, size_t xi, size_t wi, size_t yi) {
                           sums[wi] += (double)dyp[yi] * xp[xi];
                       });
}

// ------------------------------------------------------------------------------------
// NCCL: the ranks of a communicator are processes on this host; they meet in a shared
// memory segment named by the unique id. An all-reduce runs, when its stream gets to it,
// in chunks: each rank puts its chunk in its slot, all wait, each sums the slots in rank
// order (so every rank gets the same bits), all wait again. A wait notices a rank whose
// process is gone (or 120 s without progress): the operation then fails, its stream is
// stuck, as a device's would be behind a collective that cannot finish, and
// ncclCommGetAsyncError says ncclRemoteError; ncclCommAbort releases the stream.

static const int FAKE_NCCL_MAX_RANKS = 64;
static const size_t FAKE_NCCL_CHUNK = (size_t)1 << 18;

struct FakeNcclShared {
    int nranks;
    pid_t pid[64]; // FAKE_NCCL_MAX_RANKS
    int dev[64];   // each rank's device (cudaSetDevice)
    uint64_t arrived; // barrier arrivals, all ranks together
    float slots[];    // nranks x FAKE_NCCL_CHUNK
};

struct FakeNcclComm {
    int pending;      // a non-blocking init still to report ncclInProgress once
    int rank, nranks;
    FakeNcclShared *sh;
    size_t bytes;
    uint64_t barriers;
    ncclResult_t error;
    std::vector<FakeStream *> stuck;
};

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (fake NCCL)";
    case ncclSystemError: return "unhandled system error (fake NCCL)";
    case ncclInternalError: return "internal error (fake NCCL)";
    case ncclInvalidArgument: return "invalid argument (fake NCCL)";
    case ncclInvalidUsage: return "invalid usage (fake NCCL)";
    case ncclRemoteError: return "remote process exited or there was a network error (fake NCCL)";
    case ncclInProgress: return "NCCL operation in progress (fake NCCL)";
    }
    return "unknown NCCL result (fake)";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    uint64_t r = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&r, sizeof r, 1, f) != 1) r = (uint64_t)getpid() * 2654435761u;
    if (f) fclose(f);
    snprintf(id->internal, sizeof id->internal, "/kt-fakenccl-%d-%016llx", (int)getpid(),
             (unsigned long long)r);
    return ncclSuccess;
}

static bool rank_gone(pid_t pid)
{
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); // "pid (comm) S ..."
    return rp && (rp[2] == 'Z' || rp[2] == 'X');
}

// All ranks meet; false when one is gone or nothing moved for 120 s.
static bool fake_nccl_barrier(FakeNcclComm *c)
{
    const uint64_t target = ++c->barriers * (uint64_t)c->nranks;
    __atomic_fetch_add(&c->sh->arrived, 1, __ATOMIC_SEQ_CST);
    for (long spins = 0;; spins++) {
        if (__atomic_load_n(&c->sh->arrived, __ATOMIC_SEQ_CST) >= target) return true;
        if (spins % 64 == 63) {
            for (int r = 0; r < c->nranks; r++)
                if (r != c->rank && rank_gone(__atomic_load_n(&c->sh->pid[r], __ATOMIC_SEQ_CST)))
                    return false;
            if (spins > 64L * 1000 * 120) return false; // ~120 s of 1 ms naps
            usleep(1000);
        }
    }
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    if (strncmp(id.internal, "/kt-fakenccl-", 13) != 0) return ncclInvalidArgument;
    if (nranks < 1 || nranks > FAKE_NCCL_MAX_RANKS || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    const size_t bytes = sizeof(FakeNcclShared) + (size_t)nranks * FAKE_NCCL_CHUNK * sizeof(float);
    int fd = shm_open(id.internal, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return ncclSystemError;
    if (ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        return ncclSystemError;
    }
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return ncclSystemError;
    FakeNcclComm *c = new FakeNcclComm{
        config && !config->blocking, rank, nranks, (FakeNcclShared *)p, bytes, 0, ncclSuccess, {}};
    __atomic_store_n(&c->sh->dev[rank], current_device, __ATOMIC_SEQ_CST);
    __atomic_store_n(&c->sh->pid[rank], getpid(), __ATOMIC_SEQ_CST);
    const bool met = fake_nccl_barrier(c); // every rank has the segment open
    if (rank == 0) shm_unlink(id.internal);
    // NCCL refuses two ranks on one GPU ("Duplicate GPU detected"); the fake's processes
    // are on one host, so one device number is one GPU
    bool duplicate = false;
    for (int r = 0; met && r < nranks; r++)
        duplicate |=
            r != rank && __atomic_load_n(&c->sh->dev[r], __ATOMIC_SEQ_CST) == current_device;
    if (!met || duplicate) {
        munmap(p, bytes);
        delete c;
        return met ? ncclInvalidUsage : ncclRemoteError;
    }
    *comm = c;
    return c->pending ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state)
{
    if (!comm) return ncclInvalidArgument;
    *state = comm->pending ? ncclInProgress : comm->error;
    comm->pending = 0;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    if (!comm || comm->pending || type != ncclFloat || op != ncclSum || !stream)
        return ncclInvalidArgument;
    if (comm->error != ncclSuccess) return comm->error;
    const size_t bytes = count * sizeof(float);
    if (!fake_is_device(send, bytes) || !fake_is_device(recv, bytes)) return ncclInvalidArgument;
    const float *in = (const float *)send;
    float *out = (float *)recv;
    return fake_submit(stream,
                       [=] {
                           FakeNcclComm *c = comm;
                           float *mine = c->sh->slots + (size_t)c->rank * FAKE_NCCL_CHUNK;
                           for (size_t off = 0; off < count; off += FAKE_NCCL_CHUNK) {
                               const size_t n =
                                   count - off < FAKE_NCCL_CHUNK ? count - off : FAKE_NCCL_CHUNK;
                               memcpy(mine, in + off, n * sizeof(float));
                               bool ok = fake_nccl_barrier(c);
                               for (size_t i = 0; ok && i < n; i++) {
                                   float sum = 0.0f;
                                   for (int r = 0; r < c->nranks; r++)
                                       sum += c->sh->slots[(size_t)r * FAKE_NCCL_CHUNK + i];
                                   out[off + i] = sum;
                               }
                               if (!ok || !fake_nccl_barrier(c)) {
                                   c->error = ncclRemoteError;
                                   stream->stuck = true;
                                   c->stuck.push_back(stream);
                                   return;
                               }
                           }
                       }) == cudaSuccess
               ? ncclSuccess
               : ncclUnhandledCudaError;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    return comm ? ncclSuccess : ncclInvalidArgument;
}

static void fake_nccl_free(FakeNcclComm *c)
{
    for (FakeStream *st : c->stuck) // the collective is gone: the stream moves on
        for (FakeStream *live : live_streams)
            if (live == st) st->stuck = false;
    munmap(c->sh, c->bytes);
    delete c;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (comm) fake_nccl_free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (comm) fake_nccl_free(comm);
    return ncclSuccess;
}
