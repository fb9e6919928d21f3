/* progress — the chiefs' /metrics into status.progress and status.checkpoint. */
#include "progress.h"

#include "clock.h"
#include "desired.h"
#include "jsonx.h"
#include "olog.h"
#include "ratelimit.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TICK_S 1.0            /* how often the thread looks for due jobs */
#define MAX_BODY (256 * 1024) /* a /metrics answer is ~2 KiB; more is not the trainer */
#define MAX_PARALLEL 64       /* scrapes (and their handles) in flight at once */
#define NBUCKETS 4096         /* of the per-job table; chains stay short at 10^4 jobs */
#define KEY_MAX 512
/* A job neither running nor with a chief seen exiting for this long is forgotten (its
 * exit step would only sharpen a lost-work count the status can still bound). */
#define FORGET_S 3600.0

const char *const progress_quiet_paths[] = {"status.progress", "status.checkpoint", NULL};

/* ------------------------------------------------------------------------------------
 * Parsing and the patch (pure) */

int progress_parse(const char *text, ProgressScrape *out)
{
    /* max: the largest integer kept (the CRD's int32 epoch; 10^15 steps, past any run);
     * a larger one, like a negative one, is absent. nonfinite: where a double's NaN or
     * infinity is recorded (a diverged loss), else it is absent. */
    static const struct {
        const char *name;
        int is_long;
        size_t off;
        double max;
        ptrdiff_t nonfinite;
    } fields[] = {
        {"kubetrain_steps_total", 1, offsetof(ProgressScrape, step), 1e15, -1},
        {"kubetrain_total_steps", 1, offsetof(ProgressScrape, total_steps), 1e15, -1},
        {"kubetrain_start_step", 1, offsetof(ProgressScrape, start_step), 1e15, -1},
        {"kubetrain_epoch", 1, offsetof(ProgressScrape, epoch), INT32_MAX, -1},
        {"kubetrain_checkpoint_step", 1, offsetof(ProgressScrape, checkpoint_step), 1e15, -1},
        {"kubetrain_loss", 0, offsetof(ProgressScrape, loss), 0,
         offsetof(ProgressScrape, loss_nonfinite)},
        {"kubetrain_accuracy", 0, offsetof(ProgressScrape, accuracy), 0,
         offsetof(ProgressScrape, accuracy_nonfinite)},
        {"kubetrain_samples_per_second", 0, offsetof(ProgressScrape, samples_per_second), 0, -1},
        {"kubetrain_checkpoint_timestamp_seconds", 0, offsetof(ProgressScrape, checkpoint_time), 0,
         -1},
    };
    const size_t nf = sizeof fields / sizeof fields[0];
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < nf; i++) {
        char *f = (char *)out + fields[i].off;
        if (fields[i].is_long)
            *(long *)(void *)f = -1;
        else
            *(double *)(void *)f = NAN;
    }
    for (const char *l = text; l && *l;) {
        const char *nl = strchr(l, '\n');
        if (*l != '#') {
            for (size_t i = 0; i < nf; i++) {
                size_t n = strlen(fields[i].name);
                if (strncmp(l, fields[i].name, n) != 0 || l[n] != ' ') continue;
                char *end;
                double v = strtod(l + n + 1, &end);
                if (end == l + n + 1) break;
                char *f = (char *)out + fields[i].off;
                if (fields[i].is_long)
                    *(long *)(void *)f = v >= 0 && v <= fields[i].max ? (long)v : -1;
                else if (isfinite(v))
                    *(double *)(void *)f = v;
                else if (fields[i].nonfinite >= 0)
                    *(int *)(void *)((char *)out + fields[i].nonfinite) = 1;
                break;
            }
        }
        l = nl ? nl + 1 : NULL;
    }
    return out->step >= 0 ? 0 : -ENODATA;
}

double progress_interval(const ProgressConfig *cfg, size_t running)
{
    double spread = cfg->write_qps > 0 ? (double)running / cfg->write_qps : 0;
    return spread > cfg->interval_s ? spread : cfg->interval_s;
}

/* Sets name to v when v is a number (not NaN), to null (a merge patch's removal) when
 * `nonfinite`; 0, or -1 out of memory. */
static int set_num_if(cJSON *o, const char *name, double v, int nonfinite)
{
    if (nonfinite) return jsonx_set(o, name, cJSON_CreateNull()) ? 0 : -1;
    if (isnan(v)) return 0;
    return jsonx_set_num(o, name, v) ? 0 : -1;
}

/* 1 when the patch would change the old object's number `name`: v (NaN: absent from the
 * scrape, nothing to write) differs from it, or `nonfinite` removes it. */
