#include "launch.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <openssl/rand.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "net.h"
#include "util.h"

#define LAUNCH_MAX_WORKERS 64
#define LINE_MAX_BYTES 8192
/* How long stopped workers get to exit by themselves before SIGKILL: a worker waiting
 * for a silent peer gives up after the ring's io timeout (main.c), plus a margin. */
#define STOP_GRACE_S 75.0

/* What a worker added back logs once it holds the state (state_sync in main.c). */
#define JOINED_LINE "joined generation "

typedef struct {
    int fd;                    /* read end of the child's stdout or stderr; -1 at EOF */
    FILE *to;                  /* where its lines go */
    const char *watch;         /* a text looked for in its lines, or NULL */
    int seen;                  /* a line held it */
    size_t len;
    char buf[LINE_MAX_BYTES];
} Stream;

typedef struct {
    pid_t pid;                 /* 0 once reaped */
    int code;                  /* exit code, 128+n for signal n; -1 while running */
    Stream out, err;
} Worker;

/* One launch: what every (re)spawn of a worker needs. */
typedef struct {
    int n;
    int ports[LAUNCH_MAX_WORKERS];
    const char *self;
    int argc;
    char **argv;
    const char *secret, *blas_threads;
    /* Live recovery (--recovery-timeout > 0, several workers): a worker that exits
     * retryable while another runs is started again alone. */
    int recovery;
    int max_restarts, restarts; /* group restarts and replacements, one budget */
    char term_dir[64];          /* the workers' termination messages (not the chief's) */
    /* Shrink (--min-workers M > 0, docs/design.md "Elastic jobs"): a worker that fails
     * retryable once the budget is spent is dropped while M others remain; the members
     * file (KUBETRAIN_MEMBERS_FILE) names those in the ring. */
    int min_workers;
    int member[LAUNCH_MAX_WORKERS], members;
    char members_path[96];
    /* Growth (SIGUSR2, add_back): the worker added back that has not joined yet, or -1;
     * the next one waits for it, since a worker joins the ring the members file named
     * when it started. */
    int joining;
} Launch;

static volatile sig_atomic_t forwarded_signal;
static volatile sig_atomic_t grow_requested;

static void on_signal(int sig)
{
    forwarded_signal = sig;
}

static void on_grow_signal(int sig)
{
    (void)sig;
    grow_requested = 1;
}

static int retryable(int code)
{
    return code == KT_EXIT_RETRY || code >= 128;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kubetrain-trainer launch --workers N [--max-restarts K] [--min-workers M]\n"
            "                                [trainer options]\n"
            "  --workers N        local worker processes on 127.0.0.1 (1..%d)\n"
            "  --max-restarts K   group restarts after a retryable failure, and with\n"
            "                     --recovery-timeout > 0 workers started again alone (3)\n"
            "  --min-workers M    a worker lost once the restarts are spent is dropped and\n"
            "                     the others go on without it while M remain (0: off);\n"
            "                     SIGUSR2 to launch adds the dropped worker of the lowest\n"
            "                     index back: it joins at the next step boundary\n"
            "trainer options:\n",
            LAUNCH_MAX_WORKERS);
    config_usage(f);
}

/* Prints the complete lines in s (all of it when flush), each prefixed with
 * "[worker i] ", and keeps the rest. */
static void stream_emit(Stream *s, int index, int flush)
{
    size_t start = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] != '\n') continue;
        if (s->watch && !s->seen) {
            s->buf[i] = '\0';
            s->seen = strstr(s->buf + start, s->watch) != NULL;
        }
        fprintf(s->to, "[worker %d] %.*s\n", index, (int)(i - start), s->buf + start);
        start = i + 1;
    }
    if (start == 0 && s->len == sizeof s->buf) flush = 1; /* a line longer than buf */
    if (flush && start < s->len) {
        fprintf(s->to, "[worker %d] %.*s\n", index, (int)(s->len - start), s->buf + start);
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    fflush(s->to);
}

static void stream_read(Stream *s, int index)
{
    ssize_t n = read(s->fd, s->buf + s->len, sizeof s->buf - s->len);
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) {
        close(s->fd);
        s->fd = -1;
        stream_emit(s, index, 1);
        return;
    }
    s->len += (size_t)n;
    stream_emit(s, index, 0);
}

