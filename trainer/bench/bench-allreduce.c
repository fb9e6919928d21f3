/* bench-allreduce — all-reduce bus bandwidth of the TCP ring (ring.c) on loopback,
 * side by side in one run with PyTorch's gloo backend (allreduce_gloo.py) and with the
 * loopback exchange limit: two processes that each send and receive the same bytes at
 * once, over one TCP connection per direction as the ring has, which one ring step cannot
 * beat. Like the ring, the
 * exchange sends from its own thread while the caller receives once a message reaches
 * --thread-min bytes (1 MiB by default), and alternates on one thread below that.
 *
 * busbw follows nccl-tests: size / time x 2(N-1)/N. The exchange limit is reported as
 * bytes sent per process / time for the bytes one ring rank sends, size x 2(N-1)/N, so
 * the two columns compare directly. The three take turns --rounds times; each figure is
 * the best of all rounds' --repeats timed loops; a loop moves about 256 MiB (5 to 1000
 * all-reduces), and the ranks' times are maxed. Each size also lists every round's own
 * ring/limit ratio (ring and exchange of one round run back to back) and their median, so a
 * best-of figure can be checked against the pairs. A fourth column, shm, is the trainer's
 * collective between ranks of one host: the ring with its shared-memory path (shm.h).
 *
 * usage: bench-allreduce [--out FILE] [--python PYTHON] [--repeats R] [--rounds K] [--worlds 2,4]
 *                        [--sizes BYTES,...] [--sockbuf BYTES] [--segment BYTES]
 *                        [--thread-min BYTES] */
#include "gemm.h"
#include "net.h"
#include "ring.h"
#include "shm.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZES 32
#define MAX_REPEATS 16
#define MAX_WORLD 8
#define MAX_ROUNDS 16

static size_t g_sizes[MAX_SIZES] = {4096,    16384,    65536,    262144,  1048576,
                                    4194304, 11082536, 16777216, 67108864};
static int g_nsizes = 9;
static int g_repeats = 3;
static int g_rounds = 3; /* ring, exchange, gloo in turn, this many times */
static int g_sockbuf = 0;         /* SO_SNDBUF/SO_RCVBUF; 0: kernel autotuning */
static size_t g_segment = 0;      /* ring segment bytes; 0: the ring's default */
static size_t g_thread_min = 0;   /* RingOptions.thread_min_bytes; 0: the default */

static int iterations(size_t size)
{
    size_t it = (256u << 20) / size;
    return it < 5 ? 5 : it > 1000 ? 1000 : (int)it;
}

/* ---------------------------------------------------------------------------------- */
/* ring */

typedef struct Shared {
    double t[MAX_WORLD][MAX_SIZES][MAX_REPEATS]; /* seconds per operation */
    int rc[MAX_WORLD];
    char err[MAX_WORLD][256];
} Shared;

/* shm: the ring wrapped by shm_wrap, the buffer a shared arena (as the trainer's
 * gradient arena: whole pages mapped alone), so all-reduces of 256 KiB and more go
 * through shared memory (shm.h) */