static int num_changed(const cJSON *old, const char *name, double v, int nonfinite)
{
    const cJSON *o = jsonx_at(old, name);
    if (nonfinite) return cJSON_IsNumber(o);
    if (isnan(v)) return 0;
    return !cJSON_IsNumber(o) || o->valuedouble != v;
}

int progress_patch(const cJSON *job, const ProgressScrape *s, long long attempt, long final_step,
                   double now, cJSON **patch)
{
    *patch = NULL;
    const cJSON *old = jsonx_obj(job, "status.progress");
    const cJSON *old_ckpt = jsonx_obj(job, "status.checkpoint");
    long long old_attempt = jsonx_int(old, "attempt", -1);
    long old_step = (long)jsonx_int(old, "step", -1);
    /* The chief and workers training now (status.currentWorkers), -1 unknown. */
    long long workers = jsonx_int(job, "status.currentWorkers", -1);
    int new_attempt = old_attempt != attempt;
    /* Within one attempt the checkpoint only moves forward: a survivor that became the
     * chief of an elastic job knows the checkpoint of its last state sync, perhaps older
     * than the one its predecessor wrote, until it saves its own. */
    long ckpt_step = s->checkpoint_step;
    if (!new_attempt && ckpt_step >= 0 && ckpt_step < jsonx_int(old_ckpt, "step", -1))
        ckpt_step = -1;
    int changed = new_attempt || num_changed(old, "step", (double)s->step, 0) ||
                  num_changed(old, "epoch", s->epoch >= 0 ? (double)s->epoch : NAN, 0) ||
                  num_changed(old, "loss", s->loss, s->loss_nonfinite) ||
                  num_changed(old, "accuracy", s->accuracy, s->accuracy_nonfinite) ||
                  (workers >= 0 && num_changed(old, "workers", (double)workers, 0)) ||
                  (ckpt_step >= 0 && num_changed(old_ckpt, "step", (double)ckpt_step, 0));
    if (!changed) return 0;

    char ts[40];
    cJSON *p = cJSON_CreateObject();
    cJSON *st = jsonx_ensure_obj(p, "status");
    cJSON *pr = st ? jsonx_ensure_obj(st, "progress") : NULL;
    cJSON *md = jsonx_ensure_obj(p, "metadata");
    const char *uid = jsonx_str(job, "metadata.uid");
    /* The uid makes the patch a precondition: never written into a new job of the name. */
    if (!pr || !md || (uid && !jsonx_set_str(md, "uid", uid))) goto nomem;
    /* Every time written is one the schema's date-time takes (years 1970 to 9999): one
     * refused value would have the whole patch refused. */
    if (!jsonx_set_num(pr, "attempt", (double)attempt) ||
        !jsonx_set_num(pr, "step", (double)s->step) ||
        (clock_format_rfc3339(now, ts, sizeof ts) == 0 && !jsonx_set_str(pr, "updateTime", ts)) ||
        (s->epoch >= 0 && !jsonx_set_num(pr, "epoch", (double)s->epoch)) ||
        set_num_if(pr, "loss", s->loss, s->loss_nonfinite) ||
        set_num_if(pr, "accuracy", s->accuracy, s->accuracy_nonfinite) ||
        set_num_if(pr, "samplesPerSecond", s->samples_per_second, 0) ||
        (workers >= 0 && !jsonx_set_num(pr, "workers", (double)workers)))
        goto nomem;
    if (s->total_steps > 0) {
        long pct = (long)(100.0 * (double)s->step / (double)s->total_steps);
        char buf[16];
        snprintf(buf, sizeof buf, "%ld%%", pct > 100 ? 100 : pct < 0 ? 0 : pct);
        if (!jsonx_set_num(pr, "totalSteps", (double)s->total_steps) ||
            !jsonx_set_str(pr, "percent", buf))
            goto nomem;
    }
    /* The rate over the two scrapes of one attempt (pauses for checkpoints included),
     * rather than the last step's samples/s, which says nothing of the time between; and
     * at one size: a resize between them (an elastic job's, or a worker lost and back)
     * changes the speed, so the estimate waits for two scrapes at the new size. */
    double then;
    int have_eta = 0;
    if (!new_attempt && old_step >= 0 && s->step > old_step && s->total_steps > s->step &&
        (workers < 0 || jsonx_int(old, "workers", workers) == workers) &&
        clock_parse_rfc3339(jsonx_str(old, "updateTime"), &then) == 0 && now - then >= 1) {
        double rate = (double)(s->step - old_step) / (now - then);
        if (clock_format_rfc3339(now + (double)(s->total_steps - s->step) / rate, ts, sizeof ts) ==
            0) {
            if (!jsonx_set_str(pr, "estimatedCompletionTime", ts)) goto nomem;
            have_eta = 1;
        }
    }
    /* Merge patch: null removes an estimate that no longer holds. */
    if (!have_eta && jsonx_str(old, "estimatedCompletionTime") &&
        !jsonx_set(pr, "estimatedCompletionTime", cJSON_CreateNull()))
        goto nomem;
    if (ckpt_step >= 0) {
        cJSON *ck = jsonx_ensure_obj(st, "checkpoint");
        if (!ck || !jsonx_set_num(ck, "step", (double)ckpt_step)) goto nomem;
        if (clock_format_rfc3339(s->checkpoint_time, ts, sizeof ts) == 0 &&
            !jsonx_set_str(ck, "time", ts))
            goto nomem;
    }
    /* A new attempt resumed at start_step: what the previous one had trained past it is
     * lost. Its furthest step is its chief's exit message, else the last scrape; an
     * attempt stopped before its first scrape is known by the message alone. */
    if (new_attempt && (old_attempt >= 0 || final_step >= 0) && s->start_step >= 0) {
        long reached = final_step > old_step ? final_step : old_step;
        long lost = reached > s->start_step ? reached - s->start_step : 0;
        cJSON *r = jsonx_ensure_obj(st, "restarts");
        long long total = jsonx_int(job, "status.restarts.stepsLost", 0);
        if (!r || !jsonx_set_num(r, "lastStepsLost", (double)lost) ||
            !jsonx_set_num(r, "stepsLost", (double)(total + lost)))
            goto nomem;
    }
    *patch = p;
    return 0;
nomem:
    cJSON_Delete(p);
    return -ENOMEM;
}