/* TF_CONFIG of worker `index` in a cluster of `n` on 127.0.0.1 ports. Caller frees. */
static char *make_tf_config(const int *ports, int n, int index)
{
    cJSON *root = cJSON_CreateObject(), *cluster = cJSON_AddObjectToObject(root, "cluster");
    cJSON *workers = cJSON_AddArrayToObject(cluster, "worker");
    for (int i = 0; i < n; i++) {
        char addr[32];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", ports[i]);
        cJSON_AddItemToArray(workers, cJSON_CreateString(addr));
    }
    cJSON *task = cJSON_AddObjectToObject(root, "task");
    cJSON_AddStringToObject(task, "type", "worker");
    cJSON_AddNumberToObject(task, "index", index);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) util_fail(KT_EXIT_DATA, "out of memory building TF_CONFIG");
    return s;
}

/* Free ports on 127.0.0.1: listeners bound to port 0, all open at once so the ports
 * are distinct, then closed for the workers to bind. */
static void pick_ports(int *ports, int n)
{
    int fds[LAUNCH_MAX_WORKERS];
    char err[256];
    for (int i = 0; i < n; i++)
        if (net_listen("127.0.0.1", 0, 0, &fds[i], &ports[i], err, sizeof err))
            util_fail(KT_EXIT_RETRY, "launch: no free port: %s", err);
    for (int i = 0; i < n; i++) close(fds[i]);
}

/* Where worker `index` writes its termination message: the chief where launch's own
 * goes (the job's result), the others into l->term_dir, read back by timed_out. */
static void term_path(const Launch *l, int index, char *out, size_t outlen)
{
    const char *env = getenv("KUBETRAIN_TERMINATION_FILE");
    if (index == 0) snprintf(out, outlen, "%s", env && *env ? env : "/dev/termination-log");
    else snprintf(out, outlen, "%s/worker-%d.json", l->term_dir, index);
}

/* 1 when worker `index` gave up waiting for a replacement ("recoveryTimedOut" in its
 * termination message): the survivors ask for the group restart. */
static int timed_out(const Launch *l, int index)
{
    char path[4200], buf[4096];
    term_path(l, index, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    cJSON *o = cJSON_Parse(buf);
    int yes = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "recoveryTimedOut"));
    cJSON_Delete(o);
    return yes;
}

/* Writes the members file: the indices of l's members, ascending, separated by commas;
 * by a rename, so that a worker never reads half of it. */
static void write_members(const Launch *l)
{
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s.tmp", l->members_path);
    FILE *f = fopen(tmp, "w");
    if (!f) util_fail(KT_EXIT_RETRY, "launch: cannot write %s: %s", tmp, strerror(errno));
    for (int i = 0, k = 0; i < l->n; i++)
        if (l->member[i]) fprintf(f, "%s%d", k++ ? "," : "", i);
    fputc('\n', f);
    if (fclose(f) || rename(tmp, l->members_path))
        util_fail(KT_EXIT_RETRY, "launch: cannot write %s: %s", l->members_path, strerror(errno));
}

/* The chief: the member with the lowest index (the survivors of a shrink keep their
 * order, docs/design.md). */
static int chief_of(const Launch *l)
{
    int i = 0;
    while (i < l->n - 1 && !l->member[i]) i++;
    return i;
}

/* A chief other than worker 0 wrote its result into its own file: it becomes launch's,
 * where the chief's goes. */
static void adopt_termination(const Launch *l, int chief)
{
    char from[4200], to[4200], buf[4096];
    term_path(l, chief, from, sizeof from);
    term_path(l, 0, to, sizeof to);
    FILE *f = fopen(from, "r");
    if (!f) return;
    size_t got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    FILE *g = fopen(to, "w");
    if (!g) return;
    fwrite(buf, 1, got, g);
    fclose(g);
}

