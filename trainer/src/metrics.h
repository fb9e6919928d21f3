/* metrics — what the trainer reports: a Keras-like line per epoch on stdout and, with
 * --metrics-file, one JSON object per line per step, epoch, evaluation and at the end
 * (docs/design.md, "Results and metrics"). The file is written under a temporary
 * name and renamed when the run succeeds. A failed run leaves what it wrote as
 * <path>.partial (or, killed outright, its temporary <path>.tmp.<pid>): the run that
 * resumes from a checkpoint at global step N starts its file with those records up to
 * step N, so that after any number of restarts the file holds the whole run; a run
 * from step 0 deletes them.
 *
 * With a TensorBoard directory (the chief's, see tbevents.h) the same values also go
 * to an event file there as scalars: "step/..." at each global step, "epoch/..." and
 * "eval/..." at each epoch (1-based, as in the metrics file). The event file is
 * flushed at every epoch end and kept when the run fails. With a Prometheus port, the
 * latest step's values are also served as text on GET /metrics (prom.h). */
#ifndef KT_METRICS_H
#define KT_METRICS_H

#include <stddef.h>

typedef struct Metrics Metrics;

/* One step as the chief saw it. */
typedef struct {
    double loss, accuracy;     /* over the global batch */
    double samples_per_sec;    /* global batch / step_seconds */
    double learning_rate;
    double allreduce_seconds;  /* the time the step waited for its gradient all-reduce after
                                  the backward pass (on the CPU the all-reduce overlaps it) */
    double step_seconds;       /* data, forward/backward, all-reduce and update */
} MetricsStep;

typedef struct {
    int epochs;
    const char *path;            /* --metrics-file; NULL or "": stdout lines only */
    const char *tensorboard_dir; /* NULL or "": no event file */
    int prometheus_port;         /* > 0: serve GET /metrics there (prom.h); 0: no */
    long resume_step;            /* > 0: resumed at this global step (see above) */
    long steps_per_epoch;        /* to tell which epochs resume_step completed */
    long checkpoint_step;        /* the checkpoint resumed from (0: none), for prom.h */
    double checkpoint_time;      /* its mtime, Unix seconds */
} MetricsOptions;

/* Opens the metrics sink. Returns 0 or a negative errno with one line in err naming
 * the file, directory or port. Free with metrics_close or metrics_abort. */
int metrics_open(Metrics **out, const MetricsOptions *o, char *err, size_t errlen);

/* Announces an epoch (1-based) on stdout, as Keras does ("Epoch 1/3"). */
void metrics_epoch_begin(Metrics *m, int epoch);
void metrics_step(Metrics *m, int epoch, long step, const MetricsStep *s);
/* The epoch's means on stdout and in the file; flushes the event file (a write error
 * there is logged once, and training goes on). */
void metrics_epoch_end(Metrics *m, int epoch, long steps, double seconds, double loss,
                       double accuracy, double samples_per_sec);
/* A checkpoint was saved at global step `step`, at Unix time `unix_time`. */
void metrics_checkpoint(Metrics *m, long step, double unix_time);
void metrics_eval(Metrics *m, int epoch, double test_loss, double test_accuracy);
/* Serves GET /metrics at `port` from now on (port > 0), or stops serving it (0): the
 * chief's /metrics follows rank 0 when an elastic ring forms again (docs/design.md,
 * "Elastic jobs"). A server started here answers at once with what this process
 * recorded: the run's total steps, the step it resumed at, its last step, evaluation
 * and checkpoint. A no-op when m serves already (port > 0) or does not (0). Returns 0,
 * or prom_start's negative errno with one line in err naming the port. */
int metrics_serve(Metrics *m, int port, char *err, size_t errlen);
void metrics_done(Metrics *m, long steps, double seconds, const char *weights_sha256);

/* Flushes, fsyncs and renames the file into place, closes the event file, then frees
 * m. Returns 0 or a negative errno with err naming the file (the temporary is removed
 * then). */
int metrics_close(Metrics *m, char *err, size_t errlen);

/* Keeps the records written so far as <path>.partial, closes the event file (kept, as
 * far as it got) and frees m; NULL is a no-op. Also runs at exit for a sink still open
 * (util_fail). */
void metrics_abort(Metrics *m);

#endif
