/* launch — `kubetrain-trainer launch --workers N [--max-restarts K] [trainer options]`:
 * the job of N workers as local processes, what the operator does on Kubernetes.
 *
 * Each attempt picks N free ports on 127.0.0.1, gives child i TF_CONFIG with index i,
 * the job secret (32 random bytes from libcrypto, hex) in KUBETRAIN_SECRET, and
 * OPENBLAS_NUM_THREADS = max(1, cores / N) unless the user set it, and prefixes every
 * line the child prints with "[worker i] ". When a child exits with 75 or dies by a
 * signal, the others are stopped and the group restarts (from the newest checkpoint
 * when the options name --checkpoint-dir, otherwise from scratch), up to
 * --max-restarts times (3); any other failure stops everything. SIGTERM and SIGINT are
 * forwarded to the children, and no restart follows. */
#ifndef KT_LAUNCH_H
#define KT_LAUNCH_H

/* Runs the job; argv[0..argc) are the options after "launch", self the path of this
 * program (execed for the children). Returns the exit code: 0 when every worker
 * finished, else the chief's code (or, when another worker failed first with a
 * non-retryable code, that code; 128+n for a signal). Usage errors exit 2. */
int launch_main(int argc, char **argv, const char *self);

#endif