static void ring_rank(int rank, int world, const int *lfd, const int *port, Shared *sh, int shm)
{
    TfConfig tf = {.world = world, .rank = rank, .peers = xcalloc((size_t)world, sizeof(TfPeer))};
    for (int i = 0; i < world; i++) {
        snprintf(tf.peers[i].host, sizeof tf.peers[i].host, "127.0.0.1");
        tf.peers[i].port = port[i];
    }
    NetJob job = {.world = world,
                  .rank = rank,
                  .model_signature = "bench",
                  .global_batch = 1,
                  .dataset = "none"};
    NetOptions opt = {.rendezvous_timeout_s = 30,
                      .handshake_timeout_s = 5,
                      .secret = (const unsigned char *)"bench",
                      .secret_len = 5,
                      .sockbuf_bytes = g_sockbuf};
    NetRing conn;
    char *err = sh->err[rank];
    if ((sh->rc[rank] = net_rendezvous(lfd[rank], &tf, &job, &opt, &conn, err, 256)) < 0) return;
    RingOptions ro = {.segment_bytes = g_segment, .thread_min_bytes = g_thread_min};
    Collective *c = ring_create(rank, world, &conn, &ro);
    size_t maxn = 0;
    for (int s = 0; s < g_nsizes; s++) maxn = g_sizes[s] > maxn ? g_sizes[s] : maxn;
    const size_t bytes = (maxn + 4095) / 4096 * 4096;
    float *x = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (x == MAP_FAILED) util_fail(1, "out of memory");
    if (shm) {
        c = shm_wrap(c);
        if ((sh->rc[rank] = coll_share_arena(c, x, bytes, err, 256)) == 0 && !shm_active(c)) {
            snprintf(err, 256, "shared memory not taken up");
            sh->rc[rank] = -1;
        }
    }
    for (size_t i = 0; i < maxn / sizeof(float); i++) x[i] = 1.0f / (float)(i % 97 + 1);
    for (int s = 0; s < g_nsizes && sh->rc[rank] == 0; s++) {
        size_t n = g_sizes[s] / sizeof(float);
        int iters = iterations(g_sizes[s]);
        for (int w = 0; w < 2; w++) sh->rc[rank] |= coll_allreduce_sum(c, x, n, err, 256);
        for (int r = 0; r < g_repeats && sh->rc[rank] == 0; r++) {
            sh->rc[rank] |= coll_barrier(c, err, 256);
            double t0 = util_now();
            for (int i = 0; i < iters && sh->rc[rank] == 0; i++)
                sh->rc[rank] |= coll_allreduce_sum(c, x, n, err, 256);
            sh->t[rank][s][r] = (util_now() - t0) / iters;
        }
    }
    coll_destroy(c);
    munmap(x, bytes);
    tfconfig_free(&tf);
}

/* ---------------------------------------------------------------------------------- */
/* loopback exchange limit */

/* Moves n bytes one way on non-blocking fd (send when out, else receive into in),
 * waiting in poll when the socket is full or empty. */
