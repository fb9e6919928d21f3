/* metrics — counters, gauges, histograms and their text exposition. */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Metrics g_metrics;

static const char *const phases[7] = {"Pending", "Running",   "Restarting", "Succeeded",
                                      "Failed",  "Suspended", "Unknown"};

void hist_init(Histogram *h, double start, double factor, int n)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    h->nb = n > HIST_MAX_BUCKETS ? HIST_MAX_BUCKETS : n;
    double b = start;
    for (int i = 0; i < h->nb; i++, b *= factor)
        h->bounds[i] = b;
}

void hist_observe(Histogram *h, double v)
{
    pthread_mutex_lock(&h->mu);
    int i = 0;
    while (i < h->nb && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
    pthread_mutex_unlock(&h->mu);
}

void hist_destroy(Histogram *h)
{
    pthread_mutex_destroy(&h->mu);
}

void metrics_init(void)
{
    memset(&g_metrics, 0, sizeof g_metrics);
    pthread_mutex_init(&g_metrics.mu, NULL);
    hist_init(&g_metrics.reconcile_seconds, 0.0005, 2, 16);
    hist_init(&g_metrics.wq_queue_seconds, 0.0005, 2, 16);
    hist_init(&g_metrics.api_seconds, 0.0005, 2, 16);
}

void metrics_count_reconcile(int ok, double seconds)
{
    pthread_mutex_lock(&g_metrics.mu);
    if (ok)
        g_metrics.reconcile_ok++;
    else
        g_metrics.reconcile_err++;
    pthread_mutex_unlock(&g_metrics.mu);
    hist_observe(&g_metrics.reconcile_seconds, seconds);
}

void metrics_count_api(const char *verb, long code, double seconds)
{
    pthread_mutex_lock(&g_metrics.mu);
    int i;
    for (i = 0; i < g_metrics.napi; i++)
        if (g_metrics.api[i].code == code && strcmp(g_metrics.api[i].verb, verb) == 0) break;
    if (i == g_metrics.napi && g_metrics.napi < 64) {
        snprintf(g_metrics.api[i].verb, sizeof g_metrics.api[i].verb, "%s", verb);
        g_metrics.api[i].code = (int)code;
        g_metrics.napi++;
    }
    if (i < 64) g_metrics.api[i].n++;
    pthread_mutex_unlock(&g_metrics.mu);
    if (strcmp(verb, "WATCH") != 0) hist_observe(&g_metrics.api_seconds, seconds);
}

void metrics_count_pods(int created, int deleted)
{
    pthread_mutex_lock(&g_metrics.mu);
    g_metrics.pods_created += (unsigned long long)created;
    g_metrics.pods_deleted += (unsigned long long)deleted;
    pthread_mutex_unlock(&g_metrics.mu);
}

void metrics_count_skipped(const char *resource)
{
    pthread_mutex_lock(&g_metrics.mu);
    int i;
    for (i = 0; i < g_metrics.nskipped; i++)
        if (strcmp(g_metrics.skipped[i].resource, resource) == 0) break;
    if (i == g_metrics.nskipped && g_metrics.nskipped < 8) {
        snprintf(g_metrics.skipped[i].resource, sizeof g_metrics.skipped[i].resource, "%s",
                 resource);
        g_metrics.nskipped++;
    }
    if (i < 8) g_metrics.skipped[i].n++;
    pthread_mutex_unlock(&g_metrics.mu);
}

void metrics_set_leader(int leader)
{
    pthread_mutex_lock(&g_metrics.mu);
    g_metrics.leader = leader;
    pthread_mutex_unlock(&g_metrics.mu);
}

int metrics_phase_index(const char *phase)
{
    for (int i = 0; i < 6; i++)
        if (phase && strcmp(phase, phases[i]) == 0) return i;
    return 6;
}

void metrics_set_job_phases(const long long counts[7])
{
    pthread_mutex_lock(&g_metrics.mu);
    memcpy(g_metrics.jobs_by_phase, counts, sizeof g_metrics.jobs_by_phase);
    pthread_mutex_unlock(&g_metrics.mu);
}

typedef struct Out {
    char *s;
    size_t len, cap;
    int bad;
} Out;

static void out(Out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(Out *o, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->s ? o->s + o->len : NULL, o->s ? o->cap - o->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->bad = 1;
            return;
        }
        if (o->s && o->len + (size_t)n < o->cap) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap ? o->cap * 2 : 8192;
        while (cap < o->len + (size_t)n + 1)
            cap *= 2;
        char *s = realloc(o->s, cap);
        if (!s) {
            o->bad = 1;
            return;
        }
        o->s = s;
        o->cap = cap;
    }
}