/* The chief: role chief, or worker 0 of a cluster without one (ANNOT_CLUSTER lists the
 * roles only when there is a chief or ps). */
static int is_chief(const cJSON *pod)
{
    const cJSON *labels = jsonx_obj(pod, "metadata.labels");
    const char *role = jsonx_key_str(labels, LABEL_ROLE);
    const char *index = jsonx_key_str(labels, LABEL_REPLICA_INDEX);
    const char *cluster = jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), ANNOT_CLUSTER);
    if (!role) return 0;
    if (strcmp(role, "chief") == 0) return 1;
    return strcmp(role, "worker") == 0 && index && strcmp(index, "0") == 0 &&
           !(cluster && strstr(cluster, "chief="));
}

/* The pod's attempt annotation, or -1. */
static long long pod_attempt(const cJSON *pod)
{
    const char *a = jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), ANNOT_ATTEMPT);
    char *end;
    long long v = a ? strtoll(a, &end, 10) : -1;
    return a && *a && !*end ? v : -1;
}

int progress_chief_final_step(const cJSON *pod, char *key, size_t keylen, long long *attempt,
                              long *step)
{
    if (!is_chief(pod)) return -ENOENT;
    const char *ns = jsonx_str(pod, "metadata.namespace");
    const char *job = jsonx_key_str(jsonx_obj(pod, "metadata.labels"), LABEL_JOB_NAME);
    const cJSON *cs;
    cJSON_ArrayForEach(cs, jsonx_arr(pod, "status.containerStatuses"))
    {
        const char *name = jsonx_str(cs, "name");
        const char *msg = jsonx_str(cs, "state.terminated.message");
        if (!name || strcmp(name, "trainer") != 0 || !msg || !ns || !job) continue;
        cJSON *m = cJSON_Parse(msg);
        long long v = jsonx_int(m, "step", -1);
        cJSON_Delete(m);
        if (v < 0) return -ENOENT;
        snprintf(key, keylen, "%s/%s", ns, job);
        *attempt = pod_attempt(pod);
        *step = (long)v;
        return 0;
    }
    return -ENOENT;
}

/* The port of ANNOT_METRICS_PORT when it is a decimal port, 1 to 65535, else 0. */
static int metrics_port(const cJSON *pod)
{
    const char *v = jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), ANNOT_METRICS_PORT);
    long port = 0;
    for (size_t i = 0; v && v[i]; i++) {
        if (v[i] < '0' || v[i] > '9' || i >= 5) return 0;
        port = port * 10 + (v[i] - '0');
    }
    return port >= 1 && port <= 65535 ? (int)port : 0;
}

/* Whether pod is worker `worker` (its role and replica index labels). */
static int is_worker(const cJSON *pod, int worker)
{
    const cJSON *labels = jsonx_obj(pod, "metadata.labels");
    const char *role = jsonx_key_str(labels, LABEL_ROLE);
    const char *index = jsonx_key_str(labels, LABEL_REPLICA_INDEX);
    char want[16];
    snprintf(want, sizeof want, "%d", worker);
    return role && index && strcmp(role, "worker") == 0 && strcmp(index, want) == 0;
}

