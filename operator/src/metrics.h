/* metrics — the operator's Prometheus metrics: counters, gauges and histograms with
 * fixed label sets, rendered in the text exposition format for /metrics. All updates
 * are thread-safe. */
#ifndef KT_METRICS_H
#define KT_METRICS_H

#include <pthread.h>
#include <stddef.h>

#define HIST_MAX_BUCKETS 16

typedef struct Histogram {
    pthread_mutex_t mu;
    int nb;
    double bounds[HIST_MAX_BUCKETS]; /* upper bounds, ascending; +Inf implied */
    unsigned long long counts[HIST_MAX_BUCKETS + 1];
    double sum;
    unsigned long long count;
} Histogram;

/* Exponential buckets: start, start*factor, ... (n <= HIST_MAX_BUCKETS). */
void hist_init(Histogram *h, double start, double factor, int n);
void hist_observe(Histogram *h, double v);
void hist_destroy(Histogram *h);

/* The operator's metrics (one global instance, g_metrics). */
typedef struct Metrics {
    pthread_mutex_t mu; /* guards the labelled counters and gauges below */
    unsigned long long reconcile_ok, reconcile_err;
    Histogram reconcile_seconds;
    unsigned long long wq_adds, wq_retries;
    long long wq_depth;
    Histogram wq_queue_seconds;
    struct {
        char verb[8];
        int code;
        unsigned long long n;
    } api[64];
    int napi;
    Histogram api_seconds;
    unsigned long long pods_created, pods_deleted;
    long long jobs_by_phase[7]; /* Pending Running Restarting Succeeded Failed Suspended Unknown */
    struct {
        char resource[32];
        unsigned long long n;
    } skipped[8]; /* objects an informer could not parse, by resource (plural) */
    int nskipped;
    int leader;
} Metrics;

extern Metrics g_metrics;

/* Initialises g_metrics; call once before use. */
void metrics_init(void);

void metrics_count_reconcile(int ok, double seconds);
void metrics_count_api(const char *verb, long code, double seconds);
void metrics_count_pods(int created, int deleted);
void metrics_set_leader(int leader);
/* An object of `resource` (the plural) an informer skipped because it does not parse. */
void metrics_count_skipped(const char *resource);

/* Replaces the per-phase job gauge (phases as in the status; others count Unknown). */
void metrics_set_job_phases(const long long counts[7]);
/* Index of a phase in jobs_by_phase. */
int metrics_phase_index(const char *phase);

/* Renders all metrics in the Prometheus text format. Returns a malloc'd string the
 * caller frees, or NULL on allocation failure. */
char *metrics_render(void);

#endif
