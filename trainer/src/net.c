#include "net.h"

#include "dnsprobe.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Handshake frames: u32 little-endian length, then a payload that starts with
 * "KTH1" and a type byte.
 *   HELLO     (client) nonce[32] world rank global_batch signature dataset generation
 *             has_state cluster members incarnation
 *   CHALLENGE (server) the same fields with the server's nonce, then
 *             mac = HMAC(secret, "server" | HELLO | CHALLENGE without mac)
 *   PROOF     (client) mac = HMAC(secret, "client" | HELLO | CHALLENGE)
 *   ACK       (server) accepted
 * A connection that only announces its client's address (net.h) starts with ANNOUNCE,
 * a HELLO of another type byte, and goes on the same way; the type byte is in both MACs.
 * Each side's MAC covers both nonces and both job descriptions, so neither a replay
 * nor an altered description passes. */
#define FRAME_MAX 2048
_Static_assert(NET_HELLO_MAX + 32 <= FRAME_MAX, "a CHALLENGE with its mac fits a frame");
#define NONCE_BYTES NET_NONCE_BYTES
#define MAC_BYTES 32
#define STR_MAX NET_HELLO_STR_MAX
enum {
    MSG_HELLO = NET_MSG_HELLO,
    MSG_CHALLENGE = NET_MSG_CHALLENGE,
    MSG_PROOF = 3,
    MSG_ACK = 4,
    MSG_ANNOUNCE = NET_MSG_ANNOUNCE
};

int net_tune_socket(int fd, int sockbuf_bytes)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) return -errno;
    /* A peer whose machine vanished (node lost, network partition) while the ring is
     * idle — the chief checkpointing or evaluating — is noticed by the kernel: keepalive
     * probes after 5 s of silence, every 2 s, 3 unanswered end the connection, so the
     * next collective fails at once instead of waiting out its IO timeout; and data sent
     * but not acknowledged for 20 s ends it too. A live but stuck process still answers
     * at the TCP level: that case is the ring's IO timeout. */
    int idle = 5, intvl = 2, cnt = 3;
    unsigned int user_timeout_ms = 20000;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
    if (sockbuf_bytes > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf_bytes, sizeof sockbuf_bytes);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf_bytes, sizeof sockbuf_bytes);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
    return 0;
}

int net_secret_load(unsigned char **secret, size_t *len, char *err, size_t errlen)
{
    *secret = NULL;
    *len = 0;
    const char *env = getenv("KUBETRAIN_SECRET");
    if (env && *env) {
        *len = strnlen(env, NET_SECRET_MAX);
        *secret = xmalloc(*len);
        memcpy(*secret, env, *len);
        return 0;
    }
    const char *path = getenv("KUBETRAIN_SECRET_FILE");
    if (!path || !*path) {
        util_log("warning: neither KUBETRAIN_SECRET nor KUBETRAIN_SECRET_FILE is set; peers are "
                 "not authenticated (acceptable for local use only)");
        return 0;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "KUBETRAIN_SECRET_FILE %s: %s", path, strerror(e));
        return -e;
    }
    unsigned char *buf = xmalloc(NET_SECRET_MAX);
    size_t n = fread(buf, 1, NET_SECRET_MAX, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
    if (n == 0) {
        free(buf);
        snprintf(err, errlen, "KUBETRAIN_SECRET_FILE %s: empty", path);
        return -EINVAL;
    }
    *secret = buf;
    *len = n;
    return 0;
}

int net_listen(const char *host, int port, int sockbuf_bytes, int *fd, int *bound_port, char *err,
               size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    if (!host) hints.ai_family = AF_INET6; /* dual-stack wildcard, IPv4 below if absent */
    int g = getaddrinfo(host, service, &hints, &res);
    if (g != 0 && !host) {
        hints.ai_family = AF_INET;
        g = getaddrinfo(host, service, &hints, &res);
    }
    if (g != 0) {
        snprintf(err, errlen, "listen address %s:%d: %s", host ? host : "*", port, gai_strerror(g));
        return -EINVAL;
    }
    int rc = -EADDRNOTAVAIL;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0) {
            rc = -errno;
            continue;
        }
        int one = 1, zero = 0;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (a->ai_family == AF_INET6 && !host)
            setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        if (sockbuf_bytes > 0) { /* inherited by accepted sockets, set before the SYN */
            setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sockbuf_bytes, sizeof sockbuf_bytes);
            setsockopt(s, SOL_SOCKET, SO_RCVBUF, &sockbuf_bytes, sizeof sockbuf_bytes);
        }
        if (bind(s, a->ai_addr, a->ai_addrlen) < 0 || listen(s, 64) < 0) {
            rc = -errno;
            close(s);
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        getsockname(s, (struct sockaddr *)&ss, &sl);
        *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
        *fd = s;
        freeaddrinfo(res);
        return 0;
    }
    freeaddrinfo(res);
    snprintf(err, errlen, "listen on %s:%d: %s", host ? host : "*", port, strerror(-rc));
    return rc;
}

int net_listen_task(const char *host, int port, int sockbuf_bytes, int *fd, int *bound_port,
                    char *err, size_t errlen)
{
    char why[512];
    /* A name the cluster DNS does not have yet is not looked up: the "no such name" would
     * be cached for the peers' lookups of it that follow (dnsprobe.h). */
    DnsProbe pr = {0};
    if (host && !dnsprobe_ready(&pr, host)) {
        util_log("listening on every interface, port %d: this worker's own TF_CONFIG address "
                 "%s has no record in the cluster DNS yet",
                 port, host);
        return net_listen(NULL, port, sockbuf_bytes, fd, bound_port, err, errlen);
    }
    int rc = net_listen(host, port, sockbuf_bytes, fd, bound_port, why, sizeof why);
    if (rc == 0) return 0;
    /* -EINVAL: no address for the name; -EADDRNOTAVAIL: none of them is this machine's
     * (bind's answer, which is also right for 127.0.0.2 and other loopback addresses
     * that no interface lists) */
    if (rc != -EINVAL && rc != -EADDRNOTAVAIL) {
        snprintf(err, errlen, "%s", why);
        return rc;
    }
    util_log("listening on every interface, port %d: this worker's own TF_CONFIG address %s is "
             "not one of this machine's (%s)",
             port, host, why);
    return net_listen(NULL, port, sockbuf_bytes, fd, bound_port, err, errlen);
}

/* ---------------------------------------------------------------------------------- */
/* framed I/O with a deadline */

/* Waits until fd is ready for `events` or the deadline passes: 0, -ETIMEDOUT, or
 * -ECANCELED when *abort was raised. */
static int wait_fd(int fd, short events, double deadline, atomic_int *abort_flag)
{
    for (;;) {
        if (abort_flag && atomic_load(abort_flag)) return -ECANCELED;
        double left = deadline - util_now();
        if (left <= 0) return -ETIMEDOUT;
        int ms = left > 0.1 ? 100 : (int)(left * 1000) + 1;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, ms);
        if (r < 0 && errno != EINTR) return -errno;
        if (r > 0) return 0;
    }
}

static int send_exact(int fd, const void *buf, size_t n, double deadline, atomic_int *abort_flag)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR) return -errno;
        int rc = wait_fd(fd, POLLOUT, deadline, abort_flag);
        if (rc < 0) return rc;
    }
    return 0;
}

/* Reads exactly n bytes: 0, -ECONNRESET on EOF, -ETIMEDOUT, or another errno. */
static int recv_exact(int fd, void *buf, size_t n, double deadline, atomic_int *abort_flag)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0) return -ECONNRESET;
        if (errno != EAGAIN && errno != EINTR) return -errno;
        int rc = wait_fd(fd, POLLIN, deadline, abort_flag);
        if (rc < 0) return rc;
    }
    return 0;
}

static int send_frame(int fd, const unsigned char *payload, size_t n, double deadline,
                      atomic_int *abort_flag)
{
    unsigned char buf[4 + FRAME_MAX];
    buf[0] = (unsigned char)n, buf[1] = (unsigned char)(n >> 8);
    buf[2] = (unsigned char)(n >> 16), buf[3] = (unsigned char)(n >> 24);
    memcpy(buf + 4, payload, n);
    return send_exact(fd, buf, n + 4, deadline, abort_flag);
}