int progress_scraped_worker(const cJSON *job)
{
    const char *members = jsonx_str(job, "status.members");
    const cJSON *chief = jsonx_obj(job, "spec.chief");
    const int chiefs = chief && jsonx_int(chief, "replicas", 1) > 0;
    char *end;
    long lowest = members ? strtol(members, &end, 10) : 0;
    /* the members list ascending: its first index is the lowest (the chief's slot 0) */
    if (!members || end == members || (*end && *end != ',' && *end != '=') || lowest <= 0 ||
        lowest > JOBSPEC_MAX_WORKERS)
        return -1;
    return (int)lowest - chiefs;
}

int progress_chief_url(const cJSON *pod, const char *job, int worker, long long attempt,
                       long long replacement, char *url, size_t n)
{
    const char *owner = jsonx_key_str(jsonx_obj(pod, "metadata.labels"), LABEL_JOB_NAME);
    const char *r = jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), ANNOT_REPLACEMENT);
    char *end;
    long long pod_repl = r ? strtoll(r, &end, 10) : 0;
    if (r && (!*r || *end)) pod_repl = -1;
    if (n) url[0] = '\0';
    if (!owner || strcmp(owner, job) != 0 ||
        !(worker < 0 ? is_chief(pod) : is_worker(pod, worker)) || pod_attempt(pod) != attempt ||
        pod_repl != replacement || jsonx_str(pod, "metadata.deletionTimestamp"))
        return -ENOENT;
    const char *phase = jsonx_str(pod, "status.phase");
    const char *ip = jsonx_str(pod, "status.podIP");
    int port = metrics_port(pod);
    unsigned char addr[sizeof(struct in6_addr)];
    if (!phase || strcmp(phase, "Running") != 0 || !ip || !port) return 0;
    /* Only an address, written back from its binary form, and the port as a number: no
     * user@, path or other host can ride in on either. */
    char host[INET6_ADDRSTRLEN];
    int v6 = inet_pton(AF_INET6, ip, addr) == 1;
    if ((!v6 && inet_pton(AF_INET, ip, addr) != 1) ||
        !inet_ntop(v6 ? AF_INET6 : AF_INET, addr, host, sizeof host))
        return 0;
    snprintf(url, n, v6 ? "http://[%s]:%d/metrics" : "http://%s:%d/metrics", host, port);
    return 0;
}

/* ------------------------------------------------------------------------------------
 * Per-job memory: when the job is next due, and the previous chief's last step */

typedef struct JobState {
    struct JobState *next;
    char key[KEY_MAX];
    double next_due;         /* monotonic */
    long long final_attempt; /* the attempt final_step belongs to */
    long final_step;         /* -1: none seen */
    double last_seen;        /* monotonic: running in a survey, or its chief seen exiting */
    int failing;             /* scrapes failing in a row: logged at the first only */
    /* What the survey read of the job's cached version surveyed_rv (-1: none), so that
     * an unchanged job is not parsed again every tick. */
    long long surveyed_rv;
    int scrapable;         /* progress_job_scrapable */
    long long job_attempt; /* status.attempt */
    /* The lowest member, a worker, while an elastic job leaves the chief's slot out of
     * its members (progress_scraped_worker); -1: the chief's slot. */
    int worker;
    long long repl[2]; /* how many times <job>-chief-0 and <job>-worker-<worker, or 0>
                          were replaced in it (status.replacedPods), 0: never */
    /* The rest of what progress_patch reads of that version, beside the quiet paths:
     * metadata.uid ("" when absent) and status.restarts.stepsLost. */
    char uid[64];
    long long steps_lost;
} JobState;

struct Progress {
    KubeClient *client;
    Informer *jobs, *pods;
    ProgressConfig cfg;
    RateLimit writes;
    pthread_t thread;
    int started;
    /* The thread waits between ticks on it, which progress_stop sets: clock_sleep's 20 ms
     * polls were 50 wake-ups a second, a sixth of the thread's CPU. */
    ClockStop stop;
    pthread_mutex_t mu; /* guards the table: progress_observe_pod runs on the informer */
    JobState *table[NBUCKETS];
};

/* Whether progress_stop was called; an atomic load, as the scrapes read it too. */
static int stopping(Progress *p)
{
    return clock_stop_is_set(&p->stop);
}

static uint32_t key_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h % NBUCKETS;
}

double progress_phase(const char *key, double interval_s)
{
    return interval_s * (double)key_hash(key) / NBUCKETS;
}

/* The state of key, created when absent (NULL out of memory). Call with mu held. */
static JobState *state_get(Progress *p, const char *key)
{
    uint32_t h = key_hash(key);
    for (JobState *s = p->table[h]; s; s = s->next)
        if (strcmp(s->key, key) == 0) return s;
    JobState *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    snprintf(s->key, sizeof s->key, "%s", key);
    s->final_step = -1;
    s->final_attempt = -1;
    s->surveyed_rv = -1;
    s->worker = -1;
    s->last_seen = clock_mono();
    s->next = p->table[h];
    p->table[h] = s;
    return s;
}

