/* prom — the chief's training progress as a Prometheus text endpoint (--metrics-port):
 * GET /metrics on a small HTTP server thread answers with the latest step's values,
 *
 *   kubetrain_steps_total               global steps done (continues across restarts)
 *   kubetrain_epoch                     the epoch in progress (1-based)
 *   kubetrain_loss, kubetrain_accuracy  of the last step, over the global batch
 *   kubetrain_samples_per_second        of the last step
 *   kubetrain_learning_rate
 *   kubetrain_allreduce_seconds         the last step's wait for its gradient all-reduce
 *   kubetrain_allreduce_seconds_total   summed over the steps of this process, and
 *   kubetrain_step_seconds_total        likewise the steps, for rate() in PromQL
 *   kubetrain_test_loss, kubetrain_test_accuracy   the last evaluation (after one ran)
 *   kubetrain_total_steps               global steps of the whole run (epochs x steps/epoch)
 *   kubetrain_start_step                the global step this process resumed at (0: scratch)
 *   kubetrain_checkpoint_step           the newest checkpoint saved or resumed from, and
 *   kubetrain_checkpoint_timestamp_seconds   when it was written (Unix seconds); both
 *                                       absent until there is one
 *
 * The operator reads these to fill status.progress and status.checkpoint (docs/design.md,
 * "Progress and checkpoints").
 *
 * in the text exposition format 0.0.4, each request answered and its connection closed.
 * Connections are served concurrently (one poll loop), at most PROM_MAX_CONNS at once (a
 * new one then replaces the oldest), and each must have sent its request and taken the
 * answer within PROM_DEADLINE_MS of its accept, however it paces its bytes, else it is
 * closed; so no client delays a scrape or the trainer's exit. Nothing else is served
 * (404). */
#ifndef KT_PROM_H
#define KT_PROM_H

#include <stddef.h>

/* The whole exchange of one connection, from accept to the last byte of the answer. */
#define PROM_DEADLINE_MS 2000
/* Connections held open at once. */
#define PROM_MAX_CONNS 16

typedef struct Prom Prom;

/* Listens on every address at `port` (0: a free one; *bound_port, when not NULL,
 * receives it) and starts the server thread, the run's extent already in place: its
 * total global steps, and the step this process started at, which is also the steps
 * done until the first prom_step (so that no answer ever says the run starts at 0 when
 * it resumed). Returns 0 or a negative errno with one line in err naming the port. Stop
 * with prom_stop. */
int prom_start(Prom **out, int port, long total_steps, long start_step, int *bound_port, char *err,
               size_t errlen);

/* Records one step (thread-safe with the server). */
void prom_step(Prom *p, int epoch, long global_step, double loss, double accuracy,
               double samples_per_sec, double learning_rate, double allreduce_seconds,
               double step_seconds);

/* Records a checkpoint at global step `step`, written at Unix time `unix_time`. */
void prom_checkpoint(Prom *p, long step, double unix_time);

/* Records an evaluation. */
void prom_eval(Prom *p, double test_loss, double test_accuracy);

/* The exposition text, what GET /metrics answers, NUL-terminated, its length in
 * *len. The caller frees it with free(). */
char *prom_format(Prom *p, size_t *len);

/* Stops the thread, closes the listener and every connection and frees p; returns at
 * once whatever the clients do. NULL is a no-op. */
void prom_stop(Prom *p);

#endif