/* Reads one frame into buf (FRAME_MAX bytes); -EMSGSIZE for a length over the limit. */
static int recv_frame(int fd, unsigned char *buf, size_t *n, double deadline,
                      atomic_int *abort_flag)
{
    unsigned char h[4];
    int rc = recv_exact(fd, h, 4, deadline, abort_flag);
    if (rc < 0) return rc;
    uint32_t len =
        (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    if (len > FRAME_MAX || len < 5) return -EMSGSIZE;
    *n = len;
    return recv_exact(fd, buf, len, deadline, abort_flag);
}

/* ---------------------------------------------------------------------------------- */
/* handshake messages */

static size_t put_str(unsigned char *p, const char *s)
{
    size_t n = strnlen(s, STR_MAX - 1);
    p[0] = (unsigned char)n, p[1] = (unsigned char)(n >> 8);
    memcpy(p + 2, s, n);
    return n + 2;
}

size_t net_hello_encode(unsigned char *buf, int type, const NetHello *h)
{
    size_t n = 0;
    memcpy(buf, "KTH1", 4), n = 4;
    buf[n++] = (unsigned char)type;
    memcpy(buf + n, h->nonce, NONCE_BYTES), n += NONCE_BYTES;
    for (int i = 0; i < 4; i++) buf[n++] = (unsigned char)(h->world >> (8 * i));
    for (int i = 0; i < 4; i++) buf[n++] = (unsigned char)(h->rank >> (8 * i));
    for (int i = 0; i < 8; i++) buf[n++] = (unsigned char)(h->global_batch >> (8 * i));
    n += put_str(buf + n, h->signature);
    n += put_str(buf + n, h->dataset);
    for (int i = 0; i < 4; i++) buf[n++] = (unsigned char)(h->generation >> (8 * i));
    buf[n++] = h->has_state;
    const size_t cluster = h->cluster > NET_MEMBERS_MAX ? NET_MEMBERS_MAX : h->cluster;
    buf[n++] = (unsigned char)cluster, buf[n++] = (unsigned char)(cluster >> 8);
    memcpy(buf + n, h->members, (cluster + 7) / 8), n += (cluster + 7) / 8;
    for (int i = 0; i < 8; i++) buf[n++] = (unsigned char)(h->incarnation >> (8 * i));
    return n;
}

int net_hello_decode(const unsigned char *buf, size_t n, int type, NetHello *h, size_t *used,
                     const char **why)
{
    size_t o = 0;
    memset(h, 0, sizeof *h);
    if (n < 4 + 1 + NONCE_BYTES + 16 + 4 || memcmp(buf, "KTH1", 4) != 0 || buf[4] != type) {
        *why = "not a kubetrain handshake";
        return -EBADMSG;
    }
    o = 5;
    memcpy(h->nonce, buf + o, NONCE_BYTES), o += NONCE_BYTES;
    for (int i = 0; i < 4; i++) h->world |= (uint32_t)buf[o++] << (8 * i);
    for (int i = 0; i < 4; i++) h->rank |= (uint32_t)buf[o++] << (8 * i);
    for (int i = 0; i < 8; i++) h->global_batch |= (uint64_t)buf[o++] << (8 * i);
    char *dst[2] = {h->signature, h->dataset};
    for (int k = 0; k < 2; k++) {
        if (o + 2 > n) goto bad;
        size_t len = (size_t)buf[o] | (size_t)buf[o + 1] << 8;
        o += 2;
        if (len >= STR_MAX || o + len > n || memchr(buf + o, 0, len)) goto bad;
        memcpy(dst[k], buf + o, len);
        o += len;
    }
    if (o + 5 > n || buf[o + 4] > 1) goto bad;
    for (int i = 0; i < 4; i++) h->generation |= (uint32_t)buf[o++] << (8 * i);
    h->has_state = buf[o++];
    if (o + 2 > n) goto bad;
    h->cluster = (uint16_t)(buf[o] | buf[o + 1] << 8), o += 2;
    const size_t bytes = ((size_t)h->cluster + 7) / 8;
    /* bits past the cluster set would not encode back to these bytes */
    if (h->cluster < 1 || h->cluster > NET_MEMBERS_MAX || o + bytes > n ||
        (h->cluster % 8 && buf[o + bytes - 1] >> (h->cluster % 8)))
        goto bad;
    memcpy(h->members, buf + o, bytes), o += bytes;
    if (o + 8 > n) goto bad;
    for (int i = 0; i < 8; i++) h->incarnation |= (uint64_t)buf[o++] << (8 * i);
    *used = o;
    return 0;
bad:
    *why = "malformed handshake fields";
    return -EBADMSG;
}

static void transcript_mac(const NetOptions *opt, const char *label, const unsigned char *a,
                           size_t an, const unsigned char *b, size_t bn,
                           unsigned char mac[MAC_BYTES])
{
    unsigned char msg[16 + 2 * FRAME_MAX];
    size_t ln = strlen(label), n = 0;
    memcpy(msg, label, ln), n = ln;
    memcpy(msg + n, a, an), n += an;
    memcpy(msg + n, b, bn), n += bn;
    static const unsigned char empty[1];
    unsigned int maclen = MAC_BYTES;
    const unsigned char *key = opt->secret && opt->secret_len ? opt->secret : empty;
    HMAC(EVP_sha256(), key, (int)(opt->secret && opt->secret_len ? opt->secret_len : 0), msg, n,
         mac, &maclen);
}

/* Describes this worker with a fresh nonce; -EIO when the RNG fails. */
static int hello_fill(NetHello *h, const NetJob *job)
{
    if (RAND_bytes(h->nonce, NONCE_BYTES) != 1) return -EIO;
    h->world = (uint32_t)job->world;
    h->rank = (uint32_t)job->rank;
    h->global_batch = job->global_batch;
    snprintf(h->signature, sizeof h->signature, "%s", job->model_signature);
    snprintf(h->dataset, sizeof h->dataset, "%s", job->dataset);
    h->generation = job->generation;
    h->has_state = job->has_state ? 1 : 0;
    h->incarnation = job->incarnation;
    memset(h->members, 0, sizeof h->members);
    h->cluster = (uint16_t)(job->members ? job->cluster : job->world);
    for (int k = 0; k < job->world; k++) {
        int i = job->members ? job->members[k] : k;
        h->members[i / 8] |= (unsigned char)(1u << (i % 8));
    }
    return 0;
}

/* The TF_CONFIG index of h's rank-th member, -1 when it names fewer. */
static int member_index(const NetHello *h, uint32_t rank)
{
    for (int i = 0, k = 0; i < h->cluster; i++)
        if (h->members[i / 8] >> (i % 8) & 1 && (uint32_t)k++ == rank) return i;
    return -1;
}

/* h's members as "0,2,3" into out, cut with "..." where out is too small. */
static void member_list(const NetHello *h, char *out, size_t outlen)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < h->cluster; i++) {
        if (!(h->members[i / 8] >> (i % 8) & 1)) continue;
        int w = snprintf(out + len, outlen - len, "%s%d", len ? "," : "", i);
        if (w < 0 || (size_t)w >= outlen - len) {
            snprintf(out + (outlen > 4 ? outlen - 4 : 0), outlen > 4 ? 4 : outlen, "...");
            return;
        }
        len += (size_t)w;
    }
}

/* Whether a and b name other members. `elastic`: this worker's ring follows a members
 * list (NetJob.members), and so do its peers': the sets are compared whatever the
 * clusters (a worker made for a grown cluster and a survivor whose list does not name the
 * new workers yet); otherwise only within one cluster (another cluster is a peer
 * configured otherwise). */
static int members_differ(const NetHello *a, const NetHello *b, int elastic)
{
    if (a->cluster != b->cluster && !elastic) return 0;
    const int n = a->cluster > b->cluster ? a->cluster : b->cluster;
    for (int i = 0; i < n; i++) {
        const int x = i < a->cluster && a->members[i / 8] >> (i % 8) & 1;
        const int y = i < b->cluster && b->members[i / 8] >> (i % 8) & 1;
        if (x != y) return 1;
    }
    return 0;
}

