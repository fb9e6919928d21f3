/* desired — the objects the operator wants for one TrainingJob: the ring Secret, the
 * headless Service and one pod per task (chief, workers, ps, evaluator), with the names,
 * labels, DNS and TF_CONFIG of docs/design.md ("Names, labels and DNS", "TF_CONFIG",
 * "The worker pod"). Pure functions of the parsed spec and the operator's settings.
 *
 *   Service  <job>-worker            headless, publishNotReadyAddresses, selects
 *                                    every pod of the job
 *   Pod      <job>-<role>-<i>        hostname <job>-<role>-<i>, subdomain <job>-worker;
 *                                    role chief | worker | ps | evaluator
 *   PodGroup <job>-<attempt>         scheduling.k8s.io/v1beta1 (Kubernetes 1.37) or
 *                                    v1alpha2 (1.36), gang of the chief, workers and
 *                                    ps tasks (spec.gangScheduling)
 *   Secret   <job>-secret-<random>   ring-key (64 hex digits of 32 random bytes),
 *                                    model.json when the model is given inline; the
 *                                    API server generates the suffix (generateName)
 *   TF_CONFIG peers  <job>-<role>-<i>.<job>-worker.<ns>.svc[.<cluster domain>]:<port>
 */
#ifndef KT_DESIRED_H
#define KT_DESIRED_H

#include "jobspec.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* Every label and annotation under this prefix is the operator's: a template's own is
 * dropped (desired_reserved_key). */
#define KT_KEY_PREFIX "kubetrain.dev/"
#define LABEL_JOB_NAME "kubetrain.dev/job-name"
#define LABEL_ROLE "kubetrain.dev/role"
#define LABEL_REPLICA_INDEX "kubetrain.dev/replica-index"
/* "true" on the one pod TensorFlow calls the chief: the chief task, or worker 0 when the
 * job has none. It serves the C trainer's /metrics (the chart's PodMonitor selects it),
 * and keeps the label while an elastic job leaves its slot out (the survivor that is the
 * chief then serves no /metrics: docs/design.md, "The chief."). */
#define LABEL_CHIEF "kubetrain.dev/chief"
#define LABEL_MANAGED_BY "app.kubernetes.io/managed-by"
#define MANAGED_BY "kubetrain-operator"
#define ANNOT_ATTEMPT "kubetrain.dev/attempt"
#define ANNOT_WORLD_SIZE "kubetrain.dev/world-size"
#define ANNOT_CLUSTER "kubetrain.dev/cluster"
/* On a pod made to replace a lost one inside its attempt (live recovery): how many times
 * this pod has been replaced in the attempt, "1", "2"...; absent on the attempt's first
 * pods. status.replacedPods holds the number each pod must carry, so the old object of a
 * replaced pod is known as stale and never counted again (reconcile.h). */
#define ANNOT_REPLACEMENT "kubetrain.dev/replacement"
/* An elastic C-trainer job's members (desired_elastic): the TF_CONFIG indices of the
 * chief and worker pods in the job now (the chief 0 and worker i at i + 1 when there is
 * a chief, else worker i at i), ascending, comma-separated ("0,2"). A downwardAPI
 * volume projects it as the file MEMBERS_FILE, which KUBETRAIN_MEMBERS_FILE names; the
 * trainer re-forms its ring when the file changes (docs/design.md "Elastic jobs"). */
#define ANNOT_MEMBERS "kubetrain.dev/members"
/* When the operator last changed a pod's ANNOT_MEMBERS (RFC 3339), and how many times it
 * updated the pod again since (ANNOT_MEMBERS_NUDGE, every MEMBERS_NUDGE_S seconds,
 * MEMBERS_NUDGES times): each update has the kubelet sync the pod, and a kubelet that
 * missed the prompt refresh of the members file gets another (docs/design.md "How the
 * members reach the pods"). */