static void spawn(Worker *w, int index, const Launch *l)
{
    const int n = l->n, *ports = l->ports, argc = l->argc;
    const char *self = l->self, *secret = l->secret, *blas_threads = l->blas_threads;
    char **argv = l->argv;
    char term[4200];
    term_path(l, index, term, sizeof term);
    if (index != 0 || getenv("KUBETRAIN_TERMINATION_FILE")) {
        FILE *tf = fopen(term, "w"); /* no message of an earlier process read back */
        if (tf) fclose(tf);
    }
    int po[2], pe[2];
    if (pipe(po) || pipe(pe)) util_fail(KT_EXIT_RETRY, "launch: pipe: %s", strerror(errno));
    char *tf = make_tf_config(ports, n, index);
    /* Blocked across the fork: a SIGTERM that launch sends the new child at once (it
     * stops the others in the same pass that started this one) must not run launch's
     * handler in the child, which would lose it; it waits for SIG_DFL below. */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, &old);
    pid_t pid = fork();
    if (pid < 0) util_fail(KT_EXIT_RETRY, "launch: fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(po[1], STDOUT_FILENO);
        dup2(pe[1], STDERR_FILENO);
        close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        setenv("TF_CONFIG", tf, 1);
        setenv("KUBETRAIN_SECRET", secret, 1);
        unsetenv("KUBETRAIN_SECRET_FILE");
        if (blas_threads) setenv("OPENBLAS_NUM_THREADS", blas_threads, 1);
        /* the chief alone reports the job's result; launch reads the others' */
        if (index != 0) setenv("KUBETRAIN_TERMINATION_FILE", term, 1);
        if (l->min_workers) setenv("KUBETRAIN_MEMBERS_FILE", l->members_path, 1);
        char **av = xcalloc((size_t)argc + 3, sizeof *av);
        av[0] = (char *)"kubetrain-trainer";
        av[1] = (char *)"train";
        for (int i = 0; i < argc; i++) av[i + 2] = argv[i];
        execv(self, av);
        fprintf(stderr, "exec %s: %s\n", self, strerror(errno));
        _exit(KT_EXIT_USAGE);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    free(tf);
    close(po[1]), close(pe[1]);
    memset(w, 0, sizeof *w);
    w->pid = pid;
    w->code = -1;
    w->out.fd = po[0], w->out.to = stdout;
    w->err.fd = pe[0], w->err.to = stderr;
    util_log("worker %d: pid %d, 127.0.0.1:%d", index, (int)pid, ports[index]);
}

static void signal_running(Worker *w, int n, int sig)
{
    for (int i = 0; i < n; i++)
        if (w[i].pid > 0) kill(w[i].pid, sig);
}

/* Reads what is left of a dead worker's output, so that a replacement starts on fresh
 * streams. */
static void drain(Worker *w, int index)
{
    while (w->out.fd >= 0) stream_read(&w->out, index);
    while (w->err.fd >= 0) stream_read(&w->err, index);
}

/* SIGUSR2 with --min-workers (docs/design.md, "Elastic jobs"): the dropped worker of the
 * lowest index is added back. The members file names it again, the running members are
 * told (SIGUSR1) and form the grown ring after their next step, and it starts again,
 * same index and port, to join them there and receive the state from one of them. */
static void add_back(Worker *w, Launch *l, int *running)
{
    int i = 0;
    while (i < l->n && l->member[i]) i++;
    if (i == l->n) {
        util_log("elastic: SIGUSR2, but no worker was dropped: nothing to add back");
        return;
    }
    l->member[i] = 1;
    l->members++;
    write_members(l);
    util_log("elastic: adding worker %d back (SIGUSR2): the %d workers form one ring after the "
             "next step",
             i, l->members);
    for (int k = 0; k < l->n; k++)
        if (l->member[k] && w[k].pid > 0) kill(w[k].pid, SIGUSR1);
    drain(&w[i], i);
    spawn(&w[i], i, l);
    w[i].err.watch = JOINED_LINE;
    l->joining = i;
    (*running)++;
}

/* Runs one attempt to its end. Returns the exit code of the attempt per launch.h and
 * sets *retry when the group should be restarted. With live recovery a worker that
 * exits retryable (75, or killed by a signal) while another still runs is started
 * again alone, same index and port, as long as the budget lasts; one that gave up
 * waiting for a replacement (timed_out) asks for the group restart instead. */
