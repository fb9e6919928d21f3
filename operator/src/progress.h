/* progress — live progress of running jobs, and the work each restart lost.
 *
 * One thread scrapes the chief's /metrics (trainer/src/prom.h, or the kubetrain Python
 * package's; the lowest member's while an elastic job leaves the chief's slot out) of
 * every Running job (progress_job_scrapable) whose chief pod names its
 * port (ANNOT_METRICS_PORT) and has an IP, at most once per interval, all due scrapes at
 * once over one libcurl multi handle with short timeouts; and writes what changed as a
 * JSON merge patch of the status
 * subresource: status.progress (step, totalSteps, percent, epoch, loss, accuracy,
 * samplesPerSecond, estimatedCompletionTime, attempt, updateTime) and status.checkpoint
 * (step, time). Writes draw on their own token bucket (ProgressConfig.write_qps) beside
 * the client's, and the interval stretches so that every running job gets its turn
 * within that budget: max(interval_s, running / write_qps) seconds.
 *
 * Lost work: the first scrape of a new attempt compares the step the previous attempt
 * reached (status.progress.step, or the old chief's termination message when the
 * operator saw it: progress_observe_pod) with the step the new chief resumed at
 * (kubetrain_start_step) and records the difference in status.restarts.lastStepsLost
 * and adds it to status.restarts.stepsLost, in the same patch that moves
 * status.progress.attempt, so it is counted once.
 *
 * Reconcile never writes these fields; it carries them in its whole-status updates,
 * which a patch in between turns into a conflict and a retry (resourceVersion): the
 * retry reads the cache, which the patch's watch event brings up to date (the thread
 * does not store its own answer: an event equal to the cached object would reach the
 * handler and cost the reconcile that progress_quiet_paths spares). A job
 * whose program exposes nothing (spec.command without a declared metrics port, or
 * KUBETRAIN_METRICS_PORT=0) gets no status.progress. */
#ifndef KT_PROGRESS_H
#define KT_PROGRESS_H

#include "informer.h"
#include "kclient.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* What only this thread writes and reconcile never reads: the jobs informer passes no
 * watch event that changes only these to the handler (InformerOptions.quiet_paths;
 * NULL-terminated), so a progress write costs no reconcile. */
extern const char *const progress_quiet_paths[];

typedef struct ProgressConfig {
    double interval_s; /* at most one scrape of a job per this long; <= 0: no progress */
    double write_qps;  /* progress status writes per second, all jobs together */
    double timeout_s;  /* one scrape, connection included */
} ProgressConfig;

/* What one scrape of the chief's /metrics says; a value absent from it is -1 (NaN for
 * the doubles). */
typedef struct ProgressScrape {
    long step, total_steps, start_step, epoch, checkpoint_step;
    double loss, accuracy, samples_per_second, checkpoint_time;
    /* The loss or accuracy was NaN or infinite (a diverged run): status.progress loses
     * it (a merge patch's null) rather than keep the last finite one. */
    int loss_nonfinite, accuracy_nonfinite;
} ProgressScrape;

typedef struct Progress Progress;

/* The thread's state; the informers and client are borrowed and must outlive it. NULL
 * with err when out of memory. */
Progress *progress_new(KubeClient *client, Informer *jobs, Informer *pods,
                       const ProgressConfig *cfg, char *err, size_t errlen);

/* Starts the thread (a no-op when cfg->interval_s <= 0). Returns 0 or -errno. */
int progress_start(Progress *p);

/* Stops the thread (a scrape in flight is abandoned) and joins it; NULL is a no-op. */
void progress_stop(Progress *p);

void progress_free(Progress *p);

/* Remembers the step a chief pod's trainer reached, from its termination message
 * ({"step": ...}), for the lost-work count of the job's next attempt. Called by the
 * pod informer's handler with every pod event; ignores every other pod. */
void progress_observe_pod(Progress *p, const cJSON *pod);

/* --- pure parts, tested without a server --- */

/* Parses Prometheus text; 0, or -ENODATA when kubetrain_steps_total is absent (not the
 * C trainer's endpoint). A count that is negative or past what status takes (an epoch
 * above 2^31 - 1, a step above 10^15) is absent. */
int progress_parse(const char *text, ProgressScrape *out);

/* Whether job `job` is scraped: Running, and the C trainer (no spec.command) or a user's
 * program whose chief's template (spec.chief's laid over spec.template, or spec.template
 * without a chief) declares the metrics port (desired_template_metrics_port), which the
 * kubetrain package serves on the chief. */
int progress_job_scrapable(const cJSON *job);

/* Seconds between two scrapes of one job with `running` jobs to scrape. */
double progress_interval(const ProgressConfig *cfg, size_t running);

/* When, in [0, interval_s) seconds from when it is first seen, the job `key`
 * ("namespace/name") is first scraped: a phase from its name, so that jobs seen at once
 * (every running job when the operator starts) are not all scraped in one tick. */
double progress_phase(const char *key, double interval_s);

/* The merge patch for `job` after scrape `s` of its chief of attempt `attempt` at wall
 * time `now`; `final_step` is the step the previous attempt's chief reported on exit
 * (-1: unknown). *patch is NULL when nothing worth a write changed (the step, epoch,
 * loss, accuracy or checkpoint). Returns 0 or -ENOMEM. */
int progress_patch(const cJSON *job, const ProgressScrape *s, long long attempt, long final_step,
                   double now, cJSON **patch);

/* The worker whose pod serves the chief's /metrics of `job`: -1 for the chief's slot (the
 * chief task, else worker 0), or, while an elastic job's status.members leaves that slot
 * out, the lowest member's worker index, which its trainer makes rank 0 (docs/design.md,
 * "Elastic jobs"). */
int progress_scraped_worker(const cJSON *job);

/* Whether `pod` is the chief of job `job` in attempt `attempt` (labels LABEL_JOB_NAME,
 * LABEL_ROLE, LABEL_REPLICA_INDEX; ANNOT_ATTEMPT) — with `worker` >= 0, worker `worker`
 * instead (progress_scraped_worker) —, its newest object (ANNOT_REPLACEMENT equal to
 * `replacement`, absent for 0) and not being deleted: 0 with the URL of its /metrics in
 * url, or "" when it cannot be scraped (not Running, or without a pod IP address or a
 * decimal port 1-65535 in ANNOT_METRICS_PORT: the URL is made of the parsed address and
 * number, so nothing written in the pod can send the operator elsewhere); -ENOENT when
 * it is not that pod. */
int progress_chief_url(const cJSON *pod, const char *job, int worker, long long attempt,
                       long long replacement, char *url, size_t n);

/* The step the chief pod reached as its termination message says: 0 with *key
 * ("namespace/job"), *attempt and *step, or -ENOENT when pod is not a chief whose
 * trainer container terminated with such a message. */
int progress_chief_final_step(const cJSON *pod, char *key, size_t keylen, long long *attempt,
                              long *step);

#endif
