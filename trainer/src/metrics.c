#include "metrics.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    /* What a /metrics started later in the run needs (metrics_serve): the run's extent,
     * the step this process resumed at, and the last step, evaluation and checkpoint it
     * recorded (every rank records them, the step statistics being all-reduced). */
    long total_steps, resume_step;
    int have_step, last_epoch, evaluated;
    long last_step;
    MetricsStep last;
    double test_loss, test_accuracy;
    long ckpt_step; /* 0: none */
    double ckpt_time;
};

/* The sink still open, kept as <path>.partial by the exit handler when the process
 * dies early (util_fail). */
static Metrics *open_sink;

/* A failed run's records stay as <path>.partial for the run that resumes it. */
static void keep_partial(const Metrics *m)
{
    size_t n = strlen(m->path) + 16;
    char *partial = xmalloc(n);
    snprintf(partial, n, "%s.partial", m->path);
    if (rename(m->tmp, partial) != 0) unlink(m->tmp);
    free(partial);
}

static void keep_open_sink(void)
{
    if (open_sink && open_sink->tmp) keep_partial(open_sink);
}

/* The file an earlier run of this metrics file left: <path>.partial, or, when that run
 * was killed outright (SIGKILL) and left only its temporary <path>.tmp.<pid>, the newest
 * of those. Returns a malloc'd path or NULL. With remove set, deletes all of them
 * (other than this run's temporary) instead. */
static char *earlier_records(const Metrics *m, int remove)
{
    size_t n = strlen(m->path) + 16;
    char *partial = xmalloc(n), *best = NULL;
    snprintf(partial, n, "%s.partial", m->path);
    struct stat st;
    if (stat(partial, &st) == 0 && !remove) return partial;
    if (remove) unlink(partial);
    free(partial);
    char *d1 = xstrdup(m->path), *d2 = xstrdup(m->path), *d3 = xstrdup(m->tmp);
    const char *dir = dirname(d1), *base = basename(d2);
    /* this run's own temporary, by its name in dir: a bare "m.jsonl" has dir "." and the
     * joined "./m.jsonl.tmp.N" would not compare equal to m->tmp */
    const char *own = basename(d3);
    size_t blen = strlen(base);
    double best_mtime = -1;
    DIR *dp = opendir(dir);
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        if (strncmp(e->d_name, base, blen) != 0 || strncmp(e->d_name + blen, ".tmp.", 5) != 0)
            continue;
        size_t pn = strlen(dir) + strlen(e->d_name) + 2;
        char *p = xmalloc(pn);
        snprintf(p, pn, "%s/%s", dir, e->d_name);
        if (strcmp(e->d_name, own) == 0 || stat(p, &st) != 0) {
            free(p);
        } else if (remove) {
            unlink(p);
            free(p);
        } else if ((double)st.st_mtime > best_mtime) {
            best_mtime = (double)st.st_mtime;
            free(best);
            best = p;
        } else {
            free(p);
        }
    }
    if (dp) closedir(dp);
    free(d1), free(d2), free(d3);
    return best;
}

/* A resumed run (from global step `step`) starts its file with the earlier run's records
 * up to that step: step events up to it, epoch and eval events of the epochs it
 * completed; the steps after it are trained again, and "done" and torn lines are dropped.
 * Step numbers are global, so the file reads as one run. */
static void carry_over(Metrics *m, long step, long steps_per_epoch)
{
    char *src = earlier_records(m, 0);
    if (src) {
        FILE *in = fopen(src, "r");
        char *line = NULL;
        size_t cap = 0;
        long kept = 0;
        while (in && getline(&line, &cap, in) > 0) {
            cJSON *o = cJSON_Parse(line);
            const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
            const cJSON *ep = cJSON_GetObjectItemCaseSensitive(o, "epoch");
            int keep = 0;
            if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "step"))
                keep = cJSON_IsNumber(st) && st->valuedouble <= (double)step;
            else if (cJSON_IsString(ev) &&
                     (!strcmp(ev->valuestring, "epoch") || !strcmp(ev->valuestring, "eval")))
                keep =
                    cJSON_IsNumber(ep) && ep->valuedouble * (double)steps_per_epoch <= (double)step;
            cJSON_Delete(o);
            if (keep) {
                fputs(line, m->f);
                if (line[strlen(line) - 1] != '\n') fputc('\n', m->f);
                kept++;
            }
        }
        free(line);
        if (in) fclose(in);
        util_log("--metrics-file %s: %ld record(s) up to step %ld carried over from %s", m->path,
                 kept, step, src);
        free(src);
    }
    free(earlier_records(m, 1));
}