static int run_attempt(Worker *w, Launch *l, int *retry)
{
    const int n = l->n;
    int running = n, open_streams = 2 * n, first_fail = -1, stopping = 0, killed = 0;
    double stop_at = 0;
    *retry = 0;
    for (int i = 0; i < n; i++) l->member[i] = 1;
    l->members = n;
    l->joining = -1;
    if (l->min_workers) write_members(l);
    while (running > 0 || open_streams > 0) {
        struct pollfd pf[2 * LAUNCH_MAX_WORKERS];
        Stream *ps[2 * LAUNCH_MAX_WORKERS];
        int pidx[2 * LAUNCH_MAX_WORKERS], np = 0;
        for (int i = 0; i < n; i++) {
            Stream *ss[2] = {&w[i].out, &w[i].err};
            for (int k = 0; k < 2; k++) {
                if (ss[k]->fd < 0) continue;
                pf[np] = (struct pollfd){.fd = ss[k]->fd, .events = POLLIN};
                ps[np] = ss[k], pidx[np] = i, np++;
            }
        }
        int pr = poll(pf, (nfds_t)np, 100);
        for (int j = 0; pr > 0 && j < np; j++)
            if (pf[j].revents) stream_read(ps[j], pidx[j]);

        int sig = forwarded_signal;
        if (sig) {
            forwarded_signal = 0;
            util_log("forwarding signal %d to the workers; no restart will follow", sig);
            signal_running(w, n, sig);
            stopping = 2;
            stop_at = util_now();
        }
        const int j = l->joining;
        if (j >= 0 && (w[j].pid <= 0 || w[j].err.seen)) l->joining = -1;
        if (grow_requested && l->joining < 0) {
            grow_requested = 0;
            if (!stopping) add_back(w, l, &running);
        }
        for (int i = 0; i < n; i++) {
            int status;
            if (w[i].pid <= 0 || waitpid(w[i].pid, &status, WNOHANG) != w[i].pid) continue;
            w[i].pid = 0;
            w[i].code = util_exit_code(status);
            running--;
            if (w[i].code == 0) continue;
            const int gave_up = l->recovery && timed_out(l, i);
            util_log("worker %d exited with %d%s%s", i, w[i].code,
                     w[i].code >= 128 ? " (killed by a signal)" : "",
                     gave_up ? " (no replacement came in time)" : "");
            if (l->recovery && !stopping && retryable(w[i].code) && !gave_up && running > 0 &&
                l->restarts < l->max_restarts) {
                l->restarts++;
                util_log("live recovery: starting worker %d again alone, same index and port "
                         "(%d/%d of --max-restarts)",
                         i, l->restarts, l->max_restarts);
                drain(&w[i], i);
                spawn(&w[i], i, l);
                running++;
                continue;
            }
            if (l->min_workers && !stopping && retryable(w[i].code) && !gave_up && running > 0 &&
                l->members > l->min_workers) {
                l->member[i] = 0;
                l->members--;
                write_members(l);
                util_log("elastic: dropping worker %d (the --max-restarts budget is spent): the "
                         "%d others go on without it (--min-workers %d)",
                         i, l->members, l->min_workers);
                for (int k = 0; k < n; k++)
                    if (l->member[k] && w[k].pid > 0) kill(w[k].pid, SIGUSR1);
                continue;
            }
            if (first_fail < 0) first_fail = i;
            if (!stopping) {
                util_log("stopping the other workers");
                signal_running(w, n, SIGTERM);
                stopping = 1;
                stop_at = util_now();
            }
        }
        open_streams = 0;
        for (int i = 0; i < n; i++) open_streams += (w[i].out.fd >= 0) + (w[i].err.fd >= 0);
        if (stopping && !killed && running > 0 && util_now() - stop_at > STOP_GRACE_S) {
            util_log("workers still running %.0fs after SIGTERM: killing them", STOP_GRACE_S);
            signal_running(w, n, SIGKILL);
            killed = 1;
        }
    }
    const int chief = chief_of(l);
    if (chief != 0) adopt_termination(l, chief);
    if (w[chief].code == 0) return 0;
    if (stopping == 2) return w[chief].code;
    int first = w[first_fail].code;
    if (!retryable(w[chief].code)) return w[chief].code;
    if (!retryable(first)) return first;
    *retry = 1;
    return w[chief].code;
}

