/* controller — the thin I/O around reconcile: informers for TrainingJobs and the pods,
 * services and network policies the operator owns (never Secrets, which it may not
 * read); a work queue of job keys fed by their
 * events (owned objects map to their job through the controller owner reference, or
 * the kubetrain.dev/job-name label); worker threads that read the caches, call
 * reconcile and carry out its plan in order, stopping at the first failed action
 * so that the key is retried with backoff; a run of consecutive pod creations, or pod
 * deletions, goes out at once (pod_parallelism), every one attempted, and the plan
 * stops after the run at its first failure in the plan's order. Timers from the plan
 * become delayed adds.
 * Whether and in which version the cluster serves PodGroups (scheduling.k8s.io/v1beta1,
 * else v1alpha2) comes from discovery, asked on the first sync and every 5 minutes
 * after, shared by the workers. */
#ifndef KT_CONTROLLER_H
#define KT_CONTROLLER_H

#include "kclient.h"
#include "progress.h"
#include "reconcile.h"

typedef struct ControllerConfig {
    const char *namespace; /* "" or NULL: all namespaces */
    ReconcileConfig reconcile;
    int workers;             /* worker threads */
    int pod_parallelism;     /* a plan's pod creations, or deletions, at once (1..64) */
    const char *identity;    /* reportingInstance of events */
    ProgressConfig progress; /* status.progress from the chiefs' /metrics (progress.h) */
} ControllerConfig;

typedef struct Controller Controller;

/* Strings in cfg are copied. NULL with err on failure. */
Controller *controller_new(KubeClient *client, const ControllerConfig *cfg, char *err,
                           size_t errlen);

/* Starts the informers (list + watch). Returns 0 or -errno. */
int controller_start_informers(Controller *c);

/* 1 when every informer has listed once. */
int controller_synced(Controller *c);

/* Starts the worker threads and the progress scraper; call once the caches are synced.
 * Returns 0 or -errno. */
int controller_start_workers(Controller *c);

/* Stops the workers (each finishes its current key) and the progress scraper, and joins
 * them. */
void controller_stop_workers(Controller *c);

/* Stops the workers, then the informers, and joins them all. */
void controller_stop(Controller *c);

/* Frees c (stop it first); NULL is a no-op. */
void controller_free(Controller *c);

/* Reconciles one key now in the calling thread (what a worker does). Returns 0 or a
 * negative errno with err set; *requeue_after receives the plan's timer (< 0: none). */
int controller_sync(Controller *c, const char *key, double *requeue_after, char *err,
                    size_t errlen);

/* Refreshes the jobs-by-phase gauge from the cache. */
void controller_update_phase_metrics(Controller *c);

#endif
