/* net — the rendezvous: every worker listens on its own port, connects to the next
 * rank and accepts the previous one, so that the workers form a ring of TCP
 * connections. Peers are resolved with retries (DNS has no record while a pod starts)
 * and connected with backoff until the rendezvous deadline.
 *
 * Each connection is authenticated by a mutual challenge-response over the per-job
 * secret: both sides send a fresh 32-byte nonce and prove the secret with
 * HMAC-SHA256 (OpenSSL) over the whole transcript, compared in constant time. The
 * handshake also checks that both agree on world size, model signature, global batch
 * and dataset, and that their ranks are the expected, distinct neighbours. A
 * connection that fails authentication, sends garbage or oversized frames, or trickles
 * past the handshake timeout is logged and dropped, and the listener goes on waiting
 * for the real peer; a flood of connections cannot push the real peer's handshake out
 * (the slot rules are in net.c).
 *
 * Whoever answers at a peer's address is not trusted to be that peer until it proves
 * the secret and its rank: a wrong MAC, a wrong rank, or something that does not speak
 * the handshake (a stale DNS record, a port clash) is logged and the worker connects
 * again until the rendezvous deadline. Only a disagreement from a peer that proved the
 * secret (same job, other world size, model, global batch or dataset, or other members
 * of the ring) ends the rendezvous at once: no retry mends the first kind, and a new
 * members list, which the caller reads, mends the second. */
#ifndef KT_NET_H
#define KT_NET_H

#include "tfconfig.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define NET_SECRET_MAX 4096
#define NET_NAME_MAX (TFCONFIG_HOST_MAX + 32)

/* What every worker of one job must agree on. */
typedef struct NetJob {
    int world;                   /* number of workers */
    int rank;                    /* this worker */
    const char *model_signature; /* the model's description, compared as a string */
    uint64_t global_batch;       /* per-worker batch x workers */
    const char *dataset;         /* data set name */
    /* Live recovery (docs/design.md, "Live recovery"): the ring generation this worker
     * proposes (the last one it formed + 1; the first ring is generation 1) and whether
     * it holds training state (0: a fresh process). A peer that holds state but
     * proposes a lower generation than this worker is a process of an earlier ring
     * that missed a recovery: it is refused (logged, naming it), and the rendezvous
     * waits on for the real peer. A fresh peer may join any generation; a higher one
     * is accepted (it missed nothing: the state sync after the rendezvous gives every
     * rank the newest state and the highest generation). */
    uint32_t generation;
    int has_state;
    /* This process, as a random number drawn when it starts (nonzero), and the processes
     * of the last ring it formed (last_ring_n of them; NULL: none yet). A peer that holds
     * state and proposes a lower generation but is one of those processes is no process
     * of an earlier ring: it took part in the sync that formed that ring and saw it fail
     * where this worker saw it complete (a ring's last operation can complete on some
     * ranks and not on others), so it holds that ring's state or an older one of the same
     * run, and it is accepted (docs/design.md, "Live recovery"). */
    uint64_t incarnation;
    const uint64_t *last_ring;
    int last_ring_n;
    /* Elastic jobs (docs/design.md, "Elastic jobs"): the ring's workers as TF_CONFIG
     * indices, ascending (world of them), out of the cluster's `cluster` (TF_CONFIG's
     * workers and those past it that the members list gave addresses); NULL: not elastic,
     * the ring is the whole cluster. A peer that names other members, whatever its
     * cluster, is told apart from one configured otherwise: its members list may simply
     * not have changed yet (or not name a new worker's address yet). */
    const int *members;
    int cluster;
} NetJob;

typedef struct NetOptions {
    double rendezvous_timeout_s;  /* the whole rendezvous: DNS, connects and handshakes */
    double handshake_timeout_s;   /* one connection's handshake (either way), start to end */
    const unsigned char *secret;  /* the job secret; NULL or empty: unauthenticated */
    size_t secret_len;
    int sockbuf_bytes;            /* SO_SNDBUF/SO_RCVBUF; 0 leaves the kernel's autotuning */
    /* NULL, or a flag (set by a signal handler) that ends the rendezvous with -EINTR
     * within about 0.1 s of being set: a survivor waiting for a replacement must save
     * and leave when stopped, not wait out its deadline */
    const volatile sig_atomic_t *stop;
    /* NULL, or called about every 0.1 s while the rendezvous waits, on the caller's
     * thread; nonzero ends the rendezvous with -EINTR as stop does (a live recovery's
     * watch of its members file) */
    int (*poll)(void *arg);
    void *poll_arg;
} NetOptions;

/* The two ring connections of one worker: it receives from prev and sends to next.
 * In a world of one both are -1. Sockets are non-blocking, TCP_NODELAY. */
typedef struct NetRing {
    int prev_fd;
    int next_fd;
    char prev_name[NET_NAME_MAX]; /* "rank 2 (host:port)", for error messages */
    char next_name[NET_NAME_MAX];
} NetRing;

/* The handshake's HELLO (client) and CHALLENGE (server) description of a worker.
 * Wire form, after the frame's u32 length: "KTH1", the type byte, the nonce, u32 world,
 * u32 rank, u64 global batch (little-endian), then signature and dataset, each a u16
 * length and that many bytes (no NUL, under NET_HELLO_STR_MAX), then u32 generation and
 * one byte: 1 when the sender holds training state, else 0 (NetJob), then u16 cluster
 * (TF_CONFIG's workers, 1..NET_MEMBERS_MAX) and the ring's members as a bitmap of
 * ceil(cluster / 8) bytes, TF_CONFIG index i in bit i % 8 of byte i / 8, the bits past
 * cluster zero, then u64 incarnation (NetJob). */
