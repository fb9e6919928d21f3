/* shm — all-reduce through shared memory for ranks on one host (collective.h).
 *
 * shm_wrap puts a collective around the TCP ring. Until coll_share_arena it is the ring
 * itself. coll_share_arena moves the gradient arena (page-aligned, mapped alone:
 * model_grads_bytes) into a POSIX shared-memory object of this rank's, exchanges the
 * objects' random names over the ring (authenticated at rendezvous), and opens every
 * peer's object read-only. Where that works for every rank — workers on one machine,
 * as `kubetrain-trainer launch` starts them — an all-reduce of a slice of the arena
 * needs no socket copies: after a barrier each rank sums its 1/world of the slice from
 * every rank's memory, in rank order, into its own arena; after a second barrier it
 * copies the other ranks' sums from theirs; a third barrier keeps a rank from writing
 * the next step's gradients while a peer still reads them. The sum of each element is
 * formed by one rank in a fixed order, so every rank has the same bits, run after run.
 * Where any rank cannot open a peer's object (pods on different nodes, or on one node
 * but with /dev/shm of their own) every rank keeps the ring, which also carries the
 * barriers, broadcasts, small all-reduces and every failure report (a lost peer fails
 * the next barrier with the ring's message). The objects are unlinked as soon as every
 * rank has opened them, so nothing is left in /dev/shm. A name from a peer that is not
 * one a trainer makes (/kubetrain-<pid>-<32 hex digits>, NUL-terminated) is never
 * opened: every rank keeps the ring, and the rank that saw it logs it with the sender's
 * rank.
 *
 * KUBETRAIN_SHM=0 in the environment of any rank keeps every rank's all-reduces on the
 * ring. */
#ifndef KT_SHM_H
#define KT_SHM_H

#include "collective.h"

/* All-reduces smaller than this go over the ring: three barriers cost more than one
 * small exchange. */
#define SHM_MIN_BYTES (256 * 1024)

/* Wraps ring (world > 1), which it owns from now on. Never NULL. */
Collective *shm_wrap(Collective *ring);

/* 1 when the wrapped collective all-reduces through shared memory. */
int shm_active(const Collective *c);

#endif
