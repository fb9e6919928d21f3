/* A CPU stand-in for the NCCL calls of trainer/src/gpu/coll_nccl.c (tests only; see
 * cuda_runtime.h here). The ranks of a communicator are processes on one host that meet
 * in a shared memory segment named by the unique id (the trainer carries the id over its
 * authenticated ring, as with real NCCL); all-reduce sums in rank order, so every rank
 * gets the same bits. A rank whose process is gone makes the others' operation fail the
 * way a lost peer does on a device: the stream stays stuck, ncclCommGetAsyncError says
 * ncclRemoteError, ncclCommAbort releases it. The non-blocking protocol is kept: a
 * non-blocking init reports ncclInProgress once; two ranks on one device are refused with
 * ncclInvalidUsage, as NCCL refuses them. Says nothing about NCCL's transports,
 * speed or real failure modes. */
#ifndef KT_FAKE_NCCL_H
#define KT_FAKE_NCCL_H

#include <stddef.h>

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;
typedef enum { ncclFloat32 = 7, ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef struct FakeNcclComm *ncclComm_t;
typedef struct {
    size_t size;
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {sizeof(ncclConfig_t), 1}

const char *ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);

#ifdef __cplusplus
}
#endif

#endif
