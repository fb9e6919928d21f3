/* jobspec — reads and validates a TrainingJob (kubetrain.dev/v1alpha1) into a plain
 * struct. Schema defaults are applied again here, so that an object created without
 * the CRD's defaulting (or an older schema) runs the same. A spec the operator cannot
 * run is reported with one line naming the field; the job then gets the Invalid
 * condition and no pods. */
#ifndef KT_JOBSPEC_H
#define KT_JOBSPEC_H

#include <cjson/cJSON.h>
#include <stddef.h>

#define KT_GROUP "kubetrain.dev"
#define KT_VERSION "v1alpha1"
#define KT_API_VERSION "kubetrain.dev/v1alpha1"
#define KT_KIND "TrainingJob"
#define KT_PLURAL "trainingjobs"

/* spec.workers at most, as in the CRD's schema (crds/). */
#define JOBSPEC_MAX_WORKERS 1024
/* spec.training.export's length at most, as in the CRD's schema. */
#define JOBSPEC_MAX_EXPORT 255
/* spec.training.initialWeights's length at most, as in the CRD's schema. */
#define JOBSPEC_MAX_INITIAL_WEIGHTS 255
/* spec.elastic.replaceTimeoutSeconds: its default and maximum, as in the CRD's schema. */
#define JOBSPEC_REPLACE_TIMEOUT_DEFAULT 30
#define JOBSPEC_REPLACE_TIMEOUT_MAX 3600
/* training.perWorkerBatchSize when unset: the CRD's and the trainer's default. */
#define JOBSPEC_PER_WORKER_BATCH_DEFAULT 64
/* --global-batch at most, as the trainer takes it. */
#define JOBSPEC_MAX_GLOBAL_BATCH 4194304
/* spec.ps.replicas at most: every pod's TF_CONFIG lists them too. */
#define JOBSPEC_MAX_PS 256

typedef enum { RESTART_NEVER, RESTART_ON_FAILURE, RESTART_EXIT_CODE } RestartPolicy;
typedef enum { CLEAN_NONE, CLEAN_RUNNING, CLEAN_ALL } CleanPodPolicy;
typedef enum { SUCCESS_CHIEF_COMPLETED, SUCCESS_ALL_WORKERS } SuccessPolicy;

/* TensorFlow's task types, in the order of the pods (and of TF_CONFIG's cluster). */
typedef enum { ROLE_CHIEF, ROLE_WORKER, ROLE_PS, ROLE_EVALUATOR, ROLE_COUNT } Role;

/* One role's pods: spec.workers for ROLE_WORKER (with the job's image, command, args
 * and template), else spec.chief, spec.ps or spec.evaluator, whose fields layer over
 * the job's (NULL: the job's). */
typedef struct JobRole {
    int replicas;
    const char *image;
    const cJSON *command, *args;
    const cJSON *template;
} JobRole;

/* All strings and cJSON pointers are borrowed from the job object and live as long
 * as it does. Optional numbers the user did not set are -1 (or *_set == 0), and are
 * then left to the trainer's defaults. */
/* The TrainingJob label that puts its pods in a Kueue LocalQueue (docs/kueue.md); the
 * other Kueue names are in desired.h. */
#define LABEL_KUEUE_QUEUE "kueue.x-k8s.io/queue-name"