int launch_main(int argc, char **argv, const char *self)
{
    util_set_log_prefix("kubetrain-trainer launch");
    int workers = 0, max_restarts = 3, min_workers = 0;
    char **rest = xcalloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int *dst = !strcmp(a, "--workers")        ? &workers
                   : !strcmp(a, "--max-restarts") ? &max_restarts
                   : !strcmp(a, "--min-workers")  ? &min_workers
                                                  : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(rest);
            return KT_EXIT_OK;
        }
        if (!dst) {
            rest[nrest++] = argv[i];
            continue;
        }
        char *end;
        long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
        if (i + 1 >= argc || *end || end == argv[i + 1] || v < 0 ||
            (dst == &workers && (v < 1 || v > LAUNCH_MAX_WORKERS)) || v > 1000)
            util_fail(KT_EXIT_USAGE, "launch: %s expects %s, got '%s'", a,
                      dst == &workers       ? "a number of workers from 1 to 64"
                      : dst == &min_workers ? "a number of workers from 0 to --workers"
                                            : "a number of restarts from 0 to 1000",
                      i + 1 < argc ? argv[i + 1] : "");
        *dst = (int)v;
        i++;
    }
    if (!workers) util_fail(KT_EXIT_USAGE, "launch: --workers N is required");
    if (min_workers > workers)
        util_fail(KT_EXIT_USAGE, "launch: --min-workers %d: expected at most --workers (%d)",
                  min_workers, workers);

    /* Bad trainer options fail here once rather than in every worker. */
    Config cfg;
    char err[1024];
    int rc = config_parse(&cfg, nrest, rest, err, sizeof err);
    if (rc == 1) {
        usage(stdout);
        free(rest);
        return KT_EXIT_OK;
    }
    if (rc) util_fail(KT_EXIT_USAGE, "%s", err);
    if (cfg.index >= 0)
        util_fail(KT_EXIT_USAGE, "launch: --index (or KUBETRAIN_INDEX) cannot be given: launch "
                                 "assigns each worker its index");

    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el > 0) exe[el] = '\0', self = exe;

    unsigned char raw[32];
    char secret[65];
    if (RAND_bytes(raw, sizeof raw) != 1) util_fail(KT_EXIT_USAGE, "launch: RAND_bytes failed");
    for (size_t i = 0; i < sizeof raw; i++) snprintf(secret + 2 * i, 3, "%02x", raw[i]);

    char blas[24];
    const char *blas_threads = NULL;
    if (!getenv("OPENBLAS_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(blas, sizeof blas, "%ld", cores / workers > 1 ? cores / workers : 1);
        blas_threads = blas;
    }

    util_on_stop_signals(on_signal);
    if (min_workers) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_grow_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        sigaction(SIGUSR2, &sa, NULL);
    }

    util_log("%d worker(s) on 127.0.0.1, OPENBLAS_NUM_THREADS=%s, checkpoints %s%s", workers,
             blas_threads ? blas_threads : getenv("OPENBLAS_NUM_THREADS"),
             cfg.checkpoint_dir[0] ? "in " : "off", cfg.checkpoint_dir);
    if (min_workers && (cfg.recovery_timeout <= 0 || workers < 2))
        util_fail(KT_EXIT_USAGE,
                  "launch: --min-workers needs live recovery: more than one worker and "
                  "--recovery-timeout > 0 (the survivors of a lost worker form the smaller ring "
                  "in its rendezvous)");
    Launch l = {.n = workers,
                .self = self,
                .argc = nrest,
                .argv = rest,
                .secret = secret,
                .blas_threads = blas_threads,
                .recovery = cfg.recovery_timeout > 0 && workers > 1,
                .max_restarts = max_restarts,
                .min_workers = min_workers};
    snprintf(l.term_dir, sizeof l.term_dir, "/tmp/kubetrain-launch-XXXXXX");
    if (!mkdtemp(l.term_dir))
        util_fail(KT_EXIT_RETRY, "launch: cannot make a directory in /tmp: %s", strerror(errno));
    snprintf(l.members_path, sizeof l.members_path, "%s/members", l.term_dir);
    Worker w[LAUNCH_MAX_WORKERS];
    int code = 0;
    for (;;) {
        int retry;
        pick_ports(l.ports, workers);
        for (int i = 0; i < workers; i++) spawn(&w[i], i, &l);
        code = run_attempt(w, &l, &retry);
        if (!retry) break;
        if (l.restarts >= max_restarts) {
            util_log("giving up after %d restart(s) (--max-restarts %d)", l.restarts, max_restarts);
            break;
        }
        l.restarts++;
        if (cfg.checkpoint_dir[0])
            util_log("restart %d/%d: the group starts again from the newest checkpoint in %s",
                     l.restarts, max_restarts, cfg.checkpoint_dir);
        else
            util_log("restart %d/%d: no --checkpoint-dir, so the group starts again from scratch",
                     l.restarts, max_restarts);
    }
    for (int i = 1; i < workers; i++) {
        char path[4200];
        term_path(&l, i, path, sizeof path);
        unlink(path);
    }
    unlink(l.members_path);
    rmdir(l.term_dir);
    util_log("done: exit code %d", code);
    free(rest);
    return code;
}