/* Whether the process of incarnation x was one of job's last ring (NetJob). */
static int of_last_ring(const NetJob *job, uint64_t x)
{
    for (int i = 0; i < job->last_ring_n; i++)
        if (job->last_ring[i] == x) return 1;
    return 0;
}

/* Compares an authenticated peer's description with ours (mine, of job); err names both
 * values. Returns 0; -ESTALE when it names other members of the ring (an elastic job
 * whose members file has not changed on both sides yet: job->members, members_differ),
 * which a new list mends; -EPROTO when it disagrees about the job (world size, model,
 * global batch, dataset, or the cluster outside an elastic job): it knows the job secret,
 * so it is a worker of this job configured otherwise, which no retry mends; or -ENXIO
 * when it is a worker of this job but not the rank expected there (a stale DNS record, a
 * port taken over by another worker, two workers with one task index), which the next
 * connection may mend, or a process of an earlier ring (NetJob: it holds state of a
 * lower generation and was not in this worker's last ring), which the real peer may
 * mend. */
static int hello_agree(const NetHello *mine, const NetHello *theirs, const NetJob *job,
                       int expect_rank, const char *peer, char *err, size_t errlen)
{
    const int elastic = job->members != NULL;
    if (members_differ(theirs, mine, elastic)) {
        char a[256], b[256];
        member_list(theirs, a, sizeof a);
        member_list(mine, b, sizeof b);
        snprintf(err, errlen,
                 "%s (TF_CONFIG index %d) names the members %s, this worker (TF_CONFIG "
                 "index %d) %s",
                 peer, member_index(theirs, theirs->rank), a, member_index(mine, mine->rank), b);
        return -ESTALE;
    }
    if (theirs->world != mine->world)
        snprintf(err, errlen, "%s has world size %u, this worker (rank %u) has %u", peer,
                 theirs->world, mine->rank, mine->world);
    else if (theirs->cluster != mine->cluster && !elastic)
        snprintf(err, errlen, "%s has %u workers in TF_CONFIG, this worker has %u", peer,
                 theirs->cluster, mine->cluster);
    else if (strcmp(theirs->signature, mine->signature) != 0)
        snprintf(err, errlen, "%s has model signature \"%.160s\", this worker has \"%.160s\"", peer,
                 theirs->signature, mine->signature);
    else if (theirs->global_batch != mine->global_batch)
        snprintf(err, errlen, "%s has global batch %llu, this worker has %llu", peer,
                 (unsigned long long)theirs->global_batch, (unsigned long long)mine->global_batch);
    else if (strcmp(theirs->dataset, mine->dataset) != 0)
        snprintf(err, errlen, "%s has dataset \"%.160s\", this worker has \"%.160s\"", peer,
                 theirs->dataset, mine->dataset);
    else if (theirs->rank == mine->rank) {
        snprintf(err, errlen,
                 "%s says it is rank %u too: two workers have the same task index, "
                 "or a stale DNS record points at the wrong worker",
                 peer, theirs->rank);
        return -ENXIO;
    } else if ((int)theirs->rank != expect_rank) {
        snprintf(err, errlen,
                 "%s says it is rank %u, expected rank %d: a stale DNS record or a "
                 "reused address points at another worker of this job",
                 peer, theirs->rank, expect_rank);
        return -ENXIO;
    } else if (theirs->has_state && theirs->generation < mine->generation &&
               !of_last_ring(job, theirs->incarnation)) {
        snprintf(err, errlen,
                 "refused %s: a process of an earlier ring (it holds training state and "
                 "proposes generation %u, this worker generation %u): it missed a live "
                 "recovery and its rank has been replaced",
                 peer, theirs->generation, mine->generation);
        return -ENXIO;
    } else return 0;
    return -EPROTO;
}

/* ---------------------------------------------------------------------------------- */
/* server side: accept rank-1 */

/* A connection's source address, IPv4-mapped IPv6 folded to IPv4, so that the dual-stack
 * listener's view of a peer compares equal to its name's A record. */
typedef struct SrcAddr {
    int family; /* AF_INET (a[0..4)), AF_INET6, or 0: unknown */
    unsigned char a[16];
} SrcAddr;

#define EXPECT_MAX 8

enum { CLIENT_FINAL = 1, CLIENT_TAKEN = 2 };

typedef struct Rendezvous {
    const TfConfig *tf;
    const NetJob *job;
    const NetOptions *opt;
    double deadline;
    atomic_int abort_flag;
    atomic_int server_done;     /* accept_prev has returned: the client thread may end */
    /* the client's result is in (next_fd or client_rc): CLIENT_FINAL, then CLIENT_TAKEN
     * once the accept loop has ended on it; 0 while the client dials (client_hold) */
    atomic_int client_final;
    atomic_int prev_linked;     /* rank-1 has connected: no announcement is needed */
    atomic_int next_at_seq;     /* bumped when next_at changes: the client stops napping */
    int wake[2];                /* the client writes a byte when final; the accept loop polls */
    int next_fd;                /* client result */
    int client_rc;
    char client_err[1024];
    char client_seen[512];      /* why the last answer at rank+1's address was refused */
    char server_seen[512];      /* why the last connection as rank-1 was refused */
    pthread_mutex_t lock;       /* guards expect and nexpect, written by the client thread */
    SrcAddr expect[EXPECT_MAX]; /* rank-1's addresses, once its name resolves */
    int nexpect;
    DnsProbe prev_probe;        /* rank-1's name in the cluster DNS (dnsprobe.h) */
    DnsProbe next_probe;        /* rank+1's; both asked by the client thread */
    SrcAddr next_at;            /* rank+1's address as it announced it; family 0: none */
    char announce_seen[512];    /* why rank-1 refused the last announcement (announcer) */
    double log_window;          /* the second whose rejection lines are being counted */
    int log_lines, log_hidden;
} Rendezvous;

/* One incoming connection in the middle of its handshake. */
typedef struct Pending {
    int fd;
    int got_hello;              /* HELLO answered with a CHALLENGE; PROOF expected */
    int announce;               /* it began with ANNOUNCE: rank+1 saying where it is */
    int expected;               /* it comes from an address of rank-1's name */
    double since;               /* accepted at */
    double deadline;            /* the handshake timeout, from accept */
    size_t have;                /* bytes in buf */
    unsigned char buf[4 + FRAME_MAX];
    unsigned char hello[FRAME_MAX], chal[FRAME_MAX + MAC_BYTES];
    size_t hn, cn;
    NetHello theirs, mine;
    SrcAddr src;
    char from[NET_NAME_MAX];
} Pending;

/* Handshake slots, and how a flood of connections is kept from pushing rank-1 out.
 *
 * Every handshake in progress is served as its bytes arrive (one that holds or trickles
 * keeps no one waiting), and at most PENDING_MAX are in progress. When a new connection
 * finds them full, one of them gives up its slot, chosen so that the real peer keeps its
 * own:
 *  - at most PER_SOURCE_MAX slots per source address: a newcomer from an address that
 *    holds that many takes the slot of one of that address's own connections, so one
 *    stranger's flood churns through its own slots only;
 *  - a connection from rank-1's address (its name from TF_CONFIG, resolved by the client
 *    thread) never gives its slot to a newcomer from another address; when every
 *    candidate is one, the newcomer is closed instead;
 *  - among the candidates, the one with the least progress goes first: a connection that
 *    has sent nothing (or part of its HELLO) before one whose HELLO was answered and
 *    whose proof is awaited; then the oldest.
 * In a cluster the addresses tell strangers from rank-1. On one host (launch, and the
 * tests) every worker connects from 127.0.0.1, the same as a local stranger, and
 * progress does the work: rank-1 sends its HELLO as soon as it connects, so while it
 * computes its proof (one round trip, or longer on a loaded machine) a flood of
 * connections that send nothing only replaces itself. A local stranger that sends
 * well-formed HELLOs faster than rank-1's round trip can still push it out; rank-1 then
 * connects again, until the rendezvous deadline. */
#define PENDING_MAX 32
#define PER_SOURCE_MAX 16