void progress_observe_pod(Progress *p, const cJSON *pod)
{
    char key[KEY_MAX];
    long long attempt;
    long step;
    if (!p || progress_chief_final_step(pod, key, sizeof key, &attempt, &step) != 0) return;
    pthread_mutex_lock(&p->mu);
    JobState *s = state_get(p, key);
    if (s &&
        (attempt > s->final_attempt || (attempt == s->final_attempt && step > s->final_step))) {
        s->final_attempt = attempt;
        s->final_step = step;
    }
    if (s) s->last_seen = clock_mono();
    pthread_mutex_unlock(&p->mu);
}

/* ------------------------------------------------------------------------------------
 * The thread */

/* One job due for a scrape. */
typedef struct Due {
    char key[KEY_MAX];
    char url[128];
    long long attempt;
    int worker;        /* JobState.worker */
    long long repl[2]; /* JobState.repl */
    CURL *easy;
    char *body;
    size_t len;
    int overflow;
} Due;

typedef struct Survey {
    Progress *p;
    double now;
    Due *due;
    size_t ndue, cap;
    size_t running;       /* jobs that would be scraped, due or not */
    long long offered_rv; /* what survey_want was offered for the job survey_job gets */
    int nomem;
} Survey;

/* The URL of job ns/job's Running chief of attempt `attempt`, or -ENOENT. The chief is
 * `<job>-chief-0` or, in a job without that role, `<job>-worker-0` (the pods' names are
 * fixed); while an elastic job leaves the chief's slot out of its members, `worker` (>= 0)
 * is the lowest member, `<job>-worker-<worker>`, which its trainer makes rank 0 and which
 * serves /metrics then (docs/design.md, "Elastic jobs"). Once replaced live in a Kueue
 * pod group the name has "-r<n>" (desired_pod_set_replacement), n from the job's
 * status.replacedPods (repl[0] for the chief, repl[1] for the worker): lookups by name,
 * where listing the job's pods by label walked every pod in the cache for each scrape (a
 * twentieth of the thread at 100 jobs, and growing with jobs times pods);
 * progress_chief_url checks the labels of what is found. */
static int chief_url(Progress *p, const char *ns, const char *job, long long attempt, int worker,
                     const long long repl[2], char *url, size_t n)
{
    static const char *const roles[] = {"chief", "worker"};
    for (size_t i = worker < 0 ? 0 : 1; i < sizeof roles / sizeof roles[0]; i++) {
        const int index = i == 1 && worker > 0 ? worker : 0;
        for (int renamed = repl[i] > 0; renamed >= 0; renamed--) {
            char name[512];
            int len = renamed ? snprintf(name, sizeof name, "%s-%s-%d-r%lld", job, roles[i], index,
                                         repl[i])
                              : snprintf(name, sizeof name, "%s-%s-%d", job, roles[i], index);
            if ((size_t)len >= sizeof name) return -ENOENT;
            cJSON *pod = informer_get(p->pods, ns, name);
            int rc = pod ? progress_chief_url(pod, job, worker, attempt, repl[i], url, n) : -ENOENT;
            cJSON_Delete(pod);
            if (rc != -ENOENT) return url[0] ? 0 : -ENOENT;
        }
    }
    return -ENOENT;
}

/* Counts a scrapable job and adds it to the due list when its time has come. Call with
 * mu held. */
static void survey_note(Survey *sv, JobState *s)
{
    if (!s->scrapable) return;
    sv->running++;
    s->last_seen = sv->now;
    /* A job never scheduled starts at its phase: jobs seen at once are then scraped a
     * few each tick rather than all in one tick every interval, which held 64 scrapes
     * and their handles at once (+1.7 MiB of peak memory at 100 jobs) and had libcurl
     * walk them all at every socket event. */
    if (s->next_due == 0) s->next_due = sv->now + progress_phase(s->key, sv->p->cfg.interval_s);
    if (s->next_due > sv->now) return;
    if (sv->ndue == sv->cap) {
        size_t cap = sv->cap ? 2 * sv->cap : 64;
        Due *d = realloc(sv->due, cap * sizeof *d);
        if (!d) {
            sv->nomem = 1;
            return;
        }
        sv->due = d, sv->cap = cap;
    }
    Due *d = &sv->due[sv->ndue++];
    memset(d, 0, sizeof *d);
    snprintf(d->key, sizeof d->key, "%s", s->key);
    d->attempt = s->job_attempt;
    d->worker = s->worker;
    memcpy(d->repl, s->repl, sizeof d->repl);
}

