#include "metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prom.h"
#include "tbevents.h"
#include "util.h"

struct Metrics {
    FILE *f;
    char *path, *tmp;
    int epochs;
    TbWriter *tb;     /* NULL: no event file */
    Prom *prom;       /* NULL: no /metrics endpoint */
    int tb_warned;    /* a write error of the event file was logged */
};

/* The sink still open, removed by the exit handler when the process dies early. */
static Metrics *open_sink;

static void remove_open_sink(void)
{
    if (open_sink && open_sink->tmp) unlink(open_sink->tmp);
}

int metrics_open(Metrics **out, const MetricsOptions *o, char *err, size_t errlen)
{
    static int registered;
    const char *path = o->path;
    int rc, port;
    Metrics *m = xcalloc(1, sizeof *m);
    m->epochs = o->epochs;
    if (o->tensorboard_dir && *o->tensorboard_dir &&
        (rc = tbev_open(&m->tb, o->tensorboard_dir, err, errlen))) {
        free(m);
        return rc;
    }
    if (o->prometheus_port > 0) {
        if ((rc = prom_start(&m->prom, o->prometheus_port, &port, err, errlen))) {
            metrics_abort(m);
            return rc;
        }
        util_log("training metrics for Prometheus on port %d: GET /metrics", port);
    }
    if (path && *path) {
        size_t n = strlen(path) + 32;
        m->path = xstrdup(path);
        m->tmp = xmalloc(n);
        snprintf(m->tmp, n, "%s.tmp.%ld", path, (long)getpid());
        m->f = fopen(m->tmp, "w");
        if (!m->f) {
            int e = errno;
            snprintf(err, errlen, "--metrics-file %s: cannot create %s: %s", path, m->tmp,
                     strerror(e));
            metrics_abort(m);
            return -e;
        }
        if (!registered) registered = atexit(remove_open_sink) == 0;
        open_sink = m;
    }
    if (m->tb) util_log("TensorBoard events: %s", tbev_path(m->tb));
    *out = m;
    return 0;
}

void metrics_epoch_begin(Metrics *m, int epoch)
{
    printf("Epoch %d/%d\n", epoch, m->epochs);
    fflush(stdout);
}

void metrics_step(Metrics *m, int epoch, long step, const MetricsStep *s)
{
    if (m->tb) {
        const TbScalar v[] = {
            {"step/loss", s->loss},
            {"step/accuracy", s->accuracy},
            {"step/learning_rate", s->learning_rate},
            {"step/samples_per_sec", s->samples_per_sec},
            {"step/allreduce_seconds", s->allreduce_seconds},
            {"step/step_seconds", s->step_seconds},
        };
        tbev_scalars(m->tb, step, v, sizeof v / sizeof v[0]);
    }
    if (m->prom)
        prom_step(m->prom, epoch, step, s->loss, s->accuracy, s->samples_per_sec,
                  s->learning_rate, s->allreduce_seconds, s->step_seconds);
    if (!m->f) return;
    fprintf(m->f,
            "{\"event\":\"step\",\"epoch\":%d,\"step\":%ld,\"loss\":%.6g,\"accuracy\":%.6g,"
            "\"samples_per_sec\":%.1f,\"learning_rate\":%.6g,\"allreduce_seconds\":%.6g,"
            "\"step_seconds\":%.6g}\n",
            epoch, step, s->loss, s->accuracy, s->samples_per_sec, s->learning_rate,
            s->allreduce_seconds, s->step_seconds);
}

/* Writes the buffered events out; a failure is logged once (summaries are not worth
 * ending a training run for). */
static void flush_events(Metrics *m)
{
    char err[512];
    if (m->tb && tbev_flush(m->tb, err, sizeof err) && !m->tb_warned) {
        util_log("warning: %s", err);
        m->tb_warned = 1;
    }
}

void metrics_epoch_end(Metrics *m, int epoch, long steps, double seconds, double loss,
                       double accuracy, double samples_per_sec)
{
    printf("%ld/%ld - %.1fs - loss: %.4f - accuracy: %.4f - %.0f samples/s\n", steps, steps,
           seconds, loss, accuracy, samples_per_sec);
    fflush(stdout);
    if (m->tb) {
        const TbScalar v[] = {
            {"epoch/loss", loss},
            {"epoch/accuracy", accuracy},
            {"epoch/samples_per_sec", samples_per_sec},
            {"epoch/seconds", seconds},
        };
        tbev_scalars(m->tb, epoch, v, sizeof v / sizeof v[0]);
        flush_events(m);
    }
    if (!m->f) return;
    fprintf(m->f,
            "{\"event\":\"epoch\",\"epoch\":%d,\"steps\":%ld,\"seconds\":%.3f,\"loss\":%.6g,"
            "\"accuracy\":%.6g,\"samples_per_sec\":%.1f}\n",
            epoch, steps, seconds, loss, accuracy, samples_per_sec);
}

void metrics_eval(Metrics *m, int epoch, double test_loss, double test_accuracy)
{
    printf("eval - test_loss: %.4f - test_accuracy: %.4f\n", test_loss, test_accuracy);
    fflush(stdout);
    if (m->tb) {
        const TbScalar v[] = {{"eval/test_loss", test_loss}, {"eval/test_accuracy", test_accuracy}};
        tbev_scalars(m->tb, epoch, v, sizeof v / sizeof v[0]);
        flush_events(m);
    }
    if (m->prom) prom_eval(m->prom, test_loss, test_accuracy);
    if (!m->f) return;
    fprintf(m->f, "{\"event\":\"eval\",\"epoch\":%d,\"test_loss\":%.6g,\"test_accuracy\":%.6g}\n",
            epoch, test_loss, test_accuracy);
}

void metrics_done(Metrics *m, long steps, double seconds, const char *weights_sha256)
{
    if (!m->f) return;
    fprintf(m->f, "{\"event\":\"done\",\"steps\":%ld,\"seconds\":%.3f,\"weights_sha256\":\"%s\"}\n",
            steps, seconds, weights_sha256);
}

static void release(Metrics *m)
{
    prom_stop(m->prom);
    if (open_sink == m) open_sink = NULL;
    free(m->path);
    free(m->tmp);
    free(m);
}

/* Closes the event file, logging a write error (see flush_events). */
static void close_events(Metrics *m)
{
    char err[512];
    if (tbev_close(m->tb, err, sizeof err) && !m->tb_warned) util_log("warning: %s", err);
    m->tb = NULL;
}

int metrics_close(Metrics *m, char *err, size_t errlen)
{
    int rc = 0;
    close_events(m);
    if (m->f) {
        int bad = fflush(m->f) != 0 || fsync(fileno(m->f)) != 0;
        bad |= fclose(m->f) != 0;
        if (bad || rename(m->tmp, m->path) != 0) {
            rc = -(errno ? errno : EIO);
            snprintf(err, errlen, "--metrics-file %s: cannot write: %s", m->path, strerror(-rc));
            unlink(m->tmp);
        }
    }
    release(m);
    return rc;
}

void metrics_abort(Metrics *m)
{
    if (!m) return;
    close_events(m);
    if (m->f) {
        fclose(m->f);
        unlink(m->tmp);
    }
    release(m);
}