typedef struct JobSpec {
    const char *name, *ns, *uid;
    long long generation;
    const char *queue_name; /* the job's label kueue.x-k8s.io/queue-name; NULL when absent or "" */
    int workers;
    const char *image; /* NULL: the operator's --trainer-image */
    /* spec.command and spec.args (arrays of strings) or NULL. With a command the pods
     * run the user's program in spec.image and get none of the trainer's options;
     * without one, the C trainer (which runs chief and workers only). */
    const cJSON *command, *args;
    int port;
    const char *collective; /* auto | ring | nccl */
    int gpus;
    const char *model_name;    /* a built-in name, or NULL when model_inline is set */
    const cJSON *model_inline; /* an inline Sequential spec (object with layers) */
    const char *dataset_name;  /* NULL: the trainer's default */
    const char *dataset_path;  /* NULL: the trainer's default */
    const char *data_source;   /* dataset.source, the trainer's --data; NULL: unset */
    const char *eval_source;   /* dataset.evalSource, --eval-data; NULL: unset */
    const char *pixel_scale;   /* unit | raw; NULL: the trainer's default */
    const char *image_feature; /* dataset.imageFeature, --image-feature; NULL: unset */
    const char *label_feature; /* dataset.labelFeature, --label-feature; NULL: unset */
    int image_shape[3];        /* dataset.imageShape, --image-shape H,W,C; 0s: unset */
    int data_cache_mib;        /* dataset.cacheMiB, --data-cache-mib; -1: unset */
    const char *shard_policy;  /* NULL: the trainer's default */
    /* dataset.credentialsSecret: a Secret whose AWS_* keys become every pod's env, for
     * s3:// sources (desired.c, DATA_SECRET_KEYS); NULL: none */
    const char *data_secret;
    int epochs, steps_per_epoch, per_worker_batch;
    const char *optimizer;
    double learning_rate;
    int learning_rate_set;
    int scale_by_workers;
    long long seed;
    int seed_set;
    /* training.export: the chief's Keras file, relative to the job's checkpoint directory
     * (validated: .keras or .weights.h5, no leading / or .. component); NULL: none */
    const char *export_file;
    /* training.initialWeights: Keras weights to start from, relative to the checkpoint
     * claim's mount (validated: .keras or .h5, no leading / or .. component); NULL: none */
    const char *initial_weights;
    const char *checkpoint_claim; /* NULL: no checkpoint volume */
    const char *checkpoint_path;  /* mount path; default /checkpoints */
    int checkpoint_every, checkpoint_keep;
    RestartPolicy restart_policy;
    int backoff_limit;
    /* spec.recoveryTimeoutSeconds (default 120): how long the C trainer's survivors wait
     * for a lost pod's replacement; 0: every loss restarts the group (desired.h,
     * desired_live_recovery) */
    long long recovery_timeout_s;
    /* spec.elastic (docs/design.md "Elastic jobs"): set, the job trains on with at
     * least min_workers worker pods (1..workers) when a worker's replacement cannot run
     * within replace_timeout_s (default 30) or when spec.workers is lowered */
    int elastic;
    int min_workers;
    long long replace_timeout_s;
    /* An elastic job's global batch (the trainer's --global-batch), fixed when the
     * operator first sees the job elastic: status.globalBatch once recorded, else the
     * world (chief and workers) times perWorkerBatchSize of this spec; 0 when not
     * elastic */
    long long global_batch;
    long long active_deadline_s;    /* -1: none */
    long long startup_deadline_s;   /* -1: none (spec.startupDeadlineSeconds) */
    long long ttl_after_finished_s; /* -1: keep */
    CleanPodPolicy clean_pod_policy;
    SuccessPolicy success_policy;
    int suspend;
    int network_policy;    /* spec.networkPolicy: a NetworkPolicy admits only the job's pods */
    int gang_scheduling;   /* spec.gangScheduling (default true): one PodGroup per attempt
                              when the cluster serves PodGroups (v1beta1, v1alpha2) */
    const cJSON *template; /* PodTemplateSpec or NULL */
    JobRole roles[ROLE_COUNT];
    int npods; /* the replicas of every role */
} JobSpec;

/* "chief", "worker", "ps", "evaluator"; NULL for anything else. */
const char *jobspec_role_name(Role role);
/* The role named `name`, or ROLE_COUNT. */
Role jobspec_role_of(const char *name);

/* Pods are numbered 0..npods-1 ("slots") role by role in Role order: the chief first,
 * then the workers, the ps tasks and the evaluator. Returns the slot of replica `index`
 * of `role`, or -1 when there is no such replica. */
int jobspec_slot(const JobSpec *s, Role role, int index);
/* The role and replica index of slot `slot` (0 <= slot < npods). */
void jobspec_slot_role(const JobSpec *s, int slot, Role *role, int *index);
/* The slot whose exit decides ChiefCompleted: the chief's, else worker 0's. */
int jobspec_chief_slot(const JobSpec *s);

/* Fills *out from `job` (a whole TrainingJob). Returns 0, or -EINVAL with one line in
 * err naming the field ("spec.workers: must be >= 1, got 0"). */
int jobspec_parse(const cJSON *job, JobSpec *out, char *err, size_t errlen);

#endif