/* Rejection lines per second: a flood of connections must not become a flood of log
 * lines (nor spend the accept loop's time on them). Lines over the budget are counted,
 * and the count is logged when the second is over. */
#define REJECT_LOG_PER_S 100

static void reject_log_flush(Rendezvous *rv, double now, int force)
{
    if (!force && now - rv->log_window < 1.0) return;
    if (rv->log_hidden > 0)
        util_log("... and %d more connection(s) rejected in %.1f s, not logged one by one",
                 rv->log_hidden, now - rv->log_window);
    rv->log_window = now, rv->log_lines = 0, rv->log_hidden = 0;
}

static void reject_log(Rendezvous *rv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reject_log(Rendezvous *rv, const char *fmt, ...)
{
    reject_log_flush(rv, util_now(), 0);
    if (rv->log_lines >= REJECT_LOG_PER_S) {
        rv->log_hidden++;
        return;
    }
    rv->log_lines++;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    util_log("%s", line);
}

static void pending_drop(Rendezvous *rv, Pending **pend, int *n, int i, const char *why)
{
    if (why) reject_log(rv, "rejected connection from %s: %s", pend[i]->from, why);
    close(pend[i]->fd);
    free(pend[i]);
    pend[i] = pend[--*n];
}

static void src_addr(const struct sockaddr *sa, SrcAddr *a)
{
    memset(a, 0, sizeof *a);
    if (sa->sa_family == AF_INET) {
        a->family = AF_INET;
        memcpy(a->a, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *x = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        int mapped = IN6_IS_ADDR_V4MAPPED(x);
        a->family = mapped ? AF_INET : AF_INET6;
        memcpy(a->a, x->s6_addr + (mapped ? 12 : 0), mapped ? 4 : 16);
    }
}

static int src_equal(const SrcAddr *x, const SrcAddr *y)
{
    return x->family != 0 && x->family == y->family && memcmp(x->a, y->a, sizeof x->a) == 0;
}

static int from_prev_host(Rendezvous *rv, const SrcAddr *a)
{
    int yes = 0;
    pthread_mutex_lock(&rv->lock);
    for (int i = 0; i < rv->nexpect; i++) yes |= src_equal(&rv->expect[i], a);
    pthread_mutex_unlock(&rv->lock);
    return yes;
}

/* Resolves rank-1's name into rv->expect, once it has a record (a starting pod may have
 * none yet: the next call tries again). Called by the client thread, which may block in
 * DNS where the accept loop must not. */
static void resolve_prev(Rendezvous *rv)
{
    pthread_mutex_lock(&rv->lock);
    int have = rv->nexpect;
    pthread_mutex_unlock(&rv->lock);
    if (have) return;
    int prev = (rv->job->rank + rv->job->world - 1) % rv->job->world;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    const char *host = rv->tf->peers[prev].host;
    /* In a ring of two rank-1 is rank+1, whose name the client's own probe asks for. */
    int same = strcmp(host, rv->tf->peers[(rv->job->rank + 1) % rv->job->world].host) == 0;
    if (same ? !rv->next_probe.ready : !dnsprobe_ready(&rv->prev_probe, host)) return;
    if (getaddrinfo(host, NULL, &hints, &res) != 0) return;
    SrcAddr got[EXPECT_MAX];
    int n = 0;
    for (struct addrinfo *a = res; a && n < EXPECT_MAX; a = a->ai_next) {
        src_addr(a->ai_addr, &got[n]);
        if (got[n].family) n++;
    }
    freeaddrinfo(res);
    pthread_mutex_lock(&rv->lock);
    memcpy(rv->expect, got, (size_t)n * sizeof *got);
    rv->nexpect = n;
    pthread_mutex_unlock(&rv->lock);
}

/* Whether a should give up its slot before b: strangers' addresses first, then the
 * least progress, then the oldest. */
static int pending_before(const Pending *a, const Pending *b)
{
    if (a->expected != b->expected) return a->expected < b->expected;
    if (a->got_hello != b->got_hello) return a->got_hello < b->got_hello;
    return a->since < b->since;
}

/* The slot the newcomer p takes by the rules above: n when one is free, the index of
 * the connection that gives up its slot, or -1 when p is to be closed. */
static int pending_victim(Pending *const *pend, int n, const Pending *p)
{
    int same = 0;
    for (int i = 0; i < n; i++) same += src_equal(&pend[i]->src, &p->src);
    int capped = same >= PER_SOURCE_MAX;
    if (!capped && n < PENDING_MAX) return n;
    int pick = -1;
    for (int i = 0; i < n; i++) {
        const Pending *q = pend[i];
        if (capped && !src_equal(&q->src, &p->src)) continue;
        if (q->expected && !p->expected) continue;
        if (pick < 0 || pending_before(q, pend[pick])) pick = i;
    }
    return pick;
}

/* Sends a whole handshake frame without waiting: a fresh socket's send buffer takes it,
 * so a peer that does not let it through is not one worth waiting for. */
static int send_frame_now(int fd, const unsigned char *payload, size_t n)
{
    unsigned char b[4 + FRAME_MAX + MAC_BYTES];
    b[0] = (unsigned char)n, b[1] = (unsigned char)(n >> 8);
    b[2] = (unsigned char)(n >> 16), b[3] = (unsigned char)(n >> 24);
    memcpy(b + 4, payload, n);
    ssize_t w = send(fd, b, n + 4, MSG_NOSIGNAL | MSG_DONTWAIT);
    return w == (ssize_t)(n + 4) ? 0 : w < 0 ? -errno : -EAGAIN;
}

/* Logs why p is turned away; returns -EAGAIN for pending_step's caller to drop it. */
static int reject(Rendezvous *rv, const Pending *p, const char *why)
{
    reject_log(rv, "rejected connection from %s: %s", p->from, why);
    return -EAGAIN;
}

/* Takes p's source address as rank+1's (net.h, address announcements). */
static void note_next_at(Rendezvous *rv, const Pending *p)
{
    pthread_mutex_lock(&rv->lock);
    int changed = !src_equal(&rv->next_at, &p->src);
    rv->next_at = p->src;
    pthread_mutex_unlock(&rv->lock);
    if (changed) atomic_fetch_add(&rv->next_at_seq, 1);
}

/* Forgets rank+1's announced address `at` (it did not answer, or not as rank+1), unless
 * a newer one has come meanwhile. */
static void forget_next_at(Rendezvous *rv, const SrcAddr *at)
{
    pthread_mutex_lock(&rv->lock);
    if (src_equal(&rv->next_at, at)) memset(&rv->next_at, 0, sizeof rv->next_at);
    pthread_mutex_unlock(&rv->lock);
}

/* Feeds the bytes that arrived on p through the handshake. Returns 1 when rank-1 has
 * authenticated (p->fd is its connection), 2 when rank+1 has announced its address
 * (noted; the caller closes p), 0 to wait for more bytes, -EAGAIN after logging why the
 * connection is rejected (a wrong proof, or a worker of this job that is not the rank
 * expected, included), or -ESTALE or -EPROTO (err) when a peer that proved the job
 * secret names other members or disagrees about the job (hello_agree). have_prev:
 * rank-1's connection is already made, so only announcements are served. */
static int pending_step(Rendezvous *rv, Pending *p, int have_prev, char *err, size_t errlen)
{
    ssize_t r = recv(p->fd, p->buf + p->have, sizeof p->buf - p->have, 0);
    if (r == 0) return reject(rv, p, "closed during the handshake");
    if (r < 0) {
        if (errno == EAGAIN || errno == EINTR) return 0;
        return reject(rv, p, strerror(errno));
    }
    p->have += (size_t)r;
    if (p->have < 4) return 0;
    uint32_t len = (uint32_t)p->buf[0] | (uint32_t)p->buf[1] << 8 | (uint32_t)p->buf[2] << 16 |
                   (uint32_t)p->buf[3] << 24;
    if (len > FRAME_MAX || len < 5) return reject(rv, p, "frame length over the limit");
    if (p->have < 4 + len) return 0;
    if (p->have > 4 + len) return reject(rv, p, "bytes after its frame");
    const unsigned char *f = p->buf + 4;
    const char *why = NULL;
    p->have = 0;
    if (!p->got_hello) {
        size_t used;
        memcpy(p->hello, f, len), p->hn = len;
        p->announce = f[4] == MSG_ANNOUNCE;
        if (net_hello_decode(p->hello, p->hn, p->announce ? MSG_ANNOUNCE : MSG_HELLO, &p->theirs,
                             &used, &why) < 0 ||
            (used != p->hn && (why = "trailing bytes after the hello")))
            return reject(rv, p, why);
        if (have_prev && !p->announce)
            return reject(rv, p, "a ring connection after rank-1's was made (a late duplicate)");
        if (hello_fill(&p->mine, rv->job) < 0) {
            snprintf(err, errlen, "rendezvous: the random number generator failed");
            return -EIO;
        }
        p->cn = net_hello_encode(p->chal, MSG_CHALLENGE, &p->mine);
        transcript_mac(rv->opt, "server", p->hello, p->hn, p->chal, p->cn, p->chal + p->cn);
        p->cn += MAC_BYTES;
        if (send_frame_now(p->fd, p->chal, p->cn) < 0) return reject(rv, p, "it does not read");
        p->got_hello = 1;
        return 0;
    }
    unsigned char mac[MAC_BYTES];
    if (len != 5 + MAC_BYTES || memcmp(f, "KTH1", 4) != 0 || f[4] != MSG_PROOF)
        return reject(rv, p, "malformed proof");
    int prev = (rv->job->rank + rv->job->world - 1) % rv->job->world;
    int next = (rv->job->rank + 1) % rv->job->world;
    transcript_mac(rv->opt, "client", p->hello, p->hn, p->chal, p->cn, mac);
    if (CRYPTO_memcmp(mac, f + 5, MAC_BYTES) != 0) {
        reject_log(rv,
                   "rejected connection from %s claiming rank %u: it does not know the job "
                   "secret (KUBETRAIN_SECRET differs?)",
                   p->from, p->theirs.rank);
        if ((int)p->theirs.rank == prev && !p->announce)
            snprintf(rv->server_seen, sizeof rv->server_seen,
                     "a connection from %s claiming to be rank %d did not know the job secret "
                     "(KUBETRAIN_SECRET differs between workers?)",
                     p->from, prev);
        return -EAGAIN;
    }
    char peer[NET_NAME_MAX + 64], disagree[sizeof rv->server_seen];
    snprintf(peer, sizeof peer, "rank %u (%s from %s)", p->theirs.rank,
             p->announce ? "announcing itself" : "connecting", p->from);
    int rc = hello_agree(&p->mine, &p->theirs, rv->job, p->announce ? next : prev, peer, disagree,
                         sizeof disagree);
    if (rc == -ENXIO) {
        if (!p->announce) snprintf(rv->server_seen, sizeof rv->server_seen, "%s", disagree);
        return reject(rv, p, disagree);
    }
    if (rc < 0) {
        snprintf(err, errlen, "%s", disagree);
        return rc;
    }
    unsigned char ack[5] = {'K', 'T', 'H', '1', MSG_ACK};
    /* Before the ACK: in a ring of two, rank 0 may form the ring and close the connection
     * rank 1 dialed as soon as it has the ACK, which rank 1's client must not take for
     * rank 0 leaving the attempt (client_hold). */
    if (!p->announce) atomic_store(&rv->prev_linked, 1);
    if (send_frame_now(p->fd, ack, sizeof ack) < 0) {
        if (!p->announce) atomic_store(&rv->prev_linked, 0);
        return reject(rv, p, "closed before the ack");
    }
    /* In a ring of two rank-1 is rank+1: its ring connection says where it is too. */
    if (p->announce || prev == next) note_next_at(rv, p);
    return p->announce ? 2 : 1;
}

static void addr_name(const struct sockaddr_storage *ss, socklen_t sl, char *out, size_t n)
{
    char h[INET6_ADDRSTRLEN], p[16];
    if (getnameinfo((const struct sockaddr *)ss, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        snprintf(out, n, "?");
    else if (ss->ss_family == AF_INET6) snprintf(out, n, "[%s]:%s", h, p);
    else snprintf(out, n, "%s:%s", h, p);
}

/* This worker is giving up (its own connection found a disagreement): hellos already
 * here still get their challenge, so that the peer that sent one finds the disagreement
 * itself and says so, instead of retrying against a worker that is gone. */
static void answer_hellos(Rendezvous *rv, Pending **pend, int n, int have_prev)
{
    char scratch[256];
    for (int i = 0; i < n; i++) {
        struct pollfd p = {.fd = pend[i]->fd, .events = POLLIN};
        if (!pend[i]->got_hello && poll(&p, 1, 0) == 1)
            pending_step(rv, pend[i], have_prev, scratch, sizeof scratch);
    }
}

/* Accepts one connection into a handshake slot, making room by the rules above. */
static void accept_one(Rendezvous *rv, int listen_fd, Pending **pend, int *n)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) return;
    Pending *p = xcalloc(1, sizeof *p);
    p->fd = fd;
    p->since = util_now();
    p->deadline = p->since + rv->opt->handshake_timeout_s;
    addr_name(&ss, sl, p->from, sizeof p->from);
    src_addr((const struct sockaddr *)&ss, &p->src);
    p->expected = from_prev_host(rv, &p->src);
    int v = pending_victim(pend, *n, p);
    if (v < 0) {
        int prev = (rv->job->rank + rv->job->world - 1) % rv->job->world;
        reject_log(rv,
                   "rejected connection from %s: too many handshakes at once, and every slot "
                   "it could take is held by a connection from rank %d's address",
                   p->from, prev);
        close(fd);
        free(p);
        return;
    }
    if (v < *n) {
        char why[NET_NAME_MAX + 128];
        snprintf(why, sizeof why,
                 "too many handshakes at once; this one gave its slot to %s "
                 "(it had %s)",
                 p->from, pend[v]->got_hello ? "not sent its proof yet" : "not sent a whole HELLO");
        pending_drop(rv, pend, n, v, why);
    }
    net_tune_socket(fd, rv->opt->sockbuf_bytes);
    pend[(*n)++] = p;
}

/* Whether rank-1's authenticated connection has been closed or reset since: its
 * rendezvous ended after this side's ACK (a list change, a stop), and the dialer will come
 * again in its next one. In a ring of two only rank 0's own connection carries the ring
 * (ring_create; rank 1 closes its own after a first collective), so rank 0 would not
 * learn it from a collective and would wait on a peer that waits for this listener. */
static int link_closed(int fd)
{
    char b;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Drops *link when link_closed, logging it, so that the wait goes on for rank-1. */
static void drop_closed_link(Rendezvous *rv, int *link, const char *from)
{
    if (*link < 0 || !link_closed(*link)) return;
    reject_log(rv,
               "rank-1's connection from %s was closed after its handshake (it left that "
               "attempt); waiting for its next one",
               from);
    close(*link);
    *link = -1;
    atomic_store(&rv->prev_linked, 0);
}

/* Takes the client's result for the ring, once it is in: from then on client_hold no
 * longer dials again. Returns whether it was in. */
static int client_take(Rendezvous *rv)
{
    int final = CLIENT_FINAL;
    return atomic_compare_exchange_strong(&rv->client_final, &final, CLIENT_TAKEN) ||
           final == CLIENT_TAKEN;
}

/* Accepts connections until rank-1 authenticates and the client's result is in,
 * serving every handshake in progress as its bytes arrive, each bounded by the handshake
 * timeout: after rank-1's connection only announcements, which may still be what the
 * client waits for. Returns rank-1's fd, -ETIMEDOUT (err), -ECANCELED, -EINTR (err: the
 * options' stop flag was set, or their poll said so), -ESTALE or -EPROTO (err) or another
 * negative errno. */
static int accept_prev(Rendezvous *rv, int listen_fd, char *err, size_t errlen)
{
    Pending *pend[PENDING_MAX];
    struct pollfd pfd[PENDING_MAX + 2];
    int n = 0, rc = 0, link = -1;
    char link_from[NET_NAME_MAX] = "";
    rv->log_window = util_now();
    double polled = rv->log_window;
    for (;;) {
        /* The deadline before the abort: when the client thread gave up because time
         * ran out, this side's own account of the wait belongs in the message too. */
        double now = util_now();
        reject_log_flush(rv, now, 0);
        drop_closed_link(rv, &link, link_from);
        if (link >= 0 && (client_take(rv) || now >= rv->deadline)) break;
        if (now >= rv->deadline) {
            int prev = (rv->job->rank + rv->job->world - 1) % rv->job->world;
            snprintf(err, errlen, "rank %d (%s:%d) did not connect within %.1f s%s%s", prev,
                     rv->tf->peers[prev].host, rv->tf->peers[prev].port,
                     rv->opt->rendezvous_timeout_s, rv->server_seen[0] ? ": " : "",
                     rv->server_seen);
            rc = -ETIMEDOUT;
            break;
        }
        if (atomic_load(&rv->abort_flag)) {
            answer_hellos(rv, pend, n, link >= 0);
            rc = -ECANCELED;
            break;
        }
        if (rv->opt->stop && *rv->opt->stop) {
            snprintf(err, errlen, "stopped by a signal");
            rc = -EINTR;
            break;
        }
        if (rv->opt->poll && now - polled >= 0.1) {
            polled = now;
            if (rv->opt->poll(rv->opt->poll_arg)) {
                snprintf(err, errlen, "stopped by its poll");
                rc = -EINTR;
                break;
            }
        }
        for (int i = n - 1; i >= 0; i--)
            if (now >= pend[i]->deadline)
                pending_drop(rv, pend, &n, i, "handshake not completed in time");
        pfd[0] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = rv->wake[0], .events = POLLIN};
        for (int i = 0; i < n; i++)
            pfd[i + 2] = (struct pollfd){.fd = pend[i]->fd, .events = POLLIN};
        int r = poll(pfd, (nfds_t)n + 2, 100);
        if (r < 0 && errno != EINTR) {
            rc = -errno;
            snprintf(err, errlen, "rendezvous: poll: %s", strerror(errno));
            break;
        }
        if (r <= 0) continue;
        /* before a new ring connection from rank-1 is judged a late duplicate */
        drop_closed_link(rv, &link, link_from);
        if (pfd[1].revents & POLLIN) {
            char b[16];
            while (read(rv->wake[0], b, sizeof b) > 0) continue;
        }
        /* Handshakes first (they may finish, and a HELLO read now is progress that keeps
         * its slot), then one new connection. */
        for (int i = n - 1; i >= 0; i--) {
            if (!(pfd[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int s = pending_step(rv, pend[i], link >= 0, err, errlen);
            if (s == 1 && link >= 0)
                pending_drop(rv, pend, &n, i, "a second ring connection from rank-1");
            else if (s == 1) {
                link = pend[i]->fd;
                snprintf(link_from, sizeof link_from, "%s", pend[i]->from);
                atomic_store(&rv->prev_linked, 1);
                free(pend[i]);
                pend[i] = pend[--n];
            } else if (s == 2 || s == -EAGAIN) pending_drop(rv, pend, &n, i, NULL);
            else if (s < 0) {
                rc = s;
                goto out;
            }
        }
        if (pfd[0].revents & POLLIN) accept_one(rv, listen_fd, pend, &n);
    }
out:
    while (n > 0) pending_drop(rv, pend, &n, n - 1, NULL);
    reject_log_flush(rv, util_now(), 1);
    if (rc < 0) {
        if (link >= 0) close(link);
        return rc;
    }
    return link;
}

/* ---------------------------------------------------------------------------------- */
/* client side: connect to rank+1 */

/* One non-blocking connect to sa, at most 2 s and not past the deadline; with `by_name`,
 * also given up as soon as rank+1 announces an address (the name's address may be a
 * replaced peer's old one, which answers nothing: the announced one is tried at once).
 * Returns the fd, -EAGAIN (refused, unreachable, no answer) or -ECANCELED. */
static int connect_addr(Rendezvous *rv, const struct sockaddr *sa, socklen_t sl, int type,
                        int protocol, atomic_int *abort_flag, int by_name)
{
    int seq = atomic_load(&rv->next_at_seq);
    int fd = socket(sa->sa_family, type | SOCK_CLOEXEC, protocol);
    if (fd < 0) return -EAGAIN;
    if (net_tune_socket(fd, rv->opt->sockbuf_bytes) < 0 ||
        (connect(fd, sa, sl) < 0 && errno != EINPROGRESS)) {
        close(fd);
        return -EAGAIN;
    }
    double dl = util_now() + 2.0;
    if (dl > rv->deadline) dl = rv->deadline;
    int rc;
    do {
        double slice = util_now() + 0.02;
        rc = wait_fd(fd, POLLOUT, by_name && slice < dl ? slice : dl, abort_flag);
    } while (rc == -ETIMEDOUT && util_now() < dl && atomic_load(&rv->next_at_seq) == seq);
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (rc == 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (rc == 0 && soerr == 0) return fd;
    close(fd);
    return rc == -ECANCELED ? rc : -EAGAIN;
}

/* Connects to the address rank+1 announced (net.h), if any (copied to *at), at its
 * TF_CONFIG port; an address that does not answer is forgotten. Returns the fd, -EAGAIN
 * or -ECANCELED. */
static int connect_announced(Rendezvous *rv, const TfPeer *p, SrcAddr *at_out)
{
    pthread_mutex_lock(&rv->lock);
    SrcAddr at = rv->next_at;
    pthread_mutex_unlock(&rv->lock);
    *at_out = at;
    if (!at.family) return -EAGAIN;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    if (at.family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)(void *)&ss;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)p->port);
        memcpy(&in->sin_addr, at.a, 4);
        sl = sizeof *in;
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)p->port);
        memcpy(&in6->sin6_addr, at.a, 16);
        sl = sizeof *in6;
    }
    int fd = connect_addr(rv, (struct sockaddr *)&ss, sl, SOCK_STREAM, 0, &rv->abort_flag, 0);
    if (fd == -EAGAIN) forget_next_at(rv, &at);
    return fd;
}

/* One non-blocking connect to any of host's addresses, once the cluster DNS has its
 * name (dnsprobe.h). Returns the fd, -EAGAIN to retry (refused, unreachable, no record
 * from the resolver, or rank+1 announced itself meanwhile when `to_next`), -ENOENT to
 * retry soon (the cluster DNS has no such name yet), or -ECANCELED/-ETIMEDOUT.
 * dns_logged NULL: a name that does not resolve is not logged. */
static int connect_once(Rendezvous *rv, const TfPeer *p, DnsProbe *pr, int *dns_logged,
                        atomic_int *abort_flag, int to_next)
{
    if (!dnsprobe_ready(pr, p->host)) {
        if (dns_logged && !*dns_logged)
            util_log("waiting for %s's DNS record (the cluster DNS has no such name yet)", p->host);
        if (dns_logged) *dns_logged = 1;
        return -ENOENT;
    }
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char service[16];
    snprintf(service, sizeof service, "%d", p->port);
    int g = getaddrinfo(p->host, service, &hints, &res);
    if (g != 0) {
        if (dns_logged && !*dns_logged)
            util_log("waiting for %s to resolve (%s)", p->host, gai_strerror(g));
        if (dns_logged) *dns_logged = 1;
        return -EAGAIN;
    }
    int fd = -EAGAIN;
    int seq = atomic_load(&rv->next_at_seq);
    for (struct addrinfo *a = res;
         a && fd == -EAGAIN && !(to_next && atomic_load(&rv->next_at_seq) != seq); a = a->ai_next)
        fd = connect_addr(rv, a->ai_addr, a->ai_addrlen, a->ai_socktype, a->ai_protocol, abort_flag,
                          to_next);
    freeaddrinfo(res);
    return fd;
}

/* One side that dials: the client to rank+1 (HELLO), or the announcer to rank-1
 * (ANNOUNCE). */
typedef struct Dialer {
    int type;               /* MSG_HELLO or MSG_ANNOUNCE */
    int peer_rank;          /* the rank expected to answer */
    atomic_int *abort_flag; /* ends a wait with -ECANCELED */
    char *seen;             /* why the last answer was refused */
    size_t seen_len;
    char *err;              /* why the dial ended for good */
    size_t err_len;
    const char *what;       /* "connecting", "announcing": the log line's verb */
} Dialer;

/* Notes why the answer at the peer's address was refused, logging it when it differs
 * from the last (the dialer retries once a second at most; the same line each time
 * would say nothing new). Returns -EAGAIN: the dialer connects again. */
static int client_refuse(const Dialer *d, const char *why)
{
    if (strcmp(d->seen, why) != 0)
        util_log("%s; %s again until the rendezvous deadline", why, d->what);
    snprintf(d->seen, d->seen_len, "%s", why);
    return -EAGAIN;
}

/* The dialer's half of the handshake on fd, connected to the peer's address; each
 * attempt is bounded by the handshake timeout, so a port taken by something silent does
 * not hold the dialer to the deadline. Returns 0 (authenticated), -EAGAIN to connect
 * again (dropped, or an answer from the wrong party, noted by client_refuse), -ESTALE or
 * -EPROTO (d->err) when the peer, proven by the job secret, names other members or
 * disagrees about the job (hello_agree), or -ECANCELED/-EIO. */
static int client_handshake(Rendezvous *rv, const Dialer *d, int fd, const char *peer)
{
    unsigned char hello[FRAME_MAX], chal[FRAME_MAX], mac[MAC_BYTES];
    size_t hn, cn = 0, used;
    const char *why = NULL;
    char note[sizeof rv->client_seen];
    NetHello mine, theirs;
    double dl = util_now() + rv->opt->handshake_timeout_s;
    if (dl > rv->deadline) dl = rv->deadline;
    if (hello_fill(&mine, rv->job) < 0) {
        snprintf(d->err, d->err_len, "rendezvous: the random number generator failed");
        return -EIO;
    }
    hn = net_hello_encode(hello, d->type, &mine);
    int rc = send_frame(fd, hello, hn, dl, d->abort_flag);
    if (rc == 0) rc = recv_frame(fd, chal, &cn, dl, d->abort_flag);
    if (rc == -ECANCELED) return rc;
    if (rc == -ETIMEDOUT && util_now() < rv->deadline) {
        snprintf(note, sizeof note,
                 "%s accepted the connection but did not answer the "
                 "handshake within %.1f s (a worker that is training answers at its next "
                 "step boundary; else, another service on that port?)",
                 peer, rv->opt->handshake_timeout_s);
        return client_refuse(d, note);
    }
    if (rc < 0 && rc != -EMSGSIZE) return -EAGAIN; /* dropped: the server may be busy */
    if (rc < 0 || net_hello_decode(chal, cn, MSG_CHALLENGE, &theirs, &used, &why) < 0 ||
        used + MAC_BYTES != cn) {
        snprintf(note, sizeof note,
                 "the service at %s's address does not speak the kubetrain "
                 "handshake (another service on that port?)",
                 peer);
        return client_refuse(d, note);
    }
    transcript_mac(rv->opt, "server", hello, hn, chal, used, mac);
    if (CRYPTO_memcmp(mac, chal + used, MAC_BYTES) != 0) {
        snprintf(note, sizeof note,
                 "%s could not prove the job secret: the worker there belongs "
                 "to another job (a stale DNS record or a port clash), or KUBETRAIN_SECRET "
                 "differs between workers",
                 peer);
        return client_refuse(d, note);
    }
    rc = hello_agree(&mine, &theirs, rv->job, d->peer_rank, peer, note, sizeof note);
    if (rc == -ENXIO) return client_refuse(d, note);
    unsigned char proof[5 + MAC_BYTES] = {'K', 'T', 'H', '1', MSG_PROOF};
    transcript_mac(rv->opt, "client", hello, hn, chal, cn, proof + 5);
    /* Other members: the proof still goes, so that the server, which judges only a
     * proven peer, learns it too and waits for a new list instead of for this worker. */
    if (rc == -ESTALE) send_frame(fd, proof, sizeof proof, dl, d->abort_flag);
    if (rc < 0) {
        snprintf(d->err, d->err_len, "%s", note);
        return rc;
    }
    rc = send_frame(fd, proof, sizeof proof, dl, d->abort_flag);
    /* The ack is awaited until the rendezvous deadline, not the attempt's: the server may
     * already have taken this connection as its ring link when it sent the ack, and a
     * client that gave up on it here would leave the server on a connection nobody
     * uses (seen under load with a 1 s handshake timeout). Only a party that knows the
     * secret gets this far, and it answers or closes. */
    if (rc == 0) rc = recv_frame(fd, chal, &cn, rv->deadline, d->abort_flag);
    if (rc == 0 && (cn != 5 || memcmp(chal, "KTH1", 4) != 0 || chal[4] != MSG_ACK)) rc = -EBADMSG;
    if (rc == -ECANCELED) return rc;
    return rc < 0 ? -EAGAIN : 0;
}

/* Sleeps s seconds, or less when the rendezvous is aborted or the server is done. */
static void client_nap(Rendezvous *rv, double s)
{
    double until = util_now() + s;
    while (!atomic_load(&rv->abort_flag) && !atomic_load(&rv->server_done) && util_now() < until) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Sleeps s seconds, or less when the rendezvous is aborted, the server is done or
 * rank+1 has announced an address since *seq (which is then updated). */
static void client_wait(Rendezvous *rv, double s, int *seq)
{
    double until = util_now() + s;
    while (!atomic_load(&rv->abort_flag) && !atomic_load(&rv->server_done) && util_now() < until) {
        int now_seq = atomic_load(&rv->next_at_seq);
        if (now_seq != *seq) {
            *seq = now_seq;
            return;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* The client's result is in: the accept loop, which serves announcements until then,
 * may end; woken at once after a success. After a failure (the abort flag) it notices
 * within its poll interval, as before announcements: hellos that reach it meanwhile
 * still get their challenge (answer_hellos). */
static void client_done(Rendezvous *rv, int wake)
{
    atomic_store(&rv->client_final, CLIENT_FINAL);
    char b = 1;
    ssize_t w = wake ? write(rv->wake[1], &b, 1) : 0; /* a full pipe has woken it already */
    (void)w;
}

/* Rank+1 ACKed this worker's connection. Until the accept loop takes it for the ring
 * (client_take), watches it: rank+1 closing it has left that attempt after its ACK (its
 * members file changed, a peer of its own disagreed, its state sync failed) and will
 * wait in its next attempt for a new connection from this worker; one that formed the
 * ring on the dead link instead would leave rank+1 waiting out its deadline
 * (docs/design.md, "Rendezvous"). Meanwhile resolves rank-1's name for the accept loop
 * until it has an address. Returns 1 when it took the result back to dial again (logged),
 * 0 when the rendezvous is over or the accept loop took it. In a ring of two rank 0
 * closes the connection rank 1 dialed once the ring forms (ring_create): rank 1 takes a
 * close for rank 0 leaving only while rank 0's own connection is not its ring link. */
static int client_hold(Rendezvous *rv, const char *peer)
{
    const int spare = rv->job->world == 2 && rv->job->rank == 1;
    double resolved = 0;
    while (!atomic_load(&rv->server_done) && !atomic_load(&rv->abort_flag) &&
           util_now() < rv->deadline) {
        if (link_closed(rv->next_fd) && !(spare && atomic_load(&rv->prev_linked))) {
            int final = CLIENT_FINAL;
            if (!atomic_compare_exchange_strong(&rv->client_final, &final, 0)) return 0;
            util_log("%s closed this worker's connection after its handshake (it left that "
                     "attempt); connecting again",
                     peer);
            close(rv->next_fd);
            rv->next_fd = -1;
            rv->client_rc = -ETIMEDOUT;
            return 1;
        }
        pthread_mutex_lock(&rv->lock);
        int have = rv->nexpect;
        pthread_mutex_unlock(&rv->lock);
        if (!have && util_now() - resolved >= 0.5) {
            resolve_prev(rv);
            resolved = util_now();
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void *client_main(void *arg)
{
    Rendezvous *rv = arg;
    int next = (rv->job->rank + 1) % rv->job->world;
    const TfPeer *p = &rv->tf->peers[next];
    char peer[NET_NAME_MAX];
    snprintf(peer, sizeof peer, "rank %d (%s:%d)", next, p->host, p->port);
    Dialer d = {.type = MSG_HELLO,
                .peer_rank = next,
                .abort_flag = &rv->abort_flag,
                .seen = rv->client_seen,
                .seen_len = sizeof rv->client_seen,
                .err = rv->client_err,
                .err_len = sizeof rv->client_err,
                .what = "connecting"};
    double backoff = 0.05;
    int dns_logged = 0, seq = 0, announced_logged = 0;
    rv->client_rc = -ETIMEDOUT;
    /* dials until rank+1 ACKs, and again when it leaves that attempt (client_hold) */
    for (;;) {
        while (!atomic_load(&rv->abort_flag) && util_now() < rv->deadline) {
            resolve_prev(rv);
            /* The address rank+1 announced first: its name may not resolve yet, or still to
             * the address of a process that is gone. */
            SrcAddr at;
            int fd = connect_announced(rv, p, &at);
            int announced = fd >= 0;
            if (announced && !announced_logged) {
                char a[INET6_ADDRSTRLEN] = "?";
                inet_ntop(at.family, at.a, a, sizeof a);
                util_log("connecting to %s at %s, the address it announced", peer, a);
                announced_logged = 1;
            }
            int unpublished = 0;
            if (fd == -EAGAIN)
                fd = connect_once(rv, p, &rv->next_probe, &dns_logged, &rv->abort_flag, 1);
            if (fd == -ENOENT) unpublished = 1, fd = -EAGAIN;
            if (fd == -ECANCELED) break;
            if (fd >= 0) {
                int rc = client_handshake(rv, &d, fd, peer);
                if (rc == 0) {
                    rv->next_fd = fd;
                    rv->client_rc = 0;
                    break;
                }
                close(fd);
                if (rc == -EAGAIN && announced) forget_next_at(rv, &at);
                if (rc != -EAGAIN) {
                    if (rc != -ECANCELED) rv->client_rc = rc;
                    break;
                }
            }
            /* not up yet, dropped, or the wrong party answered: try again (at once when
             * rank+1 announces itself meanwhile; every 0.25 s at most while the cluster DNS
             * has no record, which comes in a moment) */
            client_wait(rv, unpublished && backoff > 0.25 ? 0.25 : backoff, &seq);
            backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
        }
        if (rv->client_rc != 0) break;
        client_done(rv, 1);
        if (!client_hold(rv, peer)) return NULL;
        backoff = 0.05;
    }
    if (rv->client_rc == -ETIMEDOUT)
        snprintf(rv->client_err, sizeof rv->client_err, "could not reach %s within %.1f s%s%s",
                 peer, rv->opt->rendezvous_timeout_s, rv->client_seen[0] ? ": " : "",
                 rv->client_seen);
    atomic_store(&rv->abort_flag, 1);
    client_done(rv, 0);
    return NULL;
}

/* The announcer (net.h, address announcements): tells rank-1 where this worker is, until
 * rank-1 has acknowledged it or connected, the accept loop is over or the deadline
 * passes. A refusal is logged; a disagreement about the job is left to the ring's own
 * handshakes to report. */
static void *announce_main(void *arg)
{
    Rendezvous *rv = arg;
    int prev = (rv->job->rank + rv->job->world - 1) % rv->job->world;
    const TfPeer *p = &rv->tf->peers[prev];
    char peer[NET_NAME_MAX], err[sizeof rv->client_err];
    snprintf(peer, sizeof peer, "rank %d (%s:%d)", prev, p->host, p->port);
    Dialer d = {.type = MSG_ANNOUNCE,
                .peer_rank = prev,
                .abort_flag = &rv->server_done,
                .seen = rv->announce_seen,
                .seen_len = sizeof rv->announce_seen,
                .err = err,
                .err_len = sizeof err,
                .what = "announcing"};
    DnsProbe probe = {0};
    while (!atomic_load(&rv->server_done) && !atomic_load(&rv->abort_flag) &&
           !atomic_load(&rv->prev_linked) && util_now() < rv->deadline) {
        int fd = connect_once(rv, p, &probe, NULL, &rv->server_done, 0);
        if (fd == -ECANCELED) break;
        if (fd >= 0) {
            int rc = client_handshake(rv, &d, fd, peer);
            close(fd);
            if (rc != -EAGAIN) break; /* acknowledged, cancelled, or not to be mended */
        }
        client_nap(rv, 0.5);
    }
    return NULL;
}

int net_rendezvous(int listen_fd, const TfConfig *tf, const NetJob *job, const NetOptions *opt,
                   NetRing *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->prev_fd = out->next_fd = -1;
    if (job->world != tf->world || job->rank != tf->rank) {
        snprintf(err, errlen, "job says rank %d of %d, TF_CONFIG rank %d of %d", job->rank,
                 job->world, tf->rank, tf->world);
        return -EINVAL;
    }
    if (job->world == 1) return 0;
    Rendezvous *rv = xcalloc(1, sizeof *rv);
    rv->tf = tf, rv->job = job, rv->opt = opt;
    rv->deadline = util_now() + opt->rendezvous_timeout_s;
    rv->next_fd = -1;
    atomic_init(&rv->abort_flag, 0);
    atomic_init(&rv->server_done, 0);
    atomic_init(&rv->client_final, 0);
    atomic_init(&rv->prev_linked, 0);
    atomic_init(&rv->next_at_seq, 0);
    if (pipe2(rv->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        int e = errno;
        free(rv);
        snprintf(err, errlen, "rendezvous: pipe: %s", strerror(e));
        return -e;
    }
    pthread_mutex_init(&rv->lock, NULL);
    pthread_t th, announcer;
    int rc = pthread_create(&th, NULL, client_main, rv);
    /* In a ring of two rank-1's ring connection says where it is (net.h). */
    int announcing =
        rc == 0 && job->world > 2 && pthread_create(&announcer, NULL, announce_main, rv) == 0;
    if (rc != 0) {
        pthread_mutex_destroy(&rv->lock);
        close(rv->wake[0]), close(rv->wake[1]);
        free(rv);
        snprintf(err, errlen, "rendezvous: cannot start a thread: %s", strerror(rc));
        return -rc;
    }
    char serr[1024] = "";
    int prev_fd = accept_prev(rv, listen_fd, serr, sizeof serr);
    atomic_store(&rv->server_done, 1);
    if (prev_fd < 0 && prev_fd != -ECANCELED) atomic_store(&rv->abort_flag, 1);
    pthread_join(th, NULL);
    if (announcing) pthread_join(announcer, NULL);
    pthread_mutex_destroy(&rv->lock);
    close(rv->wake[0]), close(rv->wake[1]);

    rc = 0;
    if (prev_fd == -ETIMEDOUT && rv->client_rc == -ETIMEDOUT) {
        /* Both halves ran out of time: each may know why (what answered at rank+1's
         * address, what connected as rank-1), so say both. */
        rc = -ETIMEDOUT;
        snprintf(err, errlen, "%.500s; %.500s", rv->client_err, serr);
    } else if (prev_fd < 0 && prev_fd != -ECANCELED) {
        rc = prev_fd;
        snprintf(err, errlen, "%s", serr);
    } else if (rv->client_rc != 0) {
        rc = rv->client_rc;
        snprintf(err, errlen, "%s", rv->client_err);
    }
    if (rc < 0) {
        if (prev_fd >= 0) close(prev_fd);
        if (rv->next_fd >= 0) close(rv->next_fd);
        free(rv);
        return rc;
    }
    int prev = (job->rank + job->world - 1) % job->world, next = (job->rank + 1) % job->world;
    out->prev_fd = prev_fd;
    out->next_fd = rv->next_fd;
    snprintf(out->prev_name, sizeof out->prev_name, "rank %d (%s:%d)", prev, tf->peers[prev].host,
             tf->peers[prev].port);
    snprintf(out->next_name, sizeof out->next_name, "rank %d (%s:%d)", next, tf->peers[next].host,
             tf->peers[next].port);
    free(rv);
    return 0;
}
