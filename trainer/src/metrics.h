/* metrics — what the trainer reports: a Keras-like line per epoch on stdout and, with
 * --metrics-file, one JSON object per line per step, epoch, evaluation and at the end
 * (shared/DESIGN.md). The file is written under a temporary name and renamed when the
 * run succeeds; a failed run removes it, so no partial file is left behind. */
#ifndef KT_METRICS_H
#define KT_METRICS_H

#include <stddef.h>

typedef struct Metrics Metrics;

/* Opens the metrics sink; path NULL or "" means stdout lines only. Returns 0 or a
 * negative errno with one line in err naming the file. Free with metrics_close or
 * metrics_abort. */
int metrics_open(Metrics **out, const char *path, int epochs, char *err, size_t errlen);

/* Announces an epoch (1-based) on stdout, as Keras does ("Epoch 1/3"). */
void metrics_epoch_begin(Metrics *m, int epoch);
void metrics_step(Metrics *m, int epoch, long step, double loss, double accuracy,
                  double samples_per_sec);
/* The epoch's means on stdout and in the file. */
void metrics_epoch_end(Metrics *m, int epoch, long steps, double seconds, double loss,
                       double accuracy, double samples_per_sec);
void metrics_eval(Metrics *m, int epoch, double test_loss, double test_accuracy);
void metrics_done(Metrics *m, long steps, double seconds, const char *weights_sha256);

/* Flushes, fsyncs and renames the file into place, then frees m. Returns 0 or a
 * negative errno with err naming the file (the temporary is removed then). */
int metrics_close(Metrics *m, char *err, size_t errlen);

/* Removes the temporary file and frees m; NULL is a no-op. Also runs at exit for a
 * sink still open, so util_fail leaves no partial file. */
void metrics_abort(Metrics *m);

#endif