static int one_way(int fd, const char *out, char *in, size_t n)
{
    size_t done = 0;
    while (done < n) {
        size_t k = n - done;
        ssize_t r = out ? send(fd, out + done, k, MSG_NOSIGNAL) : recv(fd, in + done, k, 0);
        if (r > 0) {
            done += (size_t)r;
        } else if (r == 0) {
            return -ECONNRESET;
        } else if (errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = out ? POLLOUT : POLLIN};
            poll(&p, 1, 1000);
        } else if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

/* Sends and receives n bytes at once on fd (non-blocking) from one thread, alternating
 * calls of 1 MiB at most: what the ring does below its thread_min_bytes. */
static int exchange_single(int sfd, int rfd, const char *out, char *in, size_t n)
{
    size_t so = 0, ro = 0;
    while (so < n || ro < n) {
        int progress = 0;
        if (so < n) {
            size_t k = n - so > (1u << 20) ? (1u << 20) : n - so;
            ssize_t w = send(sfd, out + so, k, MSG_NOSIGNAL);
            if (w > 0) so += (size_t)w, progress = 1;
            else if (errno != EAGAIN) return -errno;
        }
        if (ro < n) {
            size_t k = n - ro > (1u << 20) ? (1u << 20) : n - ro;
            ssize_t r = recv(rfd, in + ro, k, 0);
            if (r > 0) ro += (size_t)r, progress = 1;
            else if (r == 0) return -ECONNRESET;
            else if (errno != EAGAIN) return -errno;
        }
        if (!progress) {
            struct pollfd p[2] = {{.fd = so < n ? sfd : -1, .events = POLLOUT},
                                  {.fd = ro < n ? rfd : -1, .events = POLLIN}};
            poll(p, 2, 1000);
        }
    }
    return 0;
}

/* A persistent send thread, as the ring keeps one: from thread_min_bytes up, the bytes
 * go out on this thread while the caller receives, so sending and receiving each have
 * a core, which is what the ring's threaded path gets. */
typedef struct Sender {
    pthread_t t;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int fd, quit, busy, rc;
    const char *out;
    size_t n;
} Sender;

static void *sender_main(void *arg)
{
    Sender *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->busy && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit) break;
        pthread_mutex_unlock(&s->mu);
        int rc = one_way(s->fd, s->out, NULL, s->n);
        pthread_mutex_lock(&s->mu);
        s->rc = rc;
        s->busy = 0;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int exchange(Sender *s, int rfd, const char *out, char *in, size_t n)
{
    size_t thread_min = g_thread_min ? g_thread_min : 1u << 20;
    if (n < thread_min) return exchange_single(s->fd, rfd, out, in, n);
    pthread_mutex_lock(&s->mu);
    s->out = out, s->n = n, s->busy = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    int rc = one_way(rfd, NULL, in, n);
    pthread_mutex_lock(&s->mu);
    while (s->busy) pthread_cond_wait(&s->cv, &s->mu);
    if (!rc) rc = s->rc;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* sfd carries this side's bytes to the other, rfd the other's to this one: one
 * connection per direction, as the ring has to its next and from its previous rank. */
static void exchange_rank(int side, int sfd, int rfd, int world, Shared *sh)
{
    size_t maxb = 0;
    for (int s = 0; s < g_nsizes; s++) {
        size_t b = g_sizes[s] * 2 * (size_t)(world - 1) / (size_t)world;
        maxb = b > maxb ? b : maxb;
    }
    char *out = xmalloc(maxb), *in = xmalloc(maxb), sync[8] = {0};
    memset(out, side + 1, maxb);
    fcntl(sfd, F_SETFL, fcntl(sfd, F_GETFL) | O_NONBLOCK);
    fcntl(rfd, F_SETFL, fcntl(rfd, F_GETFL) | O_NONBLOCK);
    Sender snd = {.fd = sfd, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    if (pthread_create(&snd.t, NULL, sender_main, &snd) != 0) {
        sh->rc[side] = -EAGAIN;
        snprintf(sh->err[side], 256, "exchange: cannot start the send thread");
        free(out), free(in);
        return;
    }
    for (int s = 0; s < g_nsizes && sh->rc[side] == 0; s++) {
        size_t b = g_sizes[s] * 2 * (size_t)(world - 1) / (size_t)world;
        int iters = iterations(g_sizes[s]);
        for (int w = 0; w < 2; w++) sh->rc[side] |= exchange(&snd, rfd, out, in, b);
        for (int r = 0; r < g_repeats && sh->rc[side] == 0; r++) {
            sh->rc[side] |= exchange(&snd, rfd, sync, sync, sizeof sync);
            double t0 = util_now();
            for (int i = 0; i < iters && sh->rc[side] == 0; i++)
                sh->rc[side] |= exchange(&snd, rfd, out, in, b);
            sh->t[side][s][r] = (util_now() - t0) / iters;
        }
    }
    pthread_mutex_lock(&snd.mu);
    snd.quit = 1;
    pthread_cond_signal(&snd.cv);
    pthread_mutex_unlock(&snd.mu);
    pthread_join(snd.t, NULL);
    if (sh->rc[side]) snprintf(sh->err[side], 256, "exchange: %s", strerror(-sh->rc[side]));
    free(out), free(in);
}

/* ---------------------------------------------------------------------------------- */

static int wait_children(pid_t *pid, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st;
        waitpid(pid[i], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    return bad ? -1 : 0;
}

/* Median of n values (n <= MAX_ROUNDS); v is left unchanged. */
static double median(const double *v, int n)
{
    double t[MAX_ROUNDS];
    memcpy(t, v, (size_t)n * sizeof *t);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
            double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* Best over repeats of the max over ranks, per size, into best[]. */
static void best_times(const Shared *sh, int ranks, double *best)
{
    for (int s = 0; s < g_nsizes; s++) {
        best[s] = 1e30;
        for (int r = 0; r < g_repeats; r++) {
            double m = 0;
            for (int k = 0; k < ranks; k++) m = sh->t[k][s][r] > m ? sh->t[k][s][r] : m;
            best[s] = m < best[s] ? m : best[s];
        }
    }
}

static int run_ring(int world, double *best, int shm)
{
    Shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(sh, 0, sizeof *sh);
    int lfd[MAX_WORLD], port[MAX_WORLD];
    pid_t pid[MAX_WORLD];
    char err[256];
    for (int i = 0; i < world; i++)
        if (net_listen("127.0.0.1", 0, g_sockbuf, &lfd[i], &port[i], err, sizeof err) < 0)
            util_fail(1, "%s", err);
    for (int i = 0; i < world; i++) {
        if ((pid[i] = fork()) == 0) {
            for (int k = 0; k < world; k++)
                if (k != i) close(lfd[k]);
            ring_rank(i, world, lfd, port, sh, shm);
            _exit(sh->rc[i] ? 1 : 0);
        }
    }
    for (int i = 0; i < world; i++) close(lfd[i]);
    int rc = wait_children(pid, world);
    for (int i = 0; i < world; i++)
        if (sh->rc[i]) fprintf(stderr, "ring rank %d: %s\n", i, sh->err[i]);
    best_times(sh, world, best);
    munmap(sh, sizeof *sh);
    return rc;
}

static int run_exchange(int world, double *best)
{
    Shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(sh, 0, sizeof *sh);
    int lfd, port;
    char err[256];
    if (net_listen("127.0.0.1", 0, g_sockbuf, &lfd, &port, err, sizeof err) < 0)
        util_fail(1, "%s", err);
    pid_t pid[2];
    for (int side = 0; side < 2; side++) {
        if ((pid[side] = fork()) == 0) {
            int fd[2]; /* 0→1, then 1→0 */
            for (int c = 0; c < 2; c++) {
                if (side == 0) {
                    fd[c] = accept(lfd, NULL, NULL);
                } else {
                    fd[c] = socket(AF_INET, SOCK_STREAM, 0);
                    net_tune_socket(fd[c], g_sockbuf);
                    fcntl(fd[c], F_SETFL, fcntl(fd[c], F_GETFL) & ~O_NONBLOCK);
                    struct sockaddr_in sa = {.sin_family = AF_INET,
                                             .sin_port = htons((uint16_t)port),
                                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
                    if (connect(fd[c], (struct sockaddr *)&sa, sizeof sa) < 0) _exit(1);
                }
                if (fd[c] < 0) _exit(1);
                net_tune_socket(fd[c], g_sockbuf);
            }
            close(lfd);
            exchange_rank(side, fd[side], fd[1 - side], world, sh);
            _exit(sh->rc[side] ? 1 : 0);
        }
    }
    close(lfd);
    int rc = wait_children(pid, 2);
    for (int i = 0; i < 2; i++)
        if (sh->rc[i]) fprintf(stderr, "exchange side %d: %s\n", i, sh->err[i]);
    best_times(sh, 2, best);
    munmap(sh, sizeof *sh);
    return rc;
}

static int run_gloo(const char *python, const char *script, int world, double *best)
{
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "'%s' '%s' %d %d", python, script, world, g_repeats);
    for (int s = 0; s < g_nsizes; s++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " %zu", g_sizes[s]);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[512];
    int got = 0;
    for (int s = 0; s < g_nsizes; s++) best[s] = 0;
    while (fgets(line, sizeof line, p)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(o, "size");
        const cJSON *secs = cJSON_GetObjectItemCaseSensitive(o, "seconds");
        if (cJSON_IsNumber(size) && cJSON_IsNumber(secs))
            for (int s = 0; s < g_nsizes; s++)
                if ((double)g_sizes[s] == size->valuedouble) best[s] = secs->valuedouble, got++;
        cJSON_Delete(o);
    }
    int st = pclose(p);
    return st == 0 && got == g_nsizes ? 0 : -1;
}

static void machine_info(cJSON *o)
{
    struct utsname u;
    uname(&u);
    cJSON_AddStringToObject(o, "machine", u.machine);
    cJSON_AddNumberToObject(o, "nproc", (double)sysconf(_SC_NPROCESSORS_ONLN));
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *v = strchr(line, ':');
        if (!v) continue;
        v += 2;
        v[strcspn(v, "\n")] = '\0';
        cJSON_AddStringToObject(o, "cpu", v);
        break;
    }
    if (f) fclose(f);
    /* the CPU as cpuid tells it and the kernels a trainer here runs on (gemm.h) */
    const GemmKernels *k = gemm_kernels();
    cJSON_AddStringToObject(o, "cpu_vendor", k->info.vendor);
    cJSON_AddNumberToObject(o, "cpu_family", k->info.family);
    cJSON_AddNumberToObject(o, "cpu_model_number", k->info.model);
    cJSON_AddStringToObject(o, "cpu_flags", k->cpu);
    char gemm[512];
    gemm_describe(gemm, sizeof gemm);
    cJSON_AddStringToObject(o, "gemm", gemm);
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON_AddStringToObject(o, "date", date);
}

static int parse_list(const char *s, size_t *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        out[n++] = strtoull(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *s) return -1;
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *out = "bench/results/allreduce.json";
    const char *python = NULL, *script = "trainer/bench/allreduce_gloo.py";
    size_t worlds[MAX_WORLD] = {2, 4};
    int nworlds = 2;
    signal(SIGPIPE, SIG_IGN);
    util_set_log_prefix("bench-allreduce");
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) util_fail(2, "%s: missing value", argv[i]);
        if (!strcmp(argv[i], "--out")) out = argv[++i];
        else if (!strcmp(argv[i], "--python")) python = argv[++i];
        else if (!strcmp(argv[i], "--script")) script = argv[++i];
        else if (!strcmp(argv[i], "--repeats")) g_repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sockbuf")) g_sockbuf = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds")) g_rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--thread-min")) g_thread_min = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--segment")) g_segment = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--worlds")) nworlds = parse_list(argv[++i], worlds, MAX_WORLD);
        else if (!strcmp(argv[i], "--sizes")) g_nsizes = parse_list(argv[++i], g_sizes, MAX_SIZES);
        else util_fail(2, "unknown option %s", argv[i]);
    }
    if (g_repeats < 1 || g_repeats > MAX_REPEATS || g_rounds < 1 || g_rounds > MAX_ROUNDS ||
        nworlds < 1 || g_nsizes < 1)
        util_fail(2, "bad --repeats (1..%d), --rounds (1..%d), --worlds or --sizes", MAX_REPEATS,
                  MAX_ROUNDS);
    for (int s = 0; s < g_nsizes; s++) g_sizes[s] -= g_sizes[s] % sizeof(float);

    cJSON *root = cJSON_CreateObject();
    machine_info(root);
    cJSON_AddStringToObject(root, "definition",
                            "busbw = size/time x 2(N-1)/N (nccl-tests); exchange_limit = bytes "
                            "each of two processes sends and receives at once over loopback TCP, "
                            "one connection per direction as in the ring / time, for size x "
                            "2(N-1)/N bytes, sending from a second thread from "
                            "thread_min_bytes up as the ring does; best of repeats");
    cJSON_AddNumberToObject(root, "repeats", g_repeats);
    cJSON_AddNumberToObject(root, "rounds", g_rounds);
    cJSON_AddNumberToObject(root, "sockbuf_bytes", g_sockbuf);
    cJSON_AddNumberToObject(root, "thread_min_bytes",
                            (double)(g_thread_min ? g_thread_min : 1u << 20));
    cJSON_AddNumberToObject(root, "segment_bytes", (double)(g_segment ? g_segment : 1u << 20));
    cJSON_AddStringToObject(root, "gloo", python ? "torch.distributed gloo, CPU" : "not run");
    cJSON *results = cJSON_AddArrayToObject(root, "results");
    int failed = 0;
    for (int w = 0; w < nworlds; w++) {
        int world = (int)worlds[w];
        if (world < 2 || world > MAX_WORLD)
            util_fail(2, "--worlds: %d is not in 2..%d", world, MAX_WORLD);
        double tr[MAX_SIZES], tx[MAX_SIZES], tg[MAX_SIZES], ts[MAX_SIZES];
        double br[MAX_SIZES], bx[MAX_SIZES], bg[MAX_SIZES], bs[MAX_SIZES];
        double paired[MAX_SIZES][MAX_ROUNDS]; /* per round: ring busbw / exchange limit */
        int have_gloo = python != NULL;
        for (int s = 0; s < g_nsizes; s++) br[s] = bx[s] = bg[s] = bs[s] = 1e30;
        /* the contenders take turns so that the machine's load hits them alike */
        for (int round = 0; round < g_rounds; round++) {
            util_log("N=%d round %d: ring, shared memory, loopback exchange%s", world, round + 1,
                     have_gloo ? ", gloo" : "");
            failed |= run_ring(world, tr, 0);
            failed |= run_ring(world, ts, 1);
            failed |= run_exchange(world, tx);
            if (have_gloo && run_gloo(python, script, world, tg) != 0) {
                util_log("gloo run failed; its column is left out");
                have_gloo = 0;
            }
            for (int s = 0; s < g_nsizes; s++) {
                paired[s][round] = tx[s] / tr[s];
                br[s] = tr[s] < br[s] ? tr[s] : br[s];
                bx[s] = tx[s] < bx[s] ? tx[s] : bx[s];
                bs[s] = ts[s] < bs[s] ? ts[s] : bs[s];
                if (have_gloo) bg[s] = tg[s] < bg[s] ? tg[s] : bg[s];
            }
        }
        memcpy(tr, br, sizeof tr), memcpy(tx, bx, sizeof tx), memcpy(tg, bg, sizeof tg);
        memcpy(ts, bs, sizeof ts);
        double f = 2.0 * (world - 1) / world;
        for (int s = 0; s < g_nsizes; s++) {
            cJSON *r = cJSON_CreateObject();
            double size = (double)g_sizes[s];
            double ring_bus = size / tr[s] * f / 1e9, limit = size * f / tx[s] / 1e9;
            cJSON_AddNumberToObject(r, "world", world);
            cJSON_AddNumberToObject(r, "bytes", size);
            cJSON_AddNumberToObject(r, "ring_us", tr[s] * 1e6);
            cJSON_AddNumberToObject(r, "ring_busbw_GBps", ring_bus);
            cJSON_AddNumberToObject(r, "exchange_limit_GBps", limit);
            cJSON_AddNumberToObject(r, "ring_vs_limit", ring_bus / limit);
            cJSON_AddItemToObject(r, "ring_vs_limit_per_round",
                                  cJSON_CreateDoubleArray(paired[s], g_rounds));
            cJSON_AddNumberToObject(r, "ring_vs_limit_median_of_rounds",
                                    median(paired[s], g_rounds));
            /* below SHM_MIN_BYTES the shared-memory collective hands the ring the work */
            const double shm_bus = size / ts[s] * f / 1e9;
            cJSON_AddNumberToObject(r, "shm_us", ts[s] * 1e6);
            cJSON_AddNumberToObject(r, "shm_busbw_GBps", shm_bus);
            cJSON_AddBoolToObject(r, "shm_path", size >= SHM_MIN_BYTES);
            printf(
                "N=%d %10.0f B  ring %8.1f us %6.3f GB/s  limit %6.3f GB/s (x%.2f)  shm %6.3f GB/s",
                world, size, tr[s] * 1e6, ring_bus, limit, ring_bus / limit, shm_bus);
            if (have_gloo) {
                double gloo_bus = size / tg[s] * f / 1e9;
                cJSON_AddNumberToObject(r, "gloo_us", tg[s] * 1e6);
                cJSON_AddNumberToObject(r, "gloo_busbw_GBps", gloo_bus);
                cJSON_AddNumberToObject(r, "ring_vs_gloo", ring_bus / gloo_bus);
                printf("  gloo %8.1f us %6.3f GB/s (ring x%.2f)", tg[s] * 1e6, gloo_bus,
                       ring_bus / gloo_bus);
            }
            printf("\n");
            fflush(stdout);
            cJSON_AddItemToArray(results, r);
        }
    }
    char *json = cJSON_Print(root);
    FILE *f = fopen(out, "w");
    if (!f) util_fail(1, "%s: %s", out, strerror(errno));
    fprintf(f, "%s\n", json);
    fclose(f);
    free(json);
    cJSON_Delete(root);
    return failed ? 1 : 0;
}
