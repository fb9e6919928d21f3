/* util — the trainer's fail-fast helpers: exit codes of the contract, checked
 * allocation, the termination message, clocks, hashing and a seeded RNG. */
#ifndef KT_UTIL_H
#define KT_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Exit codes of the trainer contract (docs/design.md, "Exit codes"). */
#define KT_EXIT_OK 0
#define KT_EXIT_USAGE                                                                              \
    2 /* bad flag, env or configuration; a peer that proved the job
                         * secret but disagrees on world size, model, batch or dataset */
#define KT_EXIT_DATA 3  /* bad data, model or checkpoint that cannot be recovered */
#define KT_EXIT_RETRY                                                                              \
    75 /* a peer was lost, peers never came (or whatever answered at their
                          * address could not prove the secret or its rank), preempted
                          * after saving, the checkpoint volume full or failing */

/* The exit code of the contract for a child's waitpid status: its own exit code, or
 * 128+n when signal n killed it. Any other status (waitpid gives one only when asked
 * for stopped or continued children) is 128: the child did not say it failed for good
 * (2, 3), so a supervisor must report what it may retry, never a permanent code. */
int util_exit_code(int wait_status);

/* 1 when rc (a negative errno from writing a file) is trouble with the storage that a
 * later attempt may not meet: the volume full or over quota, an I/O error, a stale or
 * timed-out network file system. Writers of the checkpoint and metrics files exit
 * KT_EXIT_RETRY for these, else their permanent code (a permission denied, a read-only
 * volume or a path too long: a restart meets them again). */
int util_io_retryable(int rc);

/* Writes strerror(-rc) to out, with the two ways a volume runs out of room said plainly:
 * "disk full (No space left on device)". */
void util_io_strerror(int rc, char *out, size_t outlen);

/* Sets the prefix of log lines ("kubetrain-trainer[rank 1]"); the string is copied. */
void util_set_log_prefix(const char *prefix);

/* Prints "<prefix>: <message>" on stderr. */
void util_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints the message like util_log, writes {"error": message} to the termination
 * message file (see util_termination_write) and exits with `code`. Once training has
 * reported where it stands (util_termination_progress), the message also carries
 * "step" and "checkpoint_step", from which the operator counts the steps a restart
 * loses. */
_Noreturn void util_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the last global step trained and the step of the newest checkpoint this
 * process knows of (saved or resumed from; -1: none) for util_fail's message. Cheap
 * (two atomic stores) and callable from any thread. */
void util_termination_progress(long step, long checkpoint_step);

/* Makes util_fail's message also carry `"key": true` (key: a static string), e.g.
 * "recoveryTimedOut", which tells the operator to restart the whole group. */
void util_termination_mark(const char *key);

/* The bytes of a termination message Kubernetes keeps (its newline included); a
 * longer one is cut, no longer JSON. */
#define KT_TERMINATION_MAX 4096

/* Writes `json` (one object) to $KUBETRAIN_TERMINATION_FILE, or to
 * /dev/termination-log when that exists; does nothing otherwise. Errors are logged. */
void util_termination_write(const char *json);

/* Allocation that cannot return NULL: on failure it exits 3 naming file:line.
 * The caller frees the result with free(). */
void *util_malloc(size_t n, const char *file, int line);
void *util_calloc(size_t count, size_t size, const char *file, int line);
char *util_strdup(const char *s, const char *file, int line);
#define xmalloc(n) util_malloc((n), __FILE__, __LINE__)
#define xcalloc(count, size) util_calloc((count), (size), __FILE__, __LINE__)
#define xstrdup(s) util_strdup((s), __FILE__, __LINE__)

/* Runs fn on SIGTERM and SIGINT (interrupted system calls restart) and ignores
 * SIGPIPE, so a lost peer shows up as an I/O error rather than a kill. */
void util_on_stop_signals(void (*fn)(int));

/* Monotonic time in seconds. */
double util_now(void);
/* Wall-clock seconds since the Unix epoch (timestamps others read). */
double util_wall(void);

/* Writes all n bytes of buf to fd (a write interrupted by a signal is retried).
 * Returns 0 or a negative errno. */
int util_write_all(int fd, const void *buf, size_t n);

/* mkdir -p: creates dir and its missing parents (mode 0755). Returns 0, or a negative
 * errno (-ENAMETOOLONG for a path over PATH_MAX). */
int util_mkdir_p(const char *dir);

/* SHA-256 of buf as 64 lowercase hex digits plus NUL in out. */
void util_sha256_hex(const void *buf, size_t n, char out[65]);

/* splitmix64: advances *state and returns the next 64 random bits. Deterministic,
 * so that one seed gives one run. */
uint64_t util_rand_u64(uint64_t *state);
/* The state n draws after `state` (splitmix64's state only adds a constant per draw, so
 * draw j of a sequence can be made on its own: the GPU's dropout and the sharded CPU
 * step use it). */
uint64_t util_rand_skip(uint64_t state, uint64_t n);
/* Uniform float in [0, 1) from *state. */
float util_rand_float(uint64_t *state);
/* Uniform integer in [0, n) from *state, without modulo bias; n > 0. */
uint64_t util_rand_below(uint64_t *state, uint64_t n);

#endif
