/* coll_nccl — the `nccl` collective (collective.h) for make GPU=1 builds.
 *
 * The chief's ncclUniqueId travels over a bootstrap collective (the TCP ring formed by
 * the authenticated rendezvous, or the local one for a world of one); the communicator
 * is created non-blocking and polled, so that nothing waits longer than timeout_s.
 * allreduce_sum runs on the collective's own stream over device pointers (host
 * pointers are staged through a device buffer); broadcast and barrier, which the
 * trainer calls on host buffers before training, go over the bootstrap collective. On
 * an error or a timeout the communicator is aborted (ncclCommAbort) and every later call
 * fails at once, so a lost peer ends the worker with exit 75 rather than a hang. */
#ifndef KT_COLL_NCCL_H
#define KT_COLL_NCCL_H

#include <stddef.h>

#include "collective.h"

/* A collective of boot->world ranks (this one boot->rank) on CUDA device `device`.
 * Takes ownership of boot (destroyed with the result, or on failure). Returns NULL with
 * one line in err when the id exchange, the device or the communicator fail. */
Collective *coll_nccl_create(Collective *boot, int device, double timeout_s, char *err,
                             size_t errlen);

/* Starts the all-reduce (sum, in place) of dev[0, n), device memory, on the
 * collective's stream once the CUDA event `after` (a cudaEvent_t; NULL: at once) has
 * fired, and returns without waiting for it. c must be an nccl collective. */
int coll_nccl_allreduce_start(Collective *c, float *dev, size_t n, void *after, char *err,
                              size_t errlen);

/* Records on the collective's stream, after every all-reduce started so far, an event
 * (a cudaEvent_t owned by c, recorded again by the next call) and returns it in *event:
 * a stream that waits for it sees the reduced buffers. The host does not wait. */
int coll_nccl_allreduce_event(Collective *c, void **event, char *err, size_t errlen);

/* Waits on the host until `event` (a cudaEvent_t of c's device, on any stream) has
 * fired, watching the communicator as allreduce_sum does: an NCCL error or no progress
 * within the timeout aborts it and fails. The timeout runs from when the event `since`
 * (NULL: the call; the trainer's: its step's) has fired, so this rank's own compute is
 * not counted against its peers (but from one timeout after the call at the latest).
 * For a stream that waits behind the all-reduce, a plain synchronize would hang on a
 * lost peer. */
int coll_nccl_wait_event(Collective *c, void *event, void *since, char *err, size_t errlen);

#endif