#define NET_NONCE_BYTES 32
#define NET_HELLO_STR_MAX 512
#define NET_MEMBERS_MAX 4096 /* TF_CONFIG's workers at most (tfconfig.c) */
/* ANNOUNCE is a HELLO sent to rank-1 by a worker that only tells it where it is (the
 * address announcements of net_rendezvous); the same fields, answered the same way. */
enum { NET_MSG_HELLO = 1, NET_MSG_CHALLENGE = 2, NET_MSG_ANNOUNCE = 5 };

typedef struct NetHello {
    unsigned char nonce[NET_NONCE_BYTES];
    uint32_t world, rank;
    uint64_t global_batch;
    char signature[NET_HELLO_STR_MAX]; /* NUL-terminated */
    char dataset[NET_HELLO_STR_MAX];
    uint32_t generation;
    uint8_t has_state;
    uint16_t cluster;
    unsigned char members[NET_MEMBERS_MAX / 8];
    uint64_t incarnation;
} NetHello;

/* The bytes net_hello_encode may write. */
#define NET_HELLO_MAX (72 + 2 * NET_HELLO_STR_MAX + 2 + NET_MEMBERS_MAX / 8)

/* Encodes h as a payload of `type` (NET_MSG_HELLO or NET_MSG_CHALLENGE, without the
 * CHALLENGE's mac) into buf, which holds at least NET_HELLO_MAX bytes;
 * strings longer than NET_HELLO_STR_MAX - 1 are cut. Returns the length. */
size_t net_hello_encode(unsigned char *buf, int type, const NetHello *h);

/* Decodes the n-byte payload of one frame received from a peer that is not yet
 * authenticated: a `type` message whose fields *used bytes span (a CHALLENGE carries
 * its mac after them). Pure; reads only buf[0, n). Returns 0 with *h filled, or
 * -EBADMSG with *why (a static string) saying what is wrong. */
int net_hello_decode(const unsigned char *buf, size_t n, int type, NetHello *h, size_t *used,
                     const char **why);

/* Reads the job secret from $KUBETRAIN_SECRET, or from the file named by
 * $KUBETRAIN_SECRET_FILE (one trailing newline stripped). With neither, sets *secret
 * NULL and *len 0 and logs a warning that peers are not authenticated. Returns 0 or
 * -EINVAL/-errno (unreadable or empty file) with err naming the variable. The caller
 * frees *secret with free(). */
int net_secret_load(unsigned char **secret, size_t *len, char *err, size_t errlen);

/* Opens a listening TCP socket on host:port (host NULL: every address, IPv6 and
 * IPv4; port 0: a free port). *bound_port receives the port actually bound. Returns 0
 * with *fd set, or a negative errno with err naming the address. Caller closes *fd. */
int net_listen(const char *host, int port, int sockbuf_bytes, int *fd, int *bound_port, char *err,
               size_t errlen);

/* Opens this worker's rendezvous listener on port: on host (its own TF_CONFIG entry)
 * when host resolves to an address of this machine, so that a worker whose peers are on
 * 127.0.0.1 (launch) is not reachable from other machines; otherwise on every interface,
 * logged. The fallback is for names that do not resolve yet, or not to a local address
 * (a pod's headless-service name before its DNS record exists, a stale record, NAT):
 * there the worker must still be reachable, and a pod's own network namespace holds
 * only its pod IP and loopback anyway. Returns like net_listen; a port already taken
 * is an error, not a reason to fall back. */
int net_listen_task(const char *host, int port, int sockbuf_bytes, int *fd, int *bound_port,
                    char *err, size_t errlen);

/* Forms this worker's part of the ring: connects and authenticates to rank+1 (from
 * tf->peers) while accepting and authenticating rank-1 on listen_fd, which it does not
 * close (close it afterwards, so that late connections are refused, not queued).
 *
 * Address announcements: a name that does not resolve yet (a pod whose DNS record is not
 * published, or whose absence the cluster DNS has cached as a negative answer for its
 * TTL, up to 30 s on a default cluster) or resolves to a gone address (a replaced pod)
 * must not hold the ring up while the peer itself can say where it is. So in a ring of
 * three or more each worker also connects to rank-1 and runs the handshake as an
 * ANNOUNCE; rank-1 takes the source address of an announcement that proved the job
 * secret and rank+1's rank as rank+1's address (at rank+1's TF_CONFIG port), tried
 * before the name, and closes it. In a ring of two, rank-1 is rank+1 and its ring
 * connection tells the same. Until its connection to rank+1 is made, a worker keeps
 * serving announcements after rank-1 has connected.
 *
 * The listener may stay open for the whole run and serve the rendezvous again after a
 * lost peer (live recovery): connections that queued in between are handshaken then.
 * Returns 0 with *out filled, or a negative errno and one line in err:
 * -EINTR when opt->stop was set;
 * -ETIMEDOUT when the ring did not form before the deadline (the line says what answered
 * or connected instead, if anything: a wrong secret, a wrong rank, a silent port), so
 * retryable; -ESTALE when a peer that proved the job secret names other members of the
 * ring (NetJob.members; the line names the peer and both lists), which a change of
 * either side's list mends; -EPROTO when such a peer disagrees about world size, model
 * signature, global batch or dataset (the line names both values), which nothing does.
 * The caller closes out's sockets (or hands them to ring_create). */
int net_rendezvous(int listen_fd, const TfConfig *tf, const NetJob *job, const NetOptions *opt,
                   NetRing *out, char *err, size_t errlen);

/* Sets TCP_NODELAY, O_NONBLOCK and (when bytes > 0) SO_SNDBUF/SO_RCVBUF on fd. */
int net_tune_socket(int fd, int sockbuf_bytes);

#endif