#define ANNOT_MEMBERS_AT "kubetrain.dev/members-at"
#define ANNOT_MEMBERS_NUDGE "kubetrain.dev/members-nudge"
#define MEMBERS_NUDGE_S 5
#define MEMBERS_NUDGES 6
#define MEMBERS_VOLUME "kubetrain-members"
#define MEMBERS_MOUNT_DIR "/etc/kubetrain-members"
#define MEMBERS_FILE MEMBERS_MOUNT_DIR "/members"
/* The Workload API's group versions that serve PodGroups, newest first: the operator
 * uses the first the cluster serves (docs/design.md, "Gang scheduling"). */
#define POD_GROUP_V1BETA1 "scheduling.k8s.io/v1beta1"
#define POD_GROUP_V1ALPHA2 "scheduling.k8s.io/v1alpha2"
/* Where the pod's trainer serves /metrics: the operator reads the chief's for
 * status.progress (progress.h). Only on pods of the C trainer that serve it. */
#define ANNOT_METRICS_PORT "kubetrain.dev/metrics-port"
#define TRAINER_CONTAINER "trainer"
#define SECRET_RING_KEY "ring-key"
#define SECRET_MODEL "model.json"
#define MODEL_MOUNT_DIR "/etc/kubetrain"
#define METRICS_PORT_NAME "metrics" /* the chief's /metrics (the chart's PodMonitor) */
#define DESIRED_METRICS_PORT 9090   /* the C trainer's /metrics unless the template says */

/* Kueue's plain pod group (docs/kueue.md), on every pod of a job labelled
 * LABEL_KUEUE_QUEUE (jobspec.h): the queue label, a group named per attempt, the
 * group's size (every pod of the attempt), and "not retriable in group": Kueue finishes
 * the group's Workload once none of its pods is active, so a restart is a new group; a
 * pod replaced live inside an attempt joins the admitted group (Kueue takes a pod of the
 * same shape as the replacement of a failed one). Kueue's condition
 * on the pods it stops (preemption, eviction) before deleting them. */
#define LABEL_KUEUE_GROUP "kueue.x-k8s.io/pod-group-name"
#define ANNOT_KUEUE_GROUP_COUNT "kueue.x-k8s.io/pod-group-total-count"
#define ANNOT_KUEUE_RETRIABLE "kueue.x-k8s.io/retriable-in-group"
#define KUEUE_STOPPED_CONDITION "TerminationTarget"

/* The operator's settings that shape the objects. */
typedef struct DesiredConfig {
    const char *trainer_image;  /* used when neither spec.image nor the template names one */
    const char *cluster_domain; /* "" or NULL: peers end in ".svc" (resolved through the
                                   pod's DNS search path); else ".svc.<domain>" */
    const char *default_queue;  /* "" or NULL: none; else the Kueue LocalQueue of a job
                                   whose labels and template's labels name none */
} DesiredConfig;

/* Object names, written into out (always NUL-terminated; job names are validated to
 * fit a 63-character DNS label). */
void desired_service_name(const char *job, char *out, size_t n);
/* The Secret's generateName, "<job>-secret-": the API server appends a random suffix,
 * so nobody can create the job's Secret before the operator does. */
void desired_secret_prefix(const char *job, char *out, size_t n);
/* "<job>-<role>-<index>", the pod and its hostname. */
void desired_pod_name(const char *job, Role role, int index, char *out, size_t n);

/* "<job>-<attempt>", the PodGroup of one attempt: unique, since the attempt is a number
 * and a job name cannot end in "-<digits>" of another's that way (the suffix is parsed
 * from the right). */
void desired_pod_group_name(const char *job, long long attempt, char *out, size_t n);

/* Whether a lost chief or worker pod is replaced alone inside its attempt while the
 * others keep running (live recovery, docs/design.md "Restart policies and counting"):
 * the C trainer (no spec.command: TensorFlow cannot rejoin a ring), not on NCCL
 * (gpusPerWorker > 0 with collective nccl or auto: every rank must rebuild its
 * communicator), and recoveryTimeoutSeconds > 0. In a Kueue pod group the replacement
 * joins the admitted group under a name of its own (desired_pod_set_replacement).
 * Otherwise a lost pod restarts the group, and the C trainer is told
 * --recovery-timeout 0 so that its survivors do not wait for a replacement. */
