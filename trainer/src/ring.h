/* ring — the Collective over TCP for CPU workers (collective.h). Each rank receives
 * from rank-1 and sends to rank+1 on the connections that net_rendezvous formed.
 *
 * All-reduce is reduce-scatter then all-gather: the buffer is cut into `world` chunks
 * and each chunk into segments of about 1 MiB; a segment is forwarded as soon as it has
 * been received and reduced, so sends of one segment overlap receives of the next
 * (non-blocking sockets and poll). For large buffers a send thread streams to the next
 * rank while the calling thread receives and reduces, so that both directions' copies
 * proceed at once; small ones stay on one thread, where a hand-off would cost more
 * than it saves. Each chunk is summed in a fixed order
 * along the ring and reaches every rank by copy, so the result has the same bits on
 * every rank and from run to run.
 *
 * Every operation first exchanges a small header (operation, sequence number, size) so
 * that ranks calling different collectives fail with a message instead of corrupting
 * data. A peer that closes, resets, or sends nothing for io_timeout_s fails the
 * operation with an error naming it; after a failure every call fails the same way. */
#ifndef KT_RING_H
#define KT_RING_H

#include "collective.h"
#include "net.h"

#include <stddef.h>

typedef struct RingOptions {
    double io_timeout_s;     /* silence that counts as a lost peer; 0: 10 s */
    size_t segment_bytes;    /* pipelining unit; 0: 1 MiB */
    size_t thread_min_bytes; /* all-reduces this large use the send thread; 0: 1 MiB,
                                SIZE_MAX: never (one thread does everything) */
    /* While *watch_next is nonzero (NULL: never), an operation also fails when rank+1
     * closes its connection, though this rank only waits to receive: rank+1 left the
     * ring (in a ring of three or more that connection carries nothing back, so a
     * failure reaches rank-1 only so). For the ring's setup (the first operations
     * after a rendezvous, which every rank completes before any leaves); not later,
     * when rank+1 may close first having finished the ring's last operation. */
    const volatile int *watch_next;
} RingOptions;

/* Returns the ring collective for `rank` of `world` over the connections in *conn
 * (from net_rendezvous), whose sockets it takes over and closes in coll_destroy. With
 * world 1 it returns the local collective. opt NULL takes the defaults. The caller
 * frees the result with coll_destroy. */
Collective *ring_create(int rank, int world, const NetRing *conn, const RingOptions *opt);

#endif
