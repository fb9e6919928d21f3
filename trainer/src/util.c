#include "util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <openssl/sha.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char log_prefix[64] = "kubetrain-trainer";

int util_exit_code(int wait_status)
{
    if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
    if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
    return 128;
}

int util_io_retryable(int rc)
{
    return rc == -ENOSPC || rc == -EDQUOT || rc == -EIO || rc == -ESTALE || rc == -ETIMEDOUT;
}

void util_io_strerror(int rc, char *out, size_t outlen)
{
    if (rc == -ENOSPC || rc == -EDQUOT) snprintf(out, outlen, "disk full (%s)", strerror(-rc));
    else snprintf(out, outlen, "%s", strerror(-rc));
}

void util_set_log_prefix(const char *prefix)
{
    snprintf(log_prefix, sizeof log_prefix, "%s", prefix);
}

static void log_v(const char *fmt, va_list ap, char *msg, size_t msglen)
{
    vsnprintf(msg, msglen, fmt, ap);
    fprintf(stderr, "%s: %s\n", log_prefix, msg);
    fflush(stderr);
}

void util_log(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    log_v(fmt, ap, msg, sizeof msg);
    va_end(ap);
}

/* -1 until training reports (util_termination_progress). */
static _Atomic long term_step = -1, term_ckpt_step = -1;
/* a key util_fail adds as true (util_termination_mark); NULL: none */
static const char *_Atomic term_mark;

void util_termination_mark(const char *key)
{
    term_mark = key;
}

void util_termination_progress(long step, long checkpoint_step)
{
    term_step = step;
    term_ckpt_step = checkpoint_step;
}

void util_fail(int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    log_v(fmt, ap, msg, sizeof msg);
    va_end(ap);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", msg);
    long step = term_step, ckpt = term_ckpt_step;
    if (step >= 0) {
        cJSON_AddNumberToObject(o, "step", (double)step);
        cJSON_AddNumberToObject(o, "checkpoint_step", (double)ckpt);
    }
    const char *mark = term_mark;
    if (mark) cJSON_AddTrueToObject(o, mark);
    char *json = o ? cJSON_PrintUnformatted(o) : NULL;
    if (json) util_termination_write(json);
    free(json);
    cJSON_Delete(o);
    exit(code);
}

void util_termination_write(const char *json)
{
    const char *path = getenv("KUBETRAIN_TERMINATION_FILE");
    if (!path || !*path) {
        if (access("/dev/termination-log", W_OK) != 0) return;
        path = "/dev/termination-log";
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "%s: cannot write termination message to %s\n", log_prefix, path);
        return;
    }
    fprintf(f, "%s\n", json);
    if (fclose(f) != 0)
        fprintf(stderr, "%s: cannot write termination message to %s\n", log_prefix, path);
}

void *util_malloc(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p) util_fail(KT_EXIT_DATA, "out of memory allocating %zu bytes at %s:%d", n, file, line);
    return p;
}

void *util_calloc(size_t count, size_t size, const char *file, int line)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        util_fail(KT_EXIT_DATA, "out of memory allocating %zu x %zu bytes at %s:%d", count, size,
                  file, line);
    return p;
}

char *util_strdup(const char *s, const char *file, int line)
{
    size_t n = strlen(s) + 1;
    char *p = util_malloc(n, file, line);
    memcpy(p, s, n);
    return p;
}

void util_on_stop_signals(void (*fn)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

double util_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double util_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void util_sha256_hex(const void *buf, size_t n, char out[65])
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(buf, n, md);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) sprintf(out + 2 * i, "%02x", md[i]);
    out[64] = '\0';
}

#define SPLITMIX_GAMMA 0x9E3779B97F4A7C15ull

uint64_t util_rand_skip(uint64_t state, uint64_t n)
{
    return state + n * SPLITMIX_GAMMA;
}

uint64_t util_rand_u64(uint64_t *state)
{
    uint64_t z = (*state += SPLITMIX_GAMMA);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float util_rand_float(uint64_t *state)
{
    return (float)(util_rand_u64(state) >> 40) * (1.0f / 16777216.0f);
}

uint64_t util_rand_below(uint64_t *state, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do r = util_rand_u64(state);
    while (r >= limit);
    return r % n;
}

int util_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (64u << 20) ? (64u << 20) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int util_mkdir_p(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return -ENAMETOOLONG;
    for (char *s = path + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(path, 0755) < 0 && errno != EEXIST) return -errno;
        *s = '/';
    }
    if (mkdir(path, 0755) < 0 && errno != EEXIST) return -errno;
    return 0;
}