int desired_live_recovery(const JobSpec *s);

/* Whether the job's size changes without a group restart (spec.elastic): a job with
 * live recovery (desired_live_recovery: the C trainer, not NCCL), whose pods carry
 * ANNOT_MEMBERS and --global-batch. An elastic job without it (a user's program, NCCL)
 * restarts the group at each new size instead. */
int desired_elastic(const JobSpec *s);

/* Sets the pod's ANNOT_MEMBERS (from desired_pod) to `members`, as the reconcile decides
 * it. Returns 0, or -ENOMEM. */
int desired_pod_set_members(cJSON *pod, const char *members);

/* Marks a pod (from desired_pod) as replacement number `n` (>= 1) of its attempt:
 * ANNOT_REPLACEMENT. A pod in a Kueue pod group is also named <hostname>-r<n>: Kueue
 * keeps its finalizer on the lost pod's object until it sees the replacement, so the
 * old name is not free before. Returns 0, or -ENOMEM. */
int desired_pod_set_replacement(cJSON *pod, long long n);

/* The pods that must run together, the PodGroup's minCount: the chief, the workers and
 * the ps tasks. The evaluator is outside the gang (it takes no part in the rendezvous,
 * and were it in the group it could count toward minCount in a worker's place). */
int desired_gang_size(const JobSpec *s);

/* The PodGroup's minCount: how many of the desired_gang_size pods the scheduler must be
 * able to place at once before it places any. desired_gang_size, except for an elastic
 * job (desired_elastic), which trains on with minWorkers: the chief, minWorkers workers
 * and the ps tasks, so that it is placed at its minimum when a worker's room is gone and
 * a replacement joins a shrunk job alone (docs/design.md, "Gang scheduling"). */
int desired_gang_min(const JobSpec *s);

/* The role's pods join the attempt's PodGroup: every role but the evaluator. */
int desired_in_gang(Role role);

/* The PodGroup of attempt `attempt` in group version `api_version` (POD_GROUP_V1BETA1 or
 * POD_GROUP_V1ALPHA2): named by desired_pod_group_name, the job's labels and
 * ANNOT_ATTEMPT, owned by the job, with spec.schedulingPolicy.gang.minCount =
 * desired_gang_min. In v1beta1 also spec.disruptionMode.all: the scheduler preempts the
 * gang whole or not at all (a synchronous job cannot step with one worker gone, and the
 * others would hold their nodes waiting for it); v1alpha2 leaves the field out (its
 * feature gate, WorkloadAwarePreemption, is off by default in 1.36 and the field is
 * refused then). Caller owns the result; NULL on allocation failure. */
cJSON *desired_pod_group(const JobSpec *s, long long attempt, const char *api_version);

/* Links a pod (from desired_pod) to the PodGroup `group`: spec.schedulingGroup.
 * podGroupName, over any the template set. Returns 0, or -ENOMEM. */
int desired_pod_join_group(cJSON *pod, const char *group);

/* TF_CONFIG of replica `index` of `role`: the cluster lists the chief, worker and ps
 * tasks (a role without replicas is left out; the evaluator is never in it) and the
 * task is this pod's. Returns a malloc'd string; the caller frees it. NULL only on
 * allocation failure. */
char *desired_tf_config(const JobSpec *s, const DesiredConfig *cfg, Role role, int index);

/* The address TF_CONFIG gives the task `role` `index` of s ("host:port", its headless
 * service's DNS name) into out (n bytes, cut to fit). */
void desired_task_address(const JobSpec *s, const DesiredConfig *cfg, Role role, int index,
                          char *out, size_t n);

/* The cluster's shape, "chief=<n>,worker=<n>,ps=<n>", into out when the job has a chief
 * or ps tasks (returns 1), else 0: pods carry it in ANNOT_CLUSTER so that a pod made for
 * another cluster (whose TF_CONFIG lists other tasks) is recognised. */
int desired_cluster_shape(const JobSpec *s, char *out, size_t n);

/* desired_cluster_shape with `workers` workers in place of s->workers: an elastic job's
 * pod is judged by its chief and ps counts, its workers being the members' business. */
