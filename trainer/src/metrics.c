#include "metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

struct Metrics {
    FILE *f;
    char *path, *tmp;
    int epochs;
};

/* The sink still open, removed by the exit handler when the process dies early. */
static Metrics *open_sink;

static void remove_open_sink(void)
{
    if (open_sink && open_sink->tmp) unlink(open_sink->tmp);
}

int metrics_open(Metrics **out, const char *path, int epochs, char *err, size_t errlen)
{
    static int registered;
    Metrics *m = xcalloc(1, sizeof *m);
    m->epochs = epochs;
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
            free(m->path);
            free(m->tmp);
            free(m);
            return -e;
        }
        if (!registered) registered = atexit(remove_open_sink) == 0;
        open_sink = m;
    }
    *out = m;
    return 0;
}

void metrics_epoch_begin(Metrics *m, int epoch)
{
    printf("Epoch %d/%d\n", epoch, m->epochs);
    fflush(stdout);
}

void metrics_step(Metrics *m, int epoch, long step, double loss, double accuracy,
                  double samples_per_sec)
{
    if (!m->f) return;
    fprintf(m->f,
            "{\"event\":\"step\",\"epoch\":%d,\"step\":%ld,\"loss\":%.6g,\"accuracy\":%.6g,"
            "\"samples_per_sec\":%.1f}\n",
            epoch, step, loss, accuracy, samples_per_sec);
}

void metrics_epoch_end(Metrics *m, int epoch, long steps, double seconds, double loss,
                       double accuracy, double samples_per_sec)
{
    printf("%ld/%ld - %.1fs - loss: %.4f - accuracy: %.4f - %.0f samples/s\n", steps, steps,
           seconds, loss, accuracy, samples_per_sec);
    fflush(stdout);
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
    if (open_sink == m) open_sink = NULL;
    free(m->path);
    free(m->tmp);
    free(m);
}

int metrics_close(Metrics *m, char *err, size_t errlen)
{
    int rc = 0;
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
    if (m->f) {
        fclose(m->f);
        unlink(m->tmp);
    }
    release(m);
}
