/* fork_cluster — test helper: N worker processes on 127.0.0.1, each with a listener
 * bound to port 0 (so parallel test runs never collide), forked from the test, with
 * results passed back through shared memory. Children never call cmocka; the parent
 * asserts on what they wrote. */
#ifndef KT_TEST_FORK_CLUSTER_H
#define KT_TEST_FORK_CLUSTER_H

#include "net.h"
#include "ring.h"
#include "tfconfig.h"
#include "timescale.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CLUSTER_MAX 8

typedef struct Cluster {
    int world;
    int listen_fd[CLUSTER_MAX];
    int port[CLUSTER_MAX];
    pid_t pid[CLUSTER_MAX];
    int status[CLUSTER_MAX]; /* wait status of each child */
} Cluster;

/* Opens `world` listeners on 127.0.0.1 with kernel-chosen ports. */
static inline int cluster_listen(Cluster *c, int world)
{
    char err[256];
    memset(c, 0, sizeof *c);
    c->world = world;
    for (int i = 0; i < world; i++) {
        if (net_listen("127.0.0.1", 0, 0, &c->listen_fd[i], &c->port[i], err, sizeof err) < 0) {
            fprintf(stderr, "cluster_listen: %s\n", err);
            return -1;
        }
    }
    return 0;
}

/* The TF_CONFIG a rank of c would get; free with tfconfig_free. */
static inline void cluster_tfconfig(const Cluster *c, int rank, TfConfig *tf)
{
    tf->world = c->world;
    tf->rank = rank;
    tf->peers = calloc((size_t)c->world, sizeof *tf->peers);
    for (int i = 0; i < c->world; i++) {
        snprintf(tf->peers[i].host, sizeof tf->peers[i].host, "127.0.0.1");
        tf->peers[i].port = c->port[i];
    }
}

typedef void (*RankFn)(const Cluster *c, int rank, void *arg);

/* Forks rank's process: it closes the other listeners and runs fn, then _exit(0)s. */
static inline void cluster_start(Cluster *c, int rank, RankFn fn, void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < c->world; i++)
            if (i != rank) close(c->listen_fd[i]);
        fn(c, rank, arg);
        _exit(0);
    }
    c->pid[rank] = pid;
}

/* Closes the parent's listeners, waits for every child up to timeout_s, then
 * SIGKILLs any left. Returns how many had to be killed. */
static inline int cluster_wait(Cluster *c, double timeout_s)
{
    for (int i = 0; i < c->world; i++) {
        if (c->listen_fd[i] > 0) close(c->listen_fd[i]);
        c->listen_fd[i] = -1;
    }
    int killed = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < c->world; i++) {
        if (c->pid[i] <= 0) continue;
        for (;;) {
            pid_t w = waitpid(c->pid[i], &c->status[i], WNOHANG);
            if (w == c->pid[i]) break;
            clock_gettime(CLOCK_MONOTONIC, &now);
            double el =
                (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
            if (el > timeout_s) {
                kill(c->pid[i], SIGKILL);
                waitpid(c->pid[i], &c->status[i], 0);
                killed++;
                break;
            }
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        c->pid[i] = 0;
    }
    return killed;
}

/* Shared memory visible to the parent after fork; freed with munmap by the caller. */
static inline void *cluster_shared(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memset(p, 0, n);
    return p;
}

/* In a child: rendezvous as `rank` of c with the given job secret and return its
 * ring (RingOptions from the other arguments), or NULL with err filled. The rendezvous
 * timeouts are scaled by KT_TEST_TIME_SCALE; io_timeout_s is taken as given. */
static inline Collective *cluster_ring_opts(const Cluster *c, int rank, const char *secret,
                                            const RingOptions *ro, char *err, size_t errlen)
{
    TfConfig tf;
    cluster_tfconfig(c, rank, &tf);
    NetJob job = {.world = c->world,
                  .rank = rank,
                  .model_signature = "test-model",
                  .global_batch = 64,
                  .dataset = "synthetic"};
    NetOptions opt = {.rendezvous_timeout_s = scaled(20),
                      .handshake_timeout_s = scaled(2),
                      .secret = (const unsigned char *)secret,
                      .secret_len = secret ? strlen(secret) : 0};
    NetRing conn;
    int rc = net_rendezvous(c->listen_fd[rank], &tf, &job, &opt, &conn, err, errlen);
    tfconfig_free(&tf);
    close(c->listen_fd[rank]);
    if (rc < 0) return NULL;
    return ring_create(rank, c->world, &conn, ro);
}

static inline Collective *cluster_ring(const Cluster *c, int rank, const char *secret,
                                       double io_timeout_s, size_t segment_bytes,
                                       size_t thread_min_bytes, char *err, size_t errlen)
{
    RingOptions ro = {.io_timeout_s = io_timeout_s,
                      .segment_bytes = segment_bytes,
                      .thread_min_bytes = thread_min_bytes};
    return cluster_ring_opts(c, rank, secret, &ro, err, errlen);
}

#endif