int desired_cluster_shape_of(const JobSpec *s, int workers, char *out, size_t n);

/* The Kueue pod group of the job's pods in attempt `attempt`,
 * "<job>-<attempt>-<first 8 characters of the job's uid>" with the job's name cut so that
 * it fits a label value (63): unique per attempt and per job of that name, so a restart
 * (or a job made anew under an old name) is a new group and a new Workload, admitted
 * anew. */
void desired_kueue_group(const JobSpec *s, long long attempt, char *out, size_t n);

/* 1 when a template's label or annotation `key` is the operator's to set, and is
 * dropped from the pods: any key under KT_KEY_PREFIX (the operator sets some only on
 * some pods: a template's ANNOT_METRICS_PORT would be scraped, its ANNOT_REPLACEMENT
 * would hide stale objects, its ANNOT_CLUSTER or LABEL_CHIEF would mislabel the pods)
 * and the Kueue pod group's keys, LABEL_KUEUE_GROUP, ANNOT_KUEUE_GROUP_COUNT and
 * ANNOT_KUEUE_RETRIABLE. The queue label (LABEL_KUEUE_QUEUE) is the user's. */
int desired_reserved_key(const char *key);

/* 1 when the pod is in a Kueue pod group (LABEL_KUEUE_GROUP): Kueue gates it until the
 * group is admitted. */
int desired_pod_queued(const cJSON *pod);

/* The owner reference to the job (controller: true, blockOwnerDeletion: true). */
cJSON *desired_owner_ref(const JobSpec *s);

/* Labels every object of the job carries (job name, managed-by). */
cJSON *desired_job_labels(const JobSpec *s);

/* The Secret, with metadata.generateName and no name: ring-key is the 64 lowercase hex
 * digits of `ring_key`. The caller owns the result (cJSON_Delete). NULL on allocation
 * failure. */
cJSON *desired_secret(const JobSpec *s, const unsigned char ring_key[32]);

/* The headless Service. Caller owns the result. */
cJSON *desired_service(const JobSpec *s);

/* The containerPort 1-65535 that a pod template declares under the name "metrics" in
 * one of its containers, else 0: role_tmpl (a role's template, NULL: none) laid over
 * tmpl (spec.template, NULL: none) as the pods get them, the role's containers replacing
 * the job's of the same name. */
int desired_template_metrics_port(const cJSON *tmpl, const cJSON *role_tmpl);

/* The /metrics port (KUBETRAIN_METRICS_PORT) of role's pods: their template's "metrics"
 * port (desired_template_metrics_port); else DESIRED_METRICS_PORT for the C trainer (no
 * spec.command), whose chief serves it by default; else 0: a user's program serves
 * nothing unless its job declares the port (the kubetrain package serves it). */
int desired_role_metrics_port(const JobSpec *s, Role role);

/* The job's NetworkPolicy (networking.k8s.io/v1), named like its Service: the worker
 * pods accept TCP on spec.port from the job's own worker pods, and, where a role's pods
 * serve /metrics (desired_role_metrics_port), TCP on those ports from pods in any
 * namespace (where a Prometheus runs is the cluster's choice); nothing else. NULL when
 * out of memory; caller frees. */
cJSON *desired_network_policy(const JobSpec *s);

/* The pod of replica `index` of `role` in group incarnation `attempt`: the role's
 * template over the job's, merged with the operator's fields, which win; the chief and
 * worker pods of an elastic job (desired_elastic) carry ANNOT_MEMBERS naming every
 * chief and worker (desired_pod_set_members changes it), its MEMBERS_FILE and
 * --global-batch s->global_batch; a pod with a
 * Kueue queue (the job's label, else its template's) is in the attempt's Kueue group
 * (LABEL_KUEUE_GROUP and the others above); image,
 * command and args are the role's, else the job's; the ring key and an inline model
 * come from the Secret named `secret` (the job's status.secretName). Caller owns the
 * result. NULL on allocation failure. */
cJSON *desired_pod(const JobSpec *s, const DesiredConfig *cfg, const char *secret, Role role,
                   int index, long long attempt);

#endif