int metrics_open(Metrics **out, const MetricsOptions *o, char *err, size_t errlen)
{
    static int registered;
    const char *path = o->path;
    int rc, port;
    Metrics *m = xcalloc(1, sizeof *m);
    m->epochs = o->epochs;
    m->total_steps = (long)o->epochs * o->steps_per_epoch;
    m->resume_step = o->resume_step;
    m->ckpt_step = o->checkpoint_step, m->ckpt_time = o->checkpoint_time;
    if (o->tensorboard_dir && *o->tensorboard_dir &&
        (rc = tbev_open(&m->tb, o->tensorboard_dir, err, errlen))) {
        free(m);
        return rc;
    }
    if (o->prometheus_port > 0) {
        if ((rc = prom_start(&m->prom, o->prometheus_port, m->total_steps, o->resume_step, &port,
                             err, errlen))) {
            metrics_abort(m);
            return rc;
        }
        util_log("training metrics for Prometheus on port %d: GET /metrics", port);
        if (o->checkpoint_step > 0)
            prom_checkpoint(m->prom, o->checkpoint_step, o->checkpoint_time);
    }
    if (path && *path) {
        size_t n = strlen(path) + 32;
        m->path = xstrdup(path);
        m->tmp = xmalloc(n);
        snprintf(m->tmp, n, "%s.tmp.%ld", path, (long)getpid());
        m->f = fopen(m->tmp, "w");
        if (!m->f) {
            int e = errno;
            char why[128];
            util_io_strerror(-e, why, sizeof why);
            snprintf(err, errlen, "--metrics-file %s: cannot create %s: %s", path, m->tmp, why);
            metrics_abort(m);
            return -e;
        }
        if (!registered) registered = atexit(keep_open_sink) == 0;
        open_sink = m;
        if (o->resume_step > 0) carry_over(m, o->resume_step, o->steps_per_epoch);
        else free(earlier_records(m, 1)); /* a run from scratch: nothing of earlier runs */
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
    m->have_step = 1, m->last_epoch = epoch, m->last_step = step, m->last = *s;
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
        prom_step(m->prom, epoch, step, s->loss, s->accuracy, s->samples_per_sec, s->learning_rate,
                  s->allreduce_seconds, s->step_seconds);
    if (!m->f) return;
    fprintf(m->f,
            "{\"event\":\"step\",\"epoch\":%d,\"step\":%ld,\"loss\":%.6g,\"accuracy\":%.6g,"
            "\"samples_per_sec\":%.1f,\"learning_rate\":%.6g,\"allreduce_seconds\":%.6g,"
            "\"step_seconds\":%.6g}\n",
            epoch, step, s->loss, s->accuracy, s->samples_per_sec, s->learning_rate,
            s->allreduce_seconds, s->step_seconds);
    /* Out of the process at once (one write per step, no fsync): a chief killed outright
     * leaves its records in <path>.tmp.<pid> for the run that resumes it. */
    fflush(m->f);
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
    fflush(m->f);
}

void metrics_checkpoint(Metrics *m, long step, double unix_time)
{
    m->ckpt_step = step, m->ckpt_time = unix_time;
    if (m->prom) prom_checkpoint(m->prom, step, unix_time);
}

void metrics_eval(Metrics *m, int epoch, double test_loss, double test_accuracy)
{
    m->evaluated = 1, m->test_loss = test_loss, m->test_accuracy = test_accuracy;
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
    fflush(m->f);
}

int metrics_serve(Metrics *m, int port, char *err, size_t errlen)
{
    int rc;
    if (!port) {
        prom_stop(m->prom);
        m->prom = NULL;
        return 0;
    }
    if (m->prom) return 0;
    if ((rc = prom_start(&m->prom, port, m->total_steps, m->resume_step, NULL, err, errlen)))
        return rc;
    if (m->have_step)
        prom_step(m->prom, m->last_epoch, m->last_step, m->last.loss, m->last.accuracy,
                  m->last.samples_per_sec, m->last.learning_rate, m->last.allreduce_seconds,
                  m->last.step_seconds);
    if (m->evaluated) prom_eval(m->prom, m->test_loss, m->test_accuracy);
    if (m->ckpt_step > 0) prom_checkpoint(m->prom, m->ckpt_step, m->ckpt_time);
    return 0;
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
            char why[128];
            rc = -(errno ? errno : EIO);
            util_io_strerror(rc, why, sizeof why);
            snprintf(err, errlen, "--metrics-file %s: cannot write: %s", m->path, why);
            unlink(m->tmp);
        }
        free(earlier_records(m, 1));
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
        keep_partial(m);
    }
    release(m);
}
