#include "gpu/coll_nccl.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "util.h"

typedef struct {
    Collective base;
    Collective *boot;     /* owned: the id exchange, broadcast and barrier */
    ncclComm_t comm;      /* NULL once aborted */
    cudaStream_t stream;
    cudaEvent_t done;     /* coll_nccl_allreduce_event's */
    double timeout_s;
    float *stage;         /* device copy of host buffers handed to allreduce_sum */
    size_t stage_n;
} Nccl;

/* Between two polls of a wait that began `waited` seconds ago. The first 20 ms only
 * yield the core, as CUDA's own synchronize spins: the host waits here for every step
 * (the statistics behind the all-reduce), and a one-rank or NVLink all-reduce takes tens
 * of microseconds, so a nap of even 0.1 ms (the kernel's timer slack on top) would cost
 * more than that. After that it naps 1% of the time waited so far, at most 1 ms: a slow
 * step loses about 1%, and a stall (a lost peer, until the timeout) costs no core. */
static void pause_poll(double waited)
{
    if (waited < 0.02) {
        sched_yield();
        return;
    }
    double nap = waited / 100 < 0.001 ? waited / 100 : 0.001;
    struct timespec ts = {0, (long)(nap * 1e9)};
    nanosleep(&ts, NULL);
}

/* 0, with err filled, when an earlier failure aborted the communicator. */
static int alive(Nccl *c, char *err, size_t errlen)
{
    if (!c->comm) snprintf(err, errlen, "nccl all-reduce: the communicator was aborted earlier");
    return c->comm != NULL;
}

/* Fills err with "nccl <what>: <why>", aborts the communicator, returns rc. */
static int aborted(Nccl *c, int rc, char *err, size_t errlen, const char *what, const char *why)
{
    snprintf(err, errlen, "nccl %s: %s", what, why);
    if (c->comm) ncclCommAbort(c->comm);
    c->comm = NULL;
    return rc;
}

/* An asynchronous NCCL error: the usual sign of a lost peer. */
static int lost(Nccl *c, char *err, size_t errlen, const char *what, const char *why)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s (a peer lost?)", why);
    return aborted(c, -EIO, err, errlen, what, buf);
}

/* Waits until the communicator leaves ncclInProgress (init, or an operation enqueued on
 * a non-blocking communicator); aborts it on an error or after the timeout. */
static int wait_comm(Nccl *c, const char *what, char *err, size_t errlen)
{
    double t0 = util_now();
    for (;;) {
        ncclResult_t st;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
        if (r != ncclSuccess) st = r;
        if (st == ncclSuccess) return 0;
        if (st != ncclInProgress) return lost(c, err, errlen, what, ncclGetErrorString(st));
        double waited = util_now() - t0;
        if (waited > c->timeout_s)
            return aborted(c, -ETIMEDOUT, err, errlen, what,
                           "no progress within the timeout (a peer lost?)");
        pause_poll(waited);
    }
}

/* Waits for `ev` (NULL: the collective's stream) to be done, watching the communicator
 * for async errors. The timeout runs from when `since` (NULL: the call) has fired, and
 * from one timeout after the call at the latest (never a hang). */
static int watch(Nccl *c, cudaEvent_t ev, cudaEvent_t since, const char *what, char *err,
                 size_t errlen)
{
    const double start = util_now();
    double t0 = start;
    for (;;) {
        cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(c->stream);
        if (e == cudaSuccess) return 0;
        if (e == cudaErrorNotReady && since) {
            /* this rank's own work still running is no stalled peer: the clock waits */
            cudaError_t s = cudaEventQuery(since);
            double now = util_now();
            if (s == cudaErrorNotReady && now - start < c->timeout_s) t0 = now;
            else if (s != cudaErrorNotReady) since = NULL;
            if (s != cudaSuccess && s != cudaErrorNotReady) e = s;
        }
        if (e != cudaErrorNotReady) { /* the device's error, not the peers' */
            char buf[256];
            snprintf(buf, sizeof buf, "a CUDA error while waiting: %s", cudaGetErrorString(e));
            return aborted(c, -EIO, err, errlen, what, buf);
        }
        ncclResult_t st;
        if (ncclCommGetAsyncError(c->comm, &st) == ncclSuccess && st != ncclSuccess &&
            st != ncclInProgress)
            return lost(c, err, errlen, what, ncclGetErrorString(st));
        double waited = util_now() - t0;
        if (waited > c->timeout_s)
            return aborted(c, -ETIMEDOUT, err, errlen, what,
                           "not done within the timeout (a peer lost?)");
        pause_poll(waited);
    }
}