/* A job whose cached version the survey read before is taken from its JobState (1 Hz
 * parses of every job were most of the thread's time); any other is parsed. rv moves
 * only when more than status.progress/status.checkpoint changed (the quiet paths of the
 * jobs informer): the survey reads neither, and this thread's own writes would
 * otherwise have every job parsed again after each. */
static int survey_want(void *ctx, const char *key, long long rv)
{
    Survey *sv = ctx;
    int want = 1;
    sv->offered_rv = rv;
    pthread_mutex_lock(&sv->p->mu);
    JobState *s = state_get(sv->p, key);
    if (!s) {
        sv->nomem = 1;
        want = 0;
    } else if (rv >= 0 && s->surveyed_rv == rv) {
        survey_note(sv, s);
        want = 0;
    }
    pthread_mutex_unlock(&sv->p->mu);
    return want;
}

/* Into repl, the replacement numbers of the job's <job>-chief-0 and <job>-worker-<worker>
 * (worker 0 when `worker` < 0) in status.replacedPods, 0 for a pod not there. */
static void survey_replaced(const cJSON *job, int worker, long long repl[2])
{
    const char *name = jsonx_str(job, "metadata.name");
    char want[2][560];
    const cJSON *e;
    repl[0] = repl[1] = 0;
    if (!name) return;
    snprintf(want[0], sizeof want[0], "%s-chief-0", name);
    snprintf(want[1], sizeof want[1], "%s-worker-%d", name, worker < 0 ? 0 : worker);
    cJSON_ArrayForEach(e, jsonx_arr(job, "status.replacedPods"))
    {
        const char *n = jsonx_str(e, "name");
        for (int i = 0; n && i < 2; i++)
            if (strcmp(n, want[i]) == 0) repl[i] = jsonx_int(e, "replacement", 0);
    }
}

int progress_job_scrapable(const cJSON *job)
{
    const char *phase = jsonx_str(job, "status.phase");
    if (!phase || strcmp(phase, "Running") != 0) return 0;
    if (!jsonx_at(job, "spec.command")) return 1;
    /* The chief's pod: spec.chief's template laid over spec.template where the job has a
     * chief, else worker 0's, spec.template alone. */
    const cJSON *chief = jsonx_obj(job, "spec.chief");
    const cJSON *rt =
        chief && jsonx_int(chief, "replicas", 1) ? jsonx_obj(chief, "template") : NULL;
    return desired_template_metrics_port(jsonx_obj(job, "spec.template"), rt) != 0;
}

/* The jobs to scrape (progress_job_scrapable). Called under the jobs informer's read
 * lock: copies what it needs, never calls back into that informer. */
static void survey_job(void *ctx, const cJSON *job)
{
    Survey *sv = ctx;
    char key[KEY_MAX];
    if (informer_key(job, key, sizeof key) != 0) return;
    pthread_mutex_lock(&sv->p->mu);
    JobState *s = state_get(sv->p, key);
    if (s) {
        s->surveyed_rv = sv->offered_rv;
        s->scrapable = progress_job_scrapable(job);
        s->job_attempt = jsonx_int(job, "status.attempt", 0);
        s->worker = progress_scraped_worker(job);
        survey_replaced(job, s->worker, s->repl);
        const char *uid = jsonx_str(job, "metadata.uid");
        snprintf(s->uid, sizeof s->uid, "%s", uid && strlen(uid) < sizeof s->uid ? uid : "");
        s->steps_lost = jsonx_int(job, "status.restarts.stepsLost", 0);
        survey_note(sv, s);
    } else {
        sv->nomem = 1;
    }
    pthread_mutex_unlock(&sv->p->mu);
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx)
{
    Due *d = ctx;
    size_t n = size * nmemb;
    if (d->len + n > MAX_BODY) {
        d->overflow = 1;
        return 0; /* aborts the transfer */
    }
    char *b = realloc(d->body, d->len + n + 1);
    if (!b) return 0;
    memcpy(b + d->len, data, n);
    d->len += n;
    b[d->len] = '\0';
    d->body = b;
    return n;
}

/* A handle for d's scrape, or NULL when it cannot be had. */
static CURL *scrape_handle(Due *d, long timeout_ms)
{
    CURL *e = curl_easy_init();
    if (!e) return NULL;
    curl_easy_setopt(e, CURLOPT_URL, d->url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*"); /* pod IPs, never through a proxy */
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, d);
    curl_easy_setopt(e, CURLOPT_PRIVATE, d);
    return e;
}

/* Runs the scrapes of d[0..n), MAX_PARALLEL at a time; each ends with its body or
 * without. A handle exists only while its scrape is in flight: all of them at once took
 * about 12 KiB a job (12 MiB of a 1,000-job operator's peak, bench-operator-scale), and
 * the ones queued behind the connection limit timed out before they had dialled. */