static void render_hist(Out *o, const char *name, const char *help, Histogram *h)
{
    pthread_mutex_lock(&h->mu);
    out(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    unsigned long long cum = 0;
    for (int i = 0; i < h->nb; i++) {
        cum += h->counts[i];
        out(o, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], cum);
    }
    cum += h->counts[h->nb];
    out(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, cum, name, h->sum,
        name, h->count);
    pthread_mutex_unlock(&h->mu);
}

char *metrics_render(void)
{
    Out o = {0};
    Metrics *m = &g_metrics;
    pthread_mutex_lock(&m->mu);
    out(&o,
        "# HELP kubetrain_reconcile_total Reconciles of TrainingJobs by result.\n"
        "# TYPE kubetrain_reconcile_total counter\n"
        "kubetrain_reconcile_total{result=\"success\"} %llu\n"
        "kubetrain_reconcile_total{result=\"error\"} %llu\n",
        m->reconcile_ok, m->reconcile_err);
    out(&o,
        "# HELP kubetrain_workqueue_depth Keys waiting in the work queue.\n"
        "# TYPE kubetrain_workqueue_depth gauge\nkubetrain_workqueue_depth %lld\n"
        "# HELP kubetrain_workqueue_adds_total Keys added to the work queue.\n"
        "# TYPE kubetrain_workqueue_adds_total counter\nkubetrain_workqueue_adds_total %llu\n"
        "# HELP kubetrain_workqueue_retries_total Keys requeued with backoff after an error.\n"
        "# TYPE kubetrain_workqueue_retries_total counter\n"
        "kubetrain_workqueue_retries_total %llu\n",
        __atomic_load_n(&m->wq_depth, __ATOMIC_RELAXED),
        __atomic_load_n(&m->wq_adds, __ATOMIC_RELAXED),
        __atomic_load_n(&m->wq_retries, __ATOMIC_RELAXED));
    out(&o, "# HELP kubetrain_api_requests_total Kubernetes API requests by verb and HTTP code "
            "(0: no response).\n# TYPE kubetrain_api_requests_total counter\n");
    for (int i = 0; i < m->napi; i++)
        out(&o, "kubetrain_api_requests_total{verb=\"%s\",code=\"%d\"} %llu\n", m->api[i].verb,
            m->api[i].code, m->api[i].n);
    out(&o, "# HELP kubetrain_informer_skipped_total Objects listed or watched that were skipped "
            "because they do not parse (nested too deep), by resource.\n"
            "# TYPE kubetrain_informer_skipped_total counter\n");
    for (int i = 0; i < m->nskipped; i++)
        out(&o, "kubetrain_informer_skipped_total{resource=\"%s\"} %llu\n", m->skipped[i].resource,
            m->skipped[i].n);
    out(&o, "# HELP kubetrain_jobs TrainingJobs by phase.\n# TYPE kubetrain_jobs gauge\n");
    for (int i = 0; i < 7; i++)
        out(&o, "kubetrain_jobs{phase=\"%s\"} %lld\n", phases[i], m->jobs_by_phase[i]);
    out(&o,
        "# HELP kubetrain_pods_created_total Worker pods created.\n"
        "# TYPE kubetrain_pods_created_total counter\nkubetrain_pods_created_total %llu\n"
        "# HELP kubetrain_pods_deleted_total Worker pods deleted.\n"
        "# TYPE kubetrain_pods_deleted_total counter\nkubetrain_pods_deleted_total %llu\n"
        "# HELP kubetrain_leader 1 when this replica holds the leader lease.\n"
        "# TYPE kubetrain_leader gauge\nkubetrain_leader %d\n",
        m->pods_created, m->pods_deleted, m->leader);
    pthread_mutex_unlock(&m->mu);
    render_hist(&o, "kubetrain_reconcile_duration_seconds", "Time spent in one reconcile.",
                &m->reconcile_seconds);
    render_hist(&o, "kubetrain_workqueue_queue_duration_seconds",
                "Time a key waited in the work queue before a worker took it.",
                &m->wq_queue_seconds);
    render_hist(&o, "kubetrain_api_request_duration_seconds",
                "Latency of Kubernetes API requests (watches excluded).", &m->api_seconds);
    if (o.bad) {
        free(o.s);
        return NULL;
    }
    return o.s;
}