static int nccl_allreduce_sum(Collective *base, float *buf, size_t n, char *err, size_t errlen)
{
    Nccl *c = (Nccl *)base;
    if (!alive(c, err, errlen)) return -EIO;
    struct cudaPointerAttributes pa;
    int on_device = cudaPointerGetAttributes(&pa, buf) == cudaSuccess &&
                    (pa.type == cudaMemoryTypeDevice || pa.type == cudaMemoryTypeManaged);
    cudaGetLastError(); /* a host pointer may leave an error behind on old runtimes */
    float *dev = buf;
    cudaError_t e = cudaSuccess;
    if (!on_device) {
        if (n > c->stage_n) {
            cudaFree(c->stage);
            c->stage = NULL;
            c->stage_n = 0;
            if ((e = cudaMalloc((void **)&c->stage, n * sizeof(float))) != cudaSuccess) goto cuda;
            c->stage_n = n;
        }
        dev = c->stage;
        e = cudaMemcpyAsync(dev, buf, n * sizeof(float), cudaMemcpyHostToDevice, c->stream);
        if (e != cudaSuccess) goto cuda;
    }
    ncclResult_t r = ncclAllReduce(dev, dev, n, ncclFloat, ncclSum, c->comm, c->stream);
    if (r != ncclSuccess && r != ncclInProgress)
        return aborted(c, -EIO, err, errlen, "all-reduce", ncclGetErrorString(r));
    int rc = r == ncclInProgress ? wait_comm(c, "all-reduce", err, errlen) : 0;
    /* the all-reduce done first, watched for a lost peer: a copy to pageable memory
     * returns only when it is done, so queued behind a stuck all-reduce it would hang */
    if (!rc) rc = watch(c, NULL, NULL, "all-reduce", err, errlen);
    if (!rc && !on_device) {
        e = cudaMemcpyAsync(buf, dev, n * sizeof(float), cudaMemcpyDeviceToHost, c->stream);
        if (e != cudaSuccess) goto cuda;
        rc = watch(c, NULL, NULL, "all-reduce", err, errlen);
    }
    return rc;
cuda:
    return aborted(c, -EIO, err, errlen, "all-reduce staging", cudaGetErrorString(e));
}

int coll_nccl_allreduce_start(Collective *base, float *dev, size_t n, void *after, char *err,
                              size_t errlen)
{
    Nccl *c = (Nccl *)base;
    if (!alive(c, err, errlen)) return -EIO;
    cudaError_t e;
    if (after && (e = cudaStreamWaitEvent(c->stream, (cudaEvent_t)after, 0)) != cudaSuccess)
        return aborted(c, -EIO, err, errlen, "all-reduce", cudaGetErrorString(e));
    ncclResult_t r = ncclAllReduce(dev, dev, n, ncclFloat, ncclSum, c->comm, c->stream);
    if (r != ncclSuccess && r != ncclInProgress)
        return aborted(c, -EIO, err, errlen, "all-reduce", ncclGetErrorString(r));
    return r == ncclInProgress ? wait_comm(c, "all-reduce", err, errlen) : 0;
}

int coll_nccl_allreduce_event(Collective *base, void **event, char *err, size_t errlen)
{
    Nccl *c = (Nccl *)base;
    if (!alive(c, err, errlen)) return -EIO;
    cudaError_t e = cudaEventRecord(c->done, c->stream);
    if (e != cudaSuccess) return aborted(c, -EIO, err, errlen, "all-reduce", cudaGetErrorString(e));
    *event = c->done;
    return 0;
}

int coll_nccl_wait_event(Collective *base, void *event, void *since, char *err, size_t errlen)
{
    Nccl *c = (Nccl *)base;
    if (!alive(c, err, errlen)) return -EIO;
    return watch(c, (cudaEvent_t)event, (cudaEvent_t)since, "all-reduce", err, errlen);
}

static int nccl_broadcast(Collective *base, void *buf, size_t n, int root, char *err, size_t errlen)
{
    Nccl *c = (Nccl *)base;
    return coll_broadcast(c->boot, buf, n, root, err, errlen);
}

static int nccl_barrier(Collective *base, char *err, size_t errlen)
{
    Nccl *c = (Nccl *)base;
    return coll_barrier(c->boot, err, errlen);
}

static void nccl_destroy(Collective *base)
{
    Nccl *c = (Nccl *)base;
    char err[256];
    /* non-blocking: finalize completes asynchronously (wait_comm aborts on a stall) */
    if (c->comm && ncclCommFinalize(c->comm) == ncclInProgress)
        wait_comm(c, "finalize", err, sizeof err);
    if (c->comm) ncclCommDestroy(c->comm);
    if (c->done) cudaEventDestroy(c->done);
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaFree(c->stage);
    coll_destroy(c->boot);
    free(c);
}

Collective *coll_nccl_create(Collective *boot, int device, double timeout_s, char *err,
                             size_t errlen)
{
    Nccl *c = xcalloc(1, sizeof *c);
    c->boot = boot;
    c->timeout_s = timeout_s;
    c->base.rank = boot->rank;
    c->base.world = boot->world;
    c->base.name = "nccl";
    c->base.device_buffers = 1;
    c->base.allreduce_sum = nccl_allreduce_sum;
    c->base.broadcast = nccl_broadcast;
    c->base.barrier = nccl_barrier;
    c->base.destroy = nccl_destroy;

    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "nccl: CUDA device %d: %s", device, cudaGetErrorString(e));
        goto fail;
    }
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (boot->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) {
        snprintf(err, errlen, "nccl: ncclGetUniqueId: %s", ncclGetErrorString(r));
        goto fail;
    }
    char berr[512];
    if (coll_broadcast(boot, &id, sizeof id, 0, berr, sizeof berr)) {
        snprintf(err, errlen, "nccl: sending the unique id from the chief: %s", berr);
        goto fail;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    r = ncclCommInitRankConfig(&c->comm, boot->world, id, boot->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        snprintf(err, errlen, "nccl: ncclCommInitRankConfig (rank %d of %d): %s", boot->rank,
                 boot->world, ncclGetErrorString(r));
        if (c->comm) ncclCommAbort(c->comm);
        c->comm = NULL;
        goto fail;
    }
    if (wait_comm(c, "communicator init", err, errlen)) goto fail;
    return &c->base;
fail:
    nccl_destroy(&c->base);
    return NULL;
}