static void scrape_all(Progress *p, Due *d, size_t n)
{
    CURLM *multi = curl_multi_init();
    if (!multi) return;
    long timeout_ms = (long)(p->cfg.timeout_s * 1000);
    size_t next = 0, inflight = 0;
    int running = 0;
    while (!stopping(p)) {
        while (inflight < MAX_PARALLEL && next < n) {
            Due *di = &d[next++];
            if (!di->url[0] || !(di->easy = scrape_handle(di, timeout_ms))) continue;
            if (curl_multi_add_handle(multi, di->easy) != CURLM_OK) {
                curl_easy_cleanup(di->easy);
                di->easy = NULL;
                continue;
            }
            inflight++;
        }
        if (!inflight) break;
        if (curl_multi_perform(multi, &running) != CURLM_OK) break;
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            char *priv = NULL;
            long code = 0;
            CURL *e = m->easy_handle;
            CURLcode result = m->data.result;
            curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv);
            Due *di = (Due *)(void *)priv;
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
            if (di && (result != CURLE_OK || code != 200)) {
                free(di->body);
                di->body = NULL;
            }
            curl_multi_remove_handle(multi, e);
            curl_easy_cleanup(e);
            if (di) di->easy = NULL;
            inflight--;
        }
        if (inflight) curl_multi_poll(multi, NULL, 0, 100, NULL);
    }
    /* Stopped (or the multi handle failed): abandon whatever is in flight. */
    for (size_t i = 0; i < n; i++) {
        if (!d[i].easy) continue;
        free(d[i].body);
        d[i].body = NULL;
        curl_multi_remove_handle(multi, d[i].easy);
        curl_easy_cleanup(d[i].easy);
        d[i].easy = NULL;
    }
    curl_multi_cleanup(multi);
}

/* What write_progress and progress_patch read of job ns/name: its quiet paths
 * (status.progress, status.checkpoint) from the cache and, when nothing else of the job
 * changed since the survey read it, the rest from its JobState; else the whole cached
 * job (parsing all of it for every write was a tenth of the thread). NULL when gone. */
static cJSON *job_view(Progress *p, const char *key, const char *ns, const char *name)
{
    cJSON *v = NULL;
    long long loud = -1;
    if (informer_get_quiet(p->jobs, ns, name, &v, &loud) == 0) {
        pthread_mutex_lock(&p->mu);
        JobState *s = state_get(p, key);
        int fresh = s && loud >= 0 && s->surveyed_rv == loud;
        cJSON *st = fresh ? jsonx_ensure_obj(v, "status") : NULL;
        int ok =
            st && jsonx_set_num(st, "attempt", (double)s->job_attempt) &&
            jsonx_set_num(jsonx_ensure_obj(st, "restarts"), "stepsLost", (double)s->steps_lost) &&
            (!s->uid[0] || jsonx_set_str(jsonx_ensure_obj(v, "metadata"), "uid", s->uid));
        pthread_mutex_unlock(&p->mu);
        if (ok) return v;
    }
    cJSON_Delete(v);
    return informer_get(p->jobs, ns, name);
}

/* Writes the patch for one scraped job. */
static void write_progress(Progress *p, Due *d, double now)
{
    char ns[256], name[256], path[1024], err[1024];
    const char *slash = strchr(d->key, '/');
    ProgressScrape s;
    if (!slash || (size_t)(slash - d->key) >= sizeof ns || progress_parse(d->body, &s) != 0) return;
    snprintf(ns, sizeof ns, "%.*s", (int)(slash - d->key), d->key);
    snprintf(name, sizeof name, "%s", slash + 1);
    cJSON *job = job_view(p, d->key, ns, name);
    if (!job || jsonx_int(job, "status.attempt", 0) != d->attempt) {
        cJSON_Delete(job); /* gone, or restarted since the survey */
        return;
    }
    long final_step = -1;
    pthread_mutex_lock(&p->mu);
    JobState *st = state_get(p, d->key);
    if (st && st->final_attempt >= 0 && st->final_attempt < d->attempt) final_step = st->final_step;
    pthread_mutex_unlock(&p->mu);
    cJSON *patch = NULL;
    if (progress_patch(job, &s, d->attempt, final_step, now, &patch) != 0 || !patch) {
        cJSON_Delete(job);
        return;
    }
    ratelimit_wait(&p->writes);
    kpath(path, sizeof path, KT_API_VERSION, ns, KT_PLURAL, name, "status");
    /* No response: the patched job would be thrown away unread (its metadata only). */
    int rc = kclient_write(p->client, "PATCH", path, patch, "application/merge-patch+json", err,
                           sizeof err);
    if (rc == 0) {
        const cJSON *lost = jsonx_at(patch, "status.restarts.lastStepsLost");
        if (lost)
            olog(OLOG_INFO, d->key, "attempt %lld resumed at step %ld: %lld steps lost", d->attempt,
                 s.start_step, (long long)lost->valuedouble);
    } else {
        olog(OLOG_WARN, d->key, "progress not recorded: %s", err);
    }
    cJSON_Delete(patch);
    cJSON_Delete(job);
}

