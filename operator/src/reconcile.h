/* reconcile — the operator's decisions for one TrainingJob, as a pure function:
 * the job, its observed Secret, Service and pods, the time and 32 fresh random bytes
 * go in; the ordered list of API actions and the delay before the job must be looked
 * at again come out. No I/O happens here, so every policy is tested over fixtures.
 *
 * Level-triggered and idempotent: the plan depends only on what is observed, and the
 * operator may stop between any two actions; the next reconcile finishes the work.
 * The group's incarnation ("attempt", in status and in each pod's annotation) makes
 * this hold across restarts: a decision that destroys its own evidence (deleting
 * pods to restart, suspend or clean up) is written to status first, so that pods of
 * an older attempt are recognised as stale and never counted twice. A pod replaced alone
 * inside its attempt (live recovery) is handled the same way one level down: its number
 * goes into status.replacedPods before its old object is deleted, and the new object
 * carries it (ANNOT_REPLACEMENT), so the old one is stale too. */
#ifndef KT_RECONCILE_H
#define KT_RECONCILE_H

#include "desired.h"
#include "podpolicy.h"

#include <cjson/cJSON.h>
#include <stddef.h>

typedef enum {
    /* POST the Secret (metadata.generateName). The name the API server gave it goes into
     * status.secretName of the plan's update-status, which always follows (reconcile
     * leaves "" there, which the CRD's schema refuses, so a name never filled in cannot
     * be stored). The operator never reads Secrets: having created this one is how it
     * knows the Secret is its own. */
    ACTION_CREATE_SECRET,
    ACTION_CREATE_SERVICE,
    ACTION_CREATE_POD,
    ACTION_DELETE_POD,
    ACTION_UPDATE_STATUS,         /* object: the whole job with the new status (PUT .../status) */
    ACTION_DELETE_JOB,            /* ttlSecondsAfterFinished elapsed */
    ACTION_EVENT,                 /* event_type, reason, message */
    ACTION_FORCE_DELETE_POD,      /* a pod stuck terminating: DELETE with gracePeriodSeconds 0 */
    ACTION_CREATE_NETWORK_POLICY, /* spec.networkPolicy: before the pods */
    ACTION_DELETE_NETWORK_POLICY, /* spec.networkPolicy turned off */
    /* spec.gangScheduling: the attempt's PodGroup, before its pods (409: made already) */
    /* (409: made already by the job, or, when another owns it, the job is reconciled
     * again with Observed.pod_group_conflict) */
    ACTION_CREATE_POD_GROUP,
    /* an earlier attempt's PodGroup, or a finished job's (404: gone); only the job's own
     * object, with its uid as precondition */
    ACTION_DELETE_POD_GROUP,
    /* a lost pod whose trainer has stopped (Failed), replaced live: DELETE with
     * gracePeriodSeconds 0, there being nothing left to stop gracefully, so that its name
     * is free without waiting for the kubelet's own cleanup */
    ACTION_DELETE_STOPPED_POD,
    /* an elastic job's member pod told its new members: object is the merge patch of its
     * ANNOT_MEMBERS, with the observed pod's uid (a pod made anew under the name is not
     * patched: the API server refuses a changed uid) */
    ACTION_PATCH_POD,
    /* the attempt's PodGroup made to follow an elastic job's minWorkers (scheduling.k8s.io/
     * v1beta1 only: v1alpha2's policy is immutable): object is the merge patch of its
     * spec.schedulingPolicy.gang.minCount; only the job's own object, with its uid as
     * precondition (404: gone) */
    ACTION_PATCH_POD_GROUP,
} ActionKind;

typedef struct Action {
    ActionKind kind;
    char name[256];     /* the object acted on (the job's name for status, events) */
    cJSON *object;      /* CREATE_*, UPDATE_STATUS: owned by the plan; else NULL */
    char event_type[8]; /* "Normal" | "Warning" */
    char reason[64];
    char message[512];
} Action;

typedef struct Plan {
    Action *actions;
    size_t n, cap;
    double requeue_after; /* seconds until a timer (deadline, TTL, backoff); < 0: none */
} Plan;

typedef struct ReconcileConfig {
    DesiredConfig desired;
    double backoff_base_s; /* delay before the first retry after an application failure */
    double backoff_max_s;  /* the delay doubles per failure up to this */
    /* A pod still there this long after its deletionTimestamp (the end of its grace
     * period) is on a node that no longer answers: it is deleted with grace period 0 so
     * that its name is free for the restarted group. <= 0: never. */
    double force_delete_after_s;
    /* What spec.template may ask for (podpolicy.h); a refused template makes the job
     * Invalid (reason TemplateNotAllowed, the field named) and creates nothing. */
    PodPolicyLevel template_policy;
} ReconcileConfig;

/* Which Workload API the cluster serves PodGroups in, as the controller learned it from
 * discovery (v1beta1 preferred where both are). */
typedef enum {
    GANG_API_UNKNOWN,  /* not looked up: pods are made without a group, nothing is said */
    GANG_API_ABSENT,   /* neither: such a job says so once (GangScheduling condition, an event) */
    GANG_API_V1BETA1,  /* scheduling.k8s.io/v1beta1 (Kubernetes 1.37): one PodGroup per attempt */
    GANG_API_V1ALPHA2, /* scheduling.k8s.io/v1alpha2 (Kubernetes 1.36): the same */
} GangApi;

/* The group version of `api` (POD_GROUP_V1BETA1 or POD_GROUP_V1ALPHA2), NULL when it
 * serves no PodGroups or is not known yet. */
const char *gang_api_version(GangApi api);

/* The job's Secret is not observed: the operator may not read Secrets. The job's
 * status.secretName names the one it created. */
typedef struct Observed {
    const cJSON *job;            /* the TrainingJob */
    const cJSON *service;        /* <job>-worker or NULL */
    const cJSON *network_policy; /* the NetworkPolicy <job>-worker or NULL */
    const cJSON *const *pods;    /* pods labelled with the job's name */
    size_t npods;
    double now;                 /* wall-clock seconds */
    unsigned char ring_key[32]; /* used only when the Secret is created */
    GangApi gang_api;
    /* The attempt's PodGroup name is held by an object that is not the job's, as the
     * controller found when its create was answered 409: why, naming it; NULL normally.
     * The plan then makes no pod and says so (GangScheduling False, PodGroupConflict). */
    const char *pod_group_conflict;
} Observed;

/* Computes the plan for obs->job into *plan (initialised here; free it with
 * plan_free even on error). Returns 0, or -ENOMEM / -EINVAL (the job object is not a
 * TrainingJob with metadata) with one line in err. A spec the operator cannot run is
 * not an error: the plan then sets the Invalid condition. */
int reconcile(const ReconcileConfig *cfg, const Observed *obs, Plan *plan, char *err,
              size_t errlen);

/* Frees the actions' objects and the array; NULL is a no-op. */
void plan_free(Plan *plan);

/* "create-pod mnist-worker-0\nupdate-status mnist\n..." — one line per action (events
 * as "event <type> <reason>"). Caller frees. For tests and debug logs. */
char *plan_describe(const Plan *plan);

/* The action's verb as in plan_describe ("create-pod"). */
const char *action_kind_name(ActionKind kind);

/* Backoff before retry number n (n >= 1) after application failures. */
double reconcile_backoff_delay(const ReconcileConfig *cfg, long long n);

#endif
