/* overlap — the CPU gradient all-reduce, overlapped with the backward pass.
 *
 * model_step hands each layer's gradient slice to overlap_ready as soon as backward has
 * written it, last layer first. The slices are gathered into chunks of at least
 * OVERLAP_CHUNK_FLOATS (a rule of the slice sizes alone, so every rank issues the same
 * sequence of collectives), and a thread of its own all-reduces each chunk while the
 * backward pass goes on. overlap_finish hands over what is left and the step's
 * statistics, and waits. The collective is used by that thread only between the first
 * overlap_ready of a step and the return of its overlap_finish. */
#ifndef KT_OVERLAP_H
#define KT_OVERLAP_H

#include <stddef.h>

#include "collective.h"

#define OVERLAP_CHUNK_FLOATS 32768

typedef struct Overlap Overlap;

/* For all-reduces of slices of buf over c (both borrowed), at most max_slices per step
 * (the layers with parameters, plus one). Starts the thread. */
Overlap *overlap_create(Collective *c, float *buf, int max_slices);

/* A GradReadyFn (model.h): buf[offset, offset+count) is final. Slices must come from
 * the end of buf towards its start, back to back. */
void overlap_ready(void *ctx, size_t offset, size_t count);

/* Hands over the slices gathered and not yet sent, then buf[offset, offset+count) (the
 * step statistics), and waits until every all-reduce of the step is done. Returns 0, or
 * the first all-reduce's negative errno with its reason in err (the later ones of the
 * step are then skipped). */
int overlap_finish(Overlap *o, size_t offset, size_t count, char *err, size_t errlen);

/* An all-reduce of the caller's in the middle of a step (a synchronized
 * BatchNormalization's sums, layers.h's BnSync), a CollAllreduceFn: waits until the
 * chunks queued before it are all-reduced, then all-reduces buf[0, n) (not of the arena)
 * on the caller's thread, so that it keeps its place among the step's collectives on
 * every rank; the slices gathered and not yet queued go after it, as they would have.
 * Returns 0, or a negative errno with err: its own, or a queued chunk's (then not
 * tried); either way overlap_finish returns it too and the step's later chunks are
 * skipped. */
int overlap_allreduce(void *o, float *buf, size_t n, char *err, size_t errlen);

/* Stops the thread and frees o; NULL is a no-op. */
void overlap_free(Overlap *o);

#endif