/* Forgets the jobs not running and without a chief exit for FORGET_S (deleted, finished
 * or suspended): a restart's exit step is kept across the backoff until the job runs
 * again. Call with mu held. */
static void sweep(Progress *p, double now)
{
    for (size_t h = 0; h < NBUCKETS; h++) {
        JobState **link = &p->table[h];
        while (*link) {
            JobState *s = *link;
            if (now - s->last_seen > FORGET_S) {
                *link = s->next;
                free(s);
                continue;
            }
            link = &s->next;
        }
    }
}

static void tick(Progress *p)
{
    Survey sv = {.p = p, .now = clock_mono()};
    informer_foreach_wanted(p->jobs, survey_want, survey_job, &sv);
    double interval = progress_interval(&p->cfg, sv.running);
    for (size_t i = 0; i < sv.ndue; i++) {
        Due *d = &sv.due[i];
        const char *slash = strchr(d->key, '/');
        char ns[256];
        snprintf(ns, sizeof ns, "%.*s", (int)(slash - d->key), d->key);
        if (chief_url(p, ns, slash + 1, d->attempt, d->worker, d->repl, d->url, sizeof d->url) != 0)
            d->url[0] = '\0';
    }
    scrape_all(p, sv.due, sv.ndue);
    double wall = clock_wall();
    for (size_t i = 0; i < sv.ndue && !stopping(p); i++) {
        Due *d = &sv.due[i];
        pthread_mutex_lock(&p->mu);
        JobState *s = state_get(p, d->key);
        /* A scrape that failed waits its interval like one that worked; a job without a
         * chief to scrape (starting, or its program serves nothing) is looked at again
         * after the base interval. */
        if (s) s->next_due = sv.now + (d->url[0] ? interval : p->cfg.interval_s);
        int first_failure = s && d->url[0] && !d->body && s->failing++ == 0;
        if (s && d->body) s->failing = 0;
        pthread_mutex_unlock(&p->mu);
        if (first_failure)
            olog(OLOG_INFO, d->key, "no progress from %s%s", d->url,
                 d->overflow ? ": answer too long" : " (retrying quietly)");
        if (d->body) write_progress(p, d, wall);
        free(d->body);
    }
    free(sv.due);
    pthread_mutex_lock(&p->mu);
    sweep(p, sv.now);
    pthread_mutex_unlock(&p->mu);
}

static void *progress_main(void *arg)
{
    Progress *p = arg;
    pthread_setname_np(pthread_self(), "kt-progress"); /* as top -H, perf and gdb show it */
    while (!stopping(p)) {
        double t0 = clock_mono();
        tick(p);
        double left = TICK_S - (clock_mono() - t0);
        if (left > 0) clock_stop_wait(&p->stop, left);
    }
    return NULL;
}

Progress *progress_new(KubeClient *client, Informer *jobs, Informer *pods,
                       const ProgressConfig *cfg, char *err, size_t errlen)
{
    Progress *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory for the progress scraper");
        return NULL;
    }
    p->client = client, p->jobs = jobs, p->pods = pods;
    p->cfg = *cfg;
    if (p->cfg.timeout_s <= 0) p->cfg.timeout_s = 2;
    pthread_mutex_init(&p->mu, NULL);
    clock_stop_init(&p->stop);
    double qps = p->cfg.write_qps > 0 ? p->cfg.write_qps : 1;
    ratelimit_init(&p->writes, qps, qps, clock_mono());
    return p;
}

int progress_start(Progress *p)
{
    if (!p || p->cfg.interval_s <= 0 || p->started) return 0;
    clock_stop_set(&p->stop, 0);
    int rc = pthread_create(&p->thread, NULL, progress_main, p);
    if (rc) return -rc;
    p->started = 1;
    return 0;
}

void progress_stop(Progress *p)
{
    if (!p || !p->started) return;
    clock_stop_set(&p->stop, 1);
    pthread_join(p->thread, NULL);
    p->started = 0;
}

void progress_free(Progress *p)
{
    if (!p) return;
    for (size_t h = 0; h < NBUCKETS; h++) {
        JobState *s = p->table[h];
        while (s) {
            JobState *next = s->next;
            free(s);
            s = next;
        }
    }
    ratelimit_destroy(&p->writes);
    pthread_mutex_destroy(&p->mu);
    clock_stop_destroy(&p->stop);
    free(p);
}
