/* Reconcile over fixture objects: each case asserts the exact list of API actions
 * and the status fields the policy decides. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clock.h"
#include "jsonx.h"
#include "olog.h"
#include "reconcile.h"
#include "../../trainer/tests/assert_close.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW 1800000000.0 /* 2027-01-15T08:00:00Z */

static const ReconcileConfig CFG = {
    .desired = {.trainer_image = "kubetrain/trainer:test", .cluster_domain = ""},
    .backoff_base_s = 10,
    .backoff_max_s = 300,
};

/* A TrainingJob "mnist" in "default" with the given spec (JSON) and status (JSON or NULL). */
static cJSON *job_new(const char *spec, const char *status)
{
    char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
             "\"metadata\":{\"name\":\"mnist\",\"namespace\":\"default\",\"uid\":\"uid-1\","
             "\"generation\":3,\"resourceVersion\":\"100\"},\"spec\":%s%s%s}",
             spec, status ? ",\"status\":" : "", status ? status : "");
    cJSON *j = cJSON_Parse(buf);
    assert_non_null(j);
    return j;
}

/* The name the API server generates for the job's Secret in these fixtures. */
#define SECRET "mnist-secret-x7k2p"

typedef struct Fixture {
    cJSON *job;
    int secrets; /* Secrets created (the operator never observes them) */
    cJSON *service, *netpol;
    cJSON *pods[16];
    size_t npods;
    GangApi gang_api;
    char groups[8][256]; /* the PodGroups the plans made and did not delete */
    int group_min[8];    /* each one's minCount, as made or patched */
    size_t ngroups;
    Plan plan;
    char *desc;
} Fixture;

static void fx_free(Fixture *f)
{
    cJSON_Delete(f->job);
    cJSON_Delete(f->service);
    cJSON_Delete(f->netpol);
    for (size_t i = 0; i < f->npods; i++)
        cJSON_Delete(f->pods[i]);
    plan_free(&f->plan);
    free(f->desc);
}

/* The Service as the operator would have created it, and the Secret's name in status
 * as the operator would have recorded it. */
static void fx_with_support(Fixture *f)
{
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(f->job, &s, err, sizeof err), 0);
    f->secrets = 1;
    f->service = desired_service(&s);
    jsonx_set_str(jsonx_ensure_obj(f->job, "status"), "secretName", SECRET);
}

/* Adds worker i's pod of attempt `attempt` in phase `phase`. */
/* Sets the pod's phase; a Running pod is Ready too, as the kubelet reports one. */
static void pod_set_phase(cJSON *pod, const char *phase)
{
    cJSON *st = jsonx_ensure_obj(pod, "status");
    jsonx_set_str(st, "phase", phase);
    if (strcmp(phase, "Running") == 0)
        jsonx_set(st, "conditions", cJSON_Parse("[{\"type\":\"Ready\",\"status\":\"True\"}]"));
}

static cJSON *fx_pod(Fixture *f, int i, long long attempt, const char *phase)
{
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(f->job, &s, err, sizeof err), 0);
    cJSON *p = desired_pod(&s, &CFG.desired, SECRET, ROLE_WORKER, i, attempt);
    assert_non_null(p);
    pod_set_phase(p, phase);
    f->pods[f->npods++] = p;
    return p;
}

/* Marks the pod's trainer container terminated with `code` and `message`. */
static void pod_terminated(cJSON *pod, int code, const char *message)
{
    char buf[1024];
    cJSON *m = cJSON_CreateString(message ? message : "");
    char *ms = cJSON_PrintUnformatted(m);
    snprintf(buf, sizeof buf,
             "[{\"name\":\"trainer\",\"state\":{\"terminated\":{\"exitCode\":%d%s%s}}}]", code,
             message ? ",\"message\":" : "", message ? ms : "");
    free(ms);
    cJSON_Delete(m);
    cJSON *st = jsonx_ensure_obj(pod, "status");
    jsonx_set_str(st, "phase", code == 0 ? "Succeeded" : "Failed");
    jsonx_set(st, "containerStatuses", cJSON_Parse(buf));
}

static void fx_run_cfg(Fixture *f, const ReconcileConfig *cfg, double now)
{
    Observed o = {.job = f->job,
                  .service = f->service,
                  .network_policy = f->netpol,
                  .pods = (const cJSON *const *)f->pods,
                  .npods = f->npods,
                  .now = now,
                  .gang_api = f->gang_api};
    for (int i = 0; i < 32; i++)
        o.ring_key[i] = (unsigned char)(0xa0 + i);
    char err[256] = "";
    int rc = reconcile(cfg, &o, &f->plan, err, sizeof err);
    if (rc) fprintf(stderr, "# reconcile: %s\n", err);
    assert_int_equal(rc, 0);
    f->desc = plan_describe(&f->plan);
    assert_non_null(f->desc);
}

static void fx_run(Fixture *f, double now)
{
    fx_run_cfg(f, &CFG, now);
}

static void apply_prefix(Fixture *f, size_t k);

/* Carries out the whole plan as the controller and API server would, then forgets it. */
static void fx_apply(Fixture *f)
{
    apply_prefix(f, f->plan.n);
    plan_free(&f->plan);
    free(f->desc);
    f->desc = NULL;
}

/* The new status of the plan's update-status action (fails if there is none). */
static const cJSON *new_status(const Fixture *f)
{
    for (size_t i = 0; i < f->plan.n; i++)
        if (f->plan.actions[i].kind == ACTION_UPDATE_STATUS)
            return jsonx_obj(f->plan.actions[i].object, "status");
    fail_msg("the plan has no update-status action:\n%s", f->desc);
    return NULL;
}

static const Action *find_action(const Fixture *f, ActionKind kind, const char *name)
{
    for (size_t i = 0; i < f->plan.n; i++)
        if (f->plan.actions[i].kind == kind && strcmp(f->plan.actions[i].name, name) == 0)
            return &f->plan.actions[i];
    fail_msg("no %s %s in:\n%s", action_kind_name(kind), name, f->desc);
    return NULL;
}

/* The condition's status/reason as "True/Reason", or "absent". */
static void cond_of(const cJSON *status, const char *type, char *out, size_t n)
{
    const cJSON *c;
    snprintf(out, n, "absent");
    cJSON_ArrayForEach(c, jsonx_arr(status, "conditions"))
    {
        const char *t = jsonx_str(c, "type");
        if (t && strcmp(t, type) == 0)
            snprintf(out, n, "%s/%s", jsonx_str(c, "status"), jsonx_str(c, "reason"));
    }
}

/* The message of the status's condition `type`, or "(none)" (an assertion prints it). */
static const char *cond_message(const cJSON *status, const char *type)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, jsonx_arr(status, "conditions"))
    {
        if (strcmp(jsonx_str(c, "type"), type) == 0) return jsonx_str(c, "message");
    }
    return "(none)";
}

static void assert_cond(const cJSON *status, const char *type, const char *want)
{
    char got[128];
    cond_of(status, type, got, sizeof got);
    assert_string_equal(got, want);
}

/* The env var's value in the trainer container. */
static const char *env_of(const cJSON *pod, const char *name)
{
    const cJSON *c, *e;
    cJSON_ArrayForEach(c, jsonx_arr(pod, "spec.containers"))
    {
        if (strcmp(jsonx_str(c, "name"), "trainer") != 0) continue;
        cJSON_ArrayForEach(e, jsonx_arr(c, "env"))
        {
            if (strcmp(jsonx_str(e, "name"), name) == 0) return jsonx_str(e, "value");
        }
    }
    return NULL;
}

/* The pod's ANNOT_MEMBERS, "(none)" when absent. */
static const char *members_of(const cJSON *pod)
{
    const char *m = jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), "kubetrain.dev/members");
    return m ? m : "(none)";
}

static const cJSON *container(const cJSON *pod, const char *name)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, jsonx_arr(pod, "spec.containers"))
    {
        if (strcmp(jsonx_str(c, "name"), name) == 0) return c;
    }
    return NULL;
}

#define SPEC2 "{\"workers\":2,\"checkpoint\":{\"claimName\":\"ckpt\"}}"
/* status.selector of job mnist: its worker pods. */
#define WORKER_SELECTOR "kubetrain.dev/job-name=mnist,kubetrain.dev/role=worker"
/* The status the operator writes after creating the pods of attempt 0. */
#define ST_LAUNCHED(extra)                                                                         \
    "{\"observedGeneration\":3,\"succeededIndexes\":[],\"workers\":{\"active\":0,\"ready\":0,"     \
    "\"succeeded\":0,\"failed\":0},\"startTime\":\"2027-01-15T07:58:20Z\",\"conditions\":"         \
    "[{\"type\":\"Created\",\"status\":\"True\",\"reason\":\"PodsCreated\",\"message\":"           \
    "\"created 2 worker pods\",\"lastTransitionTime\":\"2027-01-15T07:58:20Z\"}],"                 \
    "\"launched\":true,\"phase\":\"Pending\"" extra "}"

/* ------------------------------------------------------------------------------------ */

static void test_new_job_creates_everything(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC2, NULL)};
    fx_run(&f, NOW);
    /* The pods wait for the Secret's generated name to be in status. */
    assert_string_equal(f.desc, "create-secret mnist-secret-\n"
                                "create-service mnist-worker\n"
                                "update-status mnist\n");
    const cJSON *sec = find_action(&f, ACTION_CREATE_SECRET, "mnist-secret-")->object;
    assert_string_equal(jsonx_str(sec, "metadata.generateName"), "mnist-secret-");
    assert_null(jsonx_at(sec, "metadata.name"));
    assert_string_equal(
        jsonx_str(cJSON_GetArrayItem(jsonx_arr(sec, "metadata.ownerReferences"), 0), "uid"),
        "uid-1");
    /* base64 of the hex of a0 a1 ... bf */
    const char *key = jsonx_str(sec, "data.ring-key");
    assert_non_null(key);
    assert_int_equal(strlen(key), 88);
    assert_memory_equal(key, "YTBhMWEyYTNh", 12); /* "a0a1a2a3a" */
    /* The controller fills in the generated name; "" is what the CRD refuses. */
    assert_string_equal(jsonx_str(new_status(&f), "secretName"), "");
    assert_string_equal(jsonx_str(new_status(&f), "phase"), "Pending");
    fx_apply(&f);

    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-pod mnist-worker-0\n"
                                "create-pod mnist-worker-1\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "secretName"), SECRET);
    assert_string_equal(jsonx_str(st, "phase"), "Pending");
    assert_string_equal(jsonx_str(st, "startTime"), "2027-01-15T08:00:00Z");
    assert_int_equal(jsonx_int(st, "observedGeneration", -1), 3);
    assert_true(jsonx_bool(st, "launched", 0));
    assert_int_equal(jsonx_int(st, "workers.active", -1), 2); /* so the next pass is a no-op */
    assert_cond(st, "Created", "True/PodsCreated");

    const cJSON *pod = find_action(&f, ACTION_CREATE_POD, "mnist-worker-1")->object;
    assert_string_equal(
        env_of(pod, "TF_CONFIG"),
        "{\"cluster\":{\"worker\":[\"mnist-worker-0.mnist-worker.default.svc:2222\","
        "\"mnist-worker-1.mnist-worker.default.svc:2222\"]},"
        "\"task\":{\"type\":\"worker\",\"index\":1}}");
    assert_string_equal(jsonx_str(pod, "spec.hostname"), "mnist-worker-1");
    assert_string_equal(jsonx_str(pod, "spec.subdomain"), "mnist-worker");
    assert_string_equal(jsonx_str(pod, "spec.restartPolicy"), "Never");
    const cJSON *labels = jsonx_obj(pod, "metadata.labels");
    assert_string_equal(jsonx_key_str(labels, "kubetrain.dev/job-name"), "mnist");
    assert_string_equal(jsonx_key_str(labels, "kubetrain.dev/role"), "worker");
    assert_string_equal(jsonx_key_str(labels, "kubetrain.dev/replica-index"), "1");
    assert_string_equal(jsonx_key_str(labels, "app.kubernetes.io/managed-by"),
                        "kubetrain-operator");
    const cJSON *ref = cJSON_GetArrayItem(jsonx_arr(pod, "metadata.ownerReferences"), 0);
    assert_string_equal(jsonx_str(ref, "uid"), "uid-1");
    assert_string_equal(jsonx_str(ref, "kind"), "TrainingJob");
    assert_true(jsonx_bool(ref, "controller", 0));
    assert_string_equal(env_of(pod, "KUBETRAIN_JOB"), "mnist");
    assert_string_equal(env_of(pod, "KUBETRAIN_NAMESPACE"), "default");
    assert_string_equal(env_of(pod, "KUBETRAIN_CHECKPOINT_DIR"), "/checkpoints/mnist");
    assert_string_equal(env_of(pod, "KUBETRAIN_COLLECTIVE"), "auto");
    const cJSON *c = container(pod, "trainer");
    assert_string_equal(jsonx_str(c, "image"), "kubetrain/trainer:test");
    const cJSON *e;
    int found_secret = 0;
    cJSON_ArrayForEach(e, jsonx_arr(c, "env"))
    {
        if (strcmp(jsonx_str(e, "name"), "KUBETRAIN_SECRET") != 0) continue;
        assert_string_equal(jsonx_str(e, "valueFrom.secretKeyRef.name"), SECRET);
        assert_string_equal(jsonx_str(e, "valueFrom.secretKeyRef.key"), "ring-key");
        found_secret = 1;
    }
    assert_true(found_secret);
    assert_string_equal(jsonx_str(cJSON_GetArrayItem(jsonx_arr(pod, "spec.volumes"), 0),
                                  "persistentVolumeClaim.claimName"),
                        "ckpt");
    assert_string_equal(jsonx_str(cJSON_GetArrayItem(jsonx_arr(c, "volumeMounts"), 0), "mountPath"),
                        "/checkpoints");
    assert_true(jsonx_bool(pod, "spec.securityContext.runAsNonRoot", 0));
    assert_false(jsonx_bool(pod, "spec.automountServiceAccountToken", 1));
    assert_string_equal(jsonx_str(pod, "spec.securityContext.seccompProfile.type"),
                        "RuntimeDefault");
    assert_false(jsonx_bool(c, "securityContext.allowPrivilegeEscalation", 1));
    assert_null(jsonx_at(c, "resources.limits"));
    assert_string_equal(
        jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), "kubetrain.dev/attempt"), "0");

    const cJSON *svc = f.service;
    assert_string_equal(jsonx_str(svc, "spec.clusterIP"), "None");
    assert_true(jsonx_bool(svc, "spec.publishNotReadyAddresses", 0));
    const cJSON *sel = jsonx_obj(svc, "spec.selector");
    assert_string_equal(
        cJSON_GetObjectItemCaseSensitive(sel, "kubetrain.dev/job-name")->valuestring, "mnist");
    /* Every role's pods: the selector names no role. */
    assert_string_equal(
        cJSON_GetObjectItemCaseSensitive(sel, "app.kubernetes.io/managed-by")->valuestring,
        "kubetrain-operator");
    assert_int_equal(cJSON_GetArraySize(sel), 2);
    assert_true(f.plan.requeue_after < 0);
    fx_free(&f);
}

static void test_steady_state_is_a_no_op(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC2, ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Pending");
    fx_pod(&f, 1, 0, "Pending");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"); /* the active count */
    assert_int_equal(jsonx_int(new_status(&f), "workers.active", -1), 2);
    assert_string_equal(jsonx_str(new_status(&f), "ready"), "0/2");
    fx_free(&f);

    f = (Fixture){.job = job_new(SPEC2, ST_LAUNCHED(""))};
    cJSON *w = jsonx_ensure_obj(jsonx_ensure_obj(f.job, "status"), "workers");
    jsonx_set_num(w, "active", 2);
    jsonx_set_str(jsonx_ensure_obj(f.job, "status"), "ready", "0/2");
    jsonx_set_num(jsonx_ensure_obj(f.job, "status"), "currentWorkers", 0);
    jsonx_set_str(jsonx_ensure_obj(f.job, "status"), "selector", WORKER_SELECTOR);
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Pending");
    fx_pod(&f, 1, 0, "Pending");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "");
    fx_free(&f);
}

/* status.currentWorkers (the scale subresource's replicas) counts the worker pods of the
 * attempt that run: not a pending one, not one being deleted, not one that exited. */
static void test_current_workers_follow_the_pods(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC2, ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Pending");
    fx_pod(&f, 1, 0, "Pending");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n");
    assert_int_equal(jsonx_int(new_status(&f), "currentWorkers", -1), 0);
    assert_string_equal(jsonx_str(new_status(&f), "selector"), WORKER_SELECTOR);
    fx_apply(&f);

    jsonx_set_str(jsonx_ensure_obj(f.pods[0], "status"), "phase", "Running");
    fx_run(&f, NOW + 1);
    assert_string_equal(f.desc, "update-status mnist\n");
    assert_int_equal(jsonx_int(new_status(&f), "currentWorkers", -1), 1);
    fx_apply(&f);

    jsonx_set_str(jsonx_ensure_obj(f.pods[1], "status"), "phase", "Running");
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n");
    assert_string_equal(jsonx_str(new_status(&f), "phase"), "Running");
    assert_int_equal(jsonx_int(new_status(&f), "currentWorkers", -1), 2);
    fx_apply(&f);
    fx_run(&f, NOW + 3);
    assert_string_equal(f.desc, ""); /* nothing changed: nothing written */
    plan_free(&f.plan);
    free(f.desc);

    /* Worker 1 being deleted runs no more (live recovery replaces it; the plan is
     * dropped and the pod left as it was). */
    cJSON *md = jsonx_ensure_obj(f.pods[1], "metadata");
    jsonx_set_str(md, "deletionTimestamp", "2027-01-15T08:00:03Z");
    fx_run(&f, NOW + 4);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal WorkerReplaced\n");
    assert_int_equal(jsonx_int(new_status(&f), "currentWorkers", -1), 1);
    plan_free(&f.plan);
    free(f.desc);
    cJSON_DeleteItemFromObjectCaseSensitive(md, "deletionTimestamp");

    /* Worker 1 exits 0 first (successPolicy ChiefCompleted: it waits for the chief). */
    pod_terminated(f.pods[1], 0, NULL);
    fx_run(&f, NOW + 4);
    assert_string_equal(f.desc, "update-status mnist\n");
    assert_int_equal(jsonx_int(new_status(&f), "currentWorkers", -1), 1);
    fx_apply(&f);

    /* The chief completes the job: a finished job runs no worker. */
    pod_terminated(f.pods[0], 0, "{\"step\":210}");
    fx_run(&f, NOW + 5);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Completed\n");
    assert_string_equal(jsonx_str(new_status(&f), "phase"), "Succeeded");
    assert_int_equal(jsonx_int(new_status(&f), "currentWorkers", -1), 0);
    fx_free(&f);
}

static void test_all_running_sets_phase(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC2, ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Running");
    fx_pod(&f, 1, 0, "Running");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Running");
    assert_cond(st, "Running", "True/AllWorkersRunning");
    assert_int_equal(jsonx_int(st, "workers.ready", -1), 2);
    assert_string_equal(jsonx_str(st, "ready"), "2/2");
    fx_free(&f);
}

static void test_chief_completed_succeeds_with_result(void **state)
{
    (void)state;
    Fixture f = {.job =
                     job_new("{\"workers\":2,\"ttlSecondsAfterFinished\":600}", ST_LAUNCHED(""))};
    fx_with_support(&f);
    pod_terminated(fx_pod(&f, 0, 0, "Running"), 0,
                   "{\"step\":210,\"epoch\":3,\"loss\":0.41,\"accuracy\":0.86,"
                   "\"weights_sha256\":\"ab12\"}");
    fx_pod(&f, 1, 0, "Running");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Completed\n"
                                "delete-pod mnist-worker-1\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Succeeded");
    assert_cond(st, "Succeeded", "True/Completed");
    assert_int_equal(jsonx_int(st, "result.step", -1), 210);
    assert_close(jsonx_num(st, "result.accuracy", 0), 0.86, 0);
    assert_string_equal(jsonx_str(st, "result.weightsSha256"), "ab12");
    assert_null(jsonx_at(st, "result.weights_sha256"));
    assert_string_equal(jsonx_str(st, "completionTime"), "2027-01-15T08:00:00Z");
    assert_close(f.plan.requeue_after, 600, 0);
    fx_free(&f);
}

/* A termination message is the pod's to write: fields of other types than status.result's
 * schema had every status write refused (422) forever (issue 41, item 5). Only the
 * schema's fields of its types and ranges are copied; the job completes. */
static void test_result_takes_only_the_schema(void **state)
{
    (void)state;
    static const struct {
        const char *message, *want;
    } cases[] = {
        {"{\"step\":\"1200\",\"epoch\":2.5}", "{}"},
        {"{\"step\":1200,\"epoch\":3,\"loss\":0.25,\"accuracy\":1,"
         "\"weights_sha256\":\"ab12CD\",\"extra\":{\"a\":[1]},\"weightsSha256\":7}",
         "{\"step\":1200,\"epoch\":3,\"loss\":0.25,\"accuracy\":1,\"weightsSha256\":"
         "\"ab12CD\"}"},
        {"{\"step\":-1,\"epoch\":2147483648,\"loss\":\"nan\",\"accuracy\":null,"
         "\"weights_sha256\":\"not hex\"}",
         "{}"},
        {"{\"step\":9007199254740993e3,\"epoch\":2147483647,\"loss\":1e999,"
         "\"weights_sha256\":"
         "\"00000000000000000000000000000000000000000000000000000000000000000\"}",
         "{\"epoch\":2147483647}"},
        {"{\"step\":1,\"export\":\"/ck/mnist/model.keras\"}",
         "{\"step\":1,\"export\":\"/ck/mnist/model.keras\"}"},
        {"{\"step\":1,\"export\":7}", "{\"step\":1}"},
        {"{\"step\":1,\"export\":\"\"}", "{\"step\":1}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Fixture f = {.job = job_new("{\"workers\":2}", ST_LAUNCHED(""))};
        fx_with_support(&f);
        pod_terminated(fx_pod(&f, 0, 0, "Running"), 0, cases[i].message);
        fx_pod(&f, 1, 0, "Running");
        fx_run(&f, NOW);
        assert_string_equal(f.desc, "update-status mnist\n"
                                    "event Normal Completed\n"
                                    "delete-pod mnist-worker-1\n");
        char *got = cJSON_PrintUnformatted(jsonx_obj(new_status(&f), "result"));
        assert_non_null(got);
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("message %s: result %s, want %s", cases[i].message, got, cases[i].want);
        free(got);
        fx_free(&f);
    }
}

static void test_all_workers_policy_waits_for_everyone(void **state)
{
    (void)state;
    Fixture f = {.job =
                     job_new("{\"workers\":2,\"successPolicy\":\"AllWorkers\"}", ST_LAUNCHED(""))};
    fx_with_support(&f);
    pod_terminated(fx_pod(&f, 0, 0, "Running"), 0, "{\"step\":1}");
    fx_pod(&f, 1, 0, "Running");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Running");
    assert_int_equal(cJSON_GetArraySize(jsonx_arr(st, "succeededIndexes")), 1);
    assert_int_equal(jsonx_int(st, "result.step", -1), 1); /* kept before the chief's pod goes */
    fx_free(&f);

    /* Worker 0's pod was garbage-collected; it is recorded, so it is not re-run and its
     * absence is no disruption. Worker 1 finishing completes the job. */
    f = (Fixture){.job =
                      job_new("{\"workers\":2,\"successPolicy\":\"AllWorkers\"}", ST_LAUNCHED(""))};
    jsonx_set(jsonx_ensure_obj(f.job, "status"), "succeededIndexes", cJSON_Parse("[0]"));
    fx_with_support(&f);
    fx_pod(&f, 1, 0, "Running");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n");
    assert_string_equal(jsonx_str(new_status(&f), "phase"), "Running");
    plan_free(&f.plan);
    free(f.desc);
    pod_terminated(f.pods[0], 0, NULL);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\nevent Normal Completed\n");
    assert_string_equal(jsonx_str(new_status(&f), "phase"), "Succeeded");
    fx_free(&f);
}

static void test_never_policy_fails_job(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":2,\"restartPolicy\":\"Never\"}", ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Running");
    pod_terminated(fx_pod(&f, 1, 0, "Running"), 3,
                   "{\"error\":\"data: bad magic in train-images\"}");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning WorkerFailed\n"
                                "delete-pod mnist-worker-0\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Failed");
    assert_cond(st, "Failed", "True/WorkerFailed");
    assert_string_equal(cond_message(st, "Failed"),
                        "worker 1 exited with code 3: data: bad magic in train-images");
    fx_free(&f);
}

static void test_on_failure_restarts_group_with_backoff(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC2, ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Running");
    pod_terminated(fx_pod(&f, 1, 0, "Running"), 1, "segfault-ish");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning WorkerFailed\n"
                                "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Restarting");
    assert_int_equal(jsonx_int(st, "attempt", -1), 1);
    assert_int_equal(jsonx_int(st, "restarts.application", -1), 1);
    assert_int_equal(jsonx_int(st, "restarts.disruption", -1), 0);
    assert_false(jsonx_bool(st, "launched", 1));
    assert_cond(st, "Restarting", "True/WorkerFailed");
    assert_close(f.plan.requeue_after, 10, 0);

    /* Next: the status as written, the old pods terminating: nothing to do but wait. */
    cJSON *job2 = cJSON_Duplicate(find_action(&f, ACTION_UPDATE_STATUS, "mnist")->object, 1);
    for (size_t i = 0; i < f.npods; i++)
        jsonx_set_str(jsonx_ensure_obj(f.pods[i], "metadata"), "deletionTimestamp",
                      "2027-01-15T08:00:00Z");
    cJSON_Delete(f.job);
    f.job = job2;
    plan_free(&f.plan);
    free(f.desc);
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n"); /* counts: failed 1 -> 0 */
    /* 10 s from the end of the second the restart was recorded in. */
    assert_close(f.plan.requeue_after, 9, 0);

    /* Pods gone but within the backoff: still waiting. */
    for (size_t i = 0; i < f.npods; i++)
        cJSON_Delete(f.pods[i]);
    f.npods = 0;
    cJSON *job3 = cJSON_Duplicate(find_action(&f, ACTION_UPDATE_STATUS, "mnist")->object, 1);
    cJSON_Delete(f.job);
    f.job = job3;
    plan_free(&f.plan);
    free(f.desc);
    fx_run(&f, NOW + 5);
    assert_string_equal(f.desc, "");
    assert_close(f.plan.requeue_after, 6, 0);

    /* After the backoff the group of attempt 1 is created. */
    plan_free(&f.plan);
    free(f.desc);
    fx_run(&f, NOW + 11);
    assert_string_equal(f.desc, "create-pod mnist-worker-0\n"
                                "create-pod mnist-worker-1\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    const cJSON *pod = find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object;
    assert_string_equal(
        jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), "kubetrain.dev/attempt"), "1");
    assert_string_equal(jsonx_str(new_status(&f), "phase"), "Restarting");
    fx_free(&f);
}

static void test_exit_code_policy(void **state)
{
    (void)state;
    static const struct {
        int code;
        const char *want;
    } cases[] = {
        {3, "update-status mnist\nevent Warning NonRetryableExitCode\ndelete-pod mnist-worker-0\n"},
        {2, "update-status mnist\nevent Warning NonRetryableExitCode\ndelete-pod mnist-worker-0\n"},
        {75, "update-status mnist\nevent Warning WorkerFailed\ndelete-pod mnist-worker-0\n"
             "delete-pod mnist-worker-1\n"},
        {137, "update-status mnist\nevent Warning WorkerFailed\ndelete-pod mnist-worker-0\n"
              "delete-pod mnist-worker-1\n"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        Fixture f = {.job = job_new("{\"workers\":2,\"restartPolicy\":\"ExitCode\","
                                    "\"recoveryTimeoutSeconds\":0}",
                                    ST_LAUNCHED(""))};
        fx_with_support(&f);
        fx_pod(&f, 0, 0, "Running");
        pod_terminated(fx_pod(&f, 1, 0, "Running"), cases[k].code, NULL);
        fx_run(&f, NOW);
        assert_string_equal(f.desc, cases[k].want);
        fx_free(&f);
    }
}

static void test_backoff_limit_exceeded(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":2,\"backoffLimit\":2}",
                                ST_LAUNCHED(",\"attempt\":2,\"restarts\":{\"application\":2,"
                                            "\"disruption\":0}"))};
    fx_with_support(&f);
    fx_pod(&f, 0, 2, "Running");
    pod_terminated(fx_pod(&f, 1, 2, "Running"), 75, NULL);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning BackoffLimitExceeded\n"
                                "delete-pod mnist-worker-0\n");
    assert_string_equal(jsonx_str(new_status(&f), "phase"), "Failed");
    assert_cond(new_status(&f), "Failed", "True/BackoffLimitExceeded");
    fx_free(&f);
    assert_close(reconcile_backoff_delay(&CFG, 1), 10, 0);
    assert_close(reconcile_backoff_delay(&CFG, 3), 40, 0);
    assert_close(reconcile_backoff_delay(&CFG, 30), 300, 0);
}

static void test_disruptions_never_fail(void **state)
{
    (void)state;
    /* Evicted, DisruptionTarget, deleted by someone else, or gone after launch: each
     * restarts the group under restartPolicy Never, counted as a disruption. */
    for (int k = 0; k < 4; k++) {
        Fixture f = {.job = job_new("{\"workers\":2,\"restartPolicy\":\"Never\","
                                    "\"recoveryTimeoutSeconds\":0}",
                                    ST_LAUNCHED(""))};
        fx_with_support(&f);
        fx_pod(&f, 0, 0, "Running");
        if (k < 3) {
            cJSON *p = fx_pod(&f, 1, 0, "Running");
            cJSON *st = jsonx_ensure_obj(p, "status");
            if (k == 0) {
                jsonx_set_str(st, "phase", "Failed");
                jsonx_set_str(st, "reason", "Evicted");
            } else if (k == 1) {
                pod_terminated(p, 137, NULL);
                jsonx_set(st, "conditions",
                          cJSON_Parse("[{\"type\":\"DisruptionTarget\",\"status\":\"True\","
                                      "\"reason\":\"PreemptionByScheduler\"}]"));
            } else {
                jsonx_set_str(jsonx_ensure_obj(p, "metadata"), "deletionTimestamp",
                              "2027-01-15T08:00:00Z");
            }
        }
        fx_run(&f, NOW);
        const char *want = k == 2   ? "update-status mnist\nevent Warning Disruption\n"
                                      "delete-pod mnist-worker-0\n"
                           : k == 3 ? "update-status mnist\nevent Warning Disruption\n"
                                      "delete-pod mnist-worker-0\n"
                                    : "update-status mnist\nevent Warning Disruption\n"
                                      "delete-pod mnist-worker-0\ndelete-pod mnist-worker-1\n";
        assert_string_equal(f.desc, want);
        const cJSON *st = new_status(&f);
        assert_string_equal(jsonx_str(st, "phase"), "Restarting");
        assert_int_equal(jsonx_int(st, "restarts.disruption", -1), 1);
        assert_int_equal(jsonx_int(st, "restarts.application", -1), 0);
        assert_true(f.plan.requeue_after < 0);
        fx_free(&f);
    }
}

static void test_missing_pod_before_launch_is_created(void **state)
{
    (void)state;
    /* The operator stopped after creating worker 0 only: worker 1 is created, no restart. */
    Fixture f = {.job = job_new(SPEC2, "{\"phase\":\"Pending\"}")};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Pending");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-pod mnist-worker-1\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    assert_true(jsonx_bool(new_status(&f), "launched", 0));
    fx_free(&f);
}

static void test_deadline(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":2,\"activeDeadlineSeconds\":150}", ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Running");
    fx_pod(&f, 1, 0, "Running");
    fx_run(&f, NOW); /* started 100 s ago */
    assert_string_equal(f.desc, "update-status mnist\n");
    assert_close(f.plan.requeue_after, 50, 0);
    plan_free(&f.plan);
    free(f.desc);
    fx_run(&f, NOW + 50);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning DeadlineExceeded\n"
                                "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n");
    assert_cond(new_status(&f), "Failed", "True/DeadlineExceeded");
    fx_free(&f);
}

static void test_ttl_and_clean_pod_policy(void **state)
{
    (void)state;
    const char *done = "{\"phase\":\"Succeeded\",\"completionTime\":\"2027-01-15T07:59:50Z\","
                       "\"observedGeneration\":3}";
    Fixture f = {.job = job_new("{\"workers\":2,\"ttlSecondsAfterFinished\":60}", done)};
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "");
    assert_close(f.plan.requeue_after, 50, 0);
    fx_free(&f);

    f = (Fixture){.job = job_new("{\"workers\":2,\"ttlSecondsAfterFinished\":5}", done)};
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "delete-job mnist\n");
    fx_free(&f);

    /* cleanPodPolicy All deletes finished pods too; None keeps everything. */
    f = (Fixture){.job = job_new("{\"workers\":2,\"cleanPodPolicy\":\"All\"}", done)};
    pod_terminated(fx_pod(&f, 0, 0, "Running"), 0, NULL);
    fx_pod(&f, 1, 0, "Running");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "delete-pod mnist-worker-0\ndelete-pod mnist-worker-1\n");
    fx_free(&f);
    f = (Fixture){.job = job_new("{\"workers\":2,\"cleanPodPolicy\":\"None\"}", done)};
    fx_pod(&f, 1, 0, "Running");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "");
    fx_free(&f);
}

static void test_suspend_and_resume(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":2,\"suspend\":true}", ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Running");
    fx_pod(&f, 1, 0, "Running");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Suspended\n"
                                "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Suspended");
    assert_int_equal(jsonx_int(st, "attempt", -1), 1);
    assert_cond(st, "Suspended", "True/Suspended");

    /* Resume once the pods are gone: attempt 1 starts, the deadline clock restarts. */
    cJSON *job2 = cJSON_Duplicate(find_action(&f, ACTION_UPDATE_STATUS, "mnist")->object, 1);
    jsonx_set_bool(jsonx_ensure_obj(job2, "spec"), "suspend", 0);
    Fixture g = {.job = job2};
    fx_with_support(&g);
    fx_run(&g, NOW + 100);
    assert_string_equal(g.desc, "event Normal Resumed\n"
                                "create-pod mnist-worker-0\n"
                                "create-pod mnist-worker-1\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    st = new_status(&g);
    assert_string_equal(jsonx_str(st, "phase"), "Pending");
    assert_string_equal(jsonx_str(st, "startTime"), "2027-01-15T08:01:40Z");
    assert_cond(st, "Suspended", "False/Resumed");
    fx_free(&f);
    fx_free(&g);
}

static void test_workers_change_restarts_group(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC2, ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Running");
    fx_pod(&f, 1, 0, "Running");
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 3);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning WorkersChanged\n"
                                "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n");
    const cJSON *st = new_status(&f);
    assert_int_equal(jsonx_int(st, "attempt", -1), 1);
    assert_null(jsonx_at(st, "restarts"));
    /* The old attempt's workers are not the job's any more: none runs until the new ones
     * do (kubectl scale reads 0 of 3). */
    assert_int_equal(jsonx_int(st, "currentWorkers", -1), 0);
    fx_free(&f);
}

static void test_stale_and_foreign_pods(void **state)
{
    (void)state;
    /* A restart was recorded but the operator stopped before deleting the old pods. */
    Fixture f = {.job = job_new(SPEC2, "{\"phase\":\"Restarting\",\"attempt\":1}")};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Running");
    fx_pod(&f, 1, 0, "Running");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n"
                                "update-status mnist\n");
    fx_free(&f);

    /* A pod of an older job of the same name (another uid) is neither counted nor
     * deleted; its name blocks creation until the garbage collector removes it. */
    f = (Fixture){.job = job_new(SPEC2, NULL)};
    cJSON *p = fx_pod(&f, 0, 0, "Running");
    cJSON *ref = cJSON_GetArrayItem(jsonx_arr(p, "metadata.ownerReferences"), 0);
    jsonx_set_str(ref, "uid", "uid-old");
    fx_with_support(&f);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n");
    fx_free(&f);
}

/* The ring key's Secret (issue 23): the operator never reads Secrets, so a Secret named
 * like the job's, made beforehand by someone who then knows its key, must never be the
 * one the pods use. Its name is generated by the API server at creation, recorded in
 * status, and the pods name that one; a job whose status names none gets a new one and
 * no pods until it is recorded, whatever exists in the namespace. */
static void test_secret_is_never_adopted(void **state)
{
    (void)state;
    /* A job an operator that used "<job>-secret" began: it gets a Secret of its own. */
    Fixture f = {.job = job_new(SPEC2, "{\"observedGeneration\":3,\"phase\":\"Pending\"}")};
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(f.job, &s, err, sizeof err), 0);
    f.service = desired_service(&s);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-secret mnist-secret-\n"
                                "update-status mnist\n");
    const cJSON *sec = find_action(&f, ACTION_CREATE_SECRET, "mnist-secret-")->object;
    assert_string_equal(jsonx_str(sec, "metadata.generateName"), "mnist-secret-");
    assert_null(jsonx_at(sec, "metadata.name"));
    fx_apply(&f);
    assert_string_equal(jsonx_str(f.job, "status.secretName"), SECRET);

    /* The pods (and an inline model's volume) name the recorded Secret. */
    fx_free(&f);
    f = (Fixture){
        .job = job_new("{\"workers\":1,\"model\":{\"layers\":[{\"type\":\"Flatten\"}]}}", NULL)};
    fx_with_support(&f);
    fx_run(&f, NOW);
    const cJSON *pod = find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object;
    const cJSON *e, *v;
    int refs = 0;
    cJSON_ArrayForEach(e, jsonx_arr(container(pod, "trainer"), "env"))
    {
        const char *n = jsonx_str(e, "valueFrom.secretKeyRef.name");
        if (n) refs++, assert_string_equal(n, SECRET);
    }
    cJSON_ArrayForEach(v, jsonx_arr(pod, "spec.volumes"))
    {
        const char *n = jsonx_str(v, "secret.secretName");
        if (n) refs++, assert_string_equal(n, SECRET);
    }
    assert_int_equal(refs, 2);
    fx_free(&f);
}

static void test_invalid_spec(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "{\"workers\":2,\"collective\":\"nccl\"}",
        "{\"workers\":0}",
        "{\"workers\":1025}", /* regression (fuzz-reconcile): 2300 workers took minutes */
        "{\"workers\":\"two\"}",
        "{\"workers\":2,\"restartPolicy\":\"Always\"}",
        "{\"workers\":2,\"template\":{\"spec\":{\"containers\":{}}}}",
        "{\"workers\":2,\"checkpoint\":{\"claimName\":\"c\",\"path\":\"rel\"}}",
        "{\"command\":[\"python3\",\"mwms.py\"]}",            /* no image */
        "{\"image\":\"tf:1\",\"args\":[\"--epochs\",\"2\"]}", /* args without command */
        "{\"image\":\"tf:1\",\"command\":[]}",
        "{\"image\":\"tf:1\",\"command\":\"python3 mwms.py\"}",
        "{\"image\":\"tf:1\",\"command\":[\"python3\"],\"args\":[2]}",
        "{\"workers\":1,\"model\":{\"name\":\"mnist\"}}",
        "{\"workers\":1,\"model\":{\"class_name\":\"Sequential\"}}", /* no config */
        "{\"workers\":1,\"model\":{\"class_name\":7,\"config\":{}}}",
        "[]",
    };
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        Fixture f = {.job = job_new(specs[k], NULL)};
        fx_run(&f, NOW);
        assert_string_equal(f.desc, "event Warning InvalidSpec\nupdate-status mnist\n");
        assert_cond(new_status(&f), "Invalid", "True/InvalidSpec");
        /* Written once: the next reconcile neither repeats the event nor the write. */
        cJSON *job2 = cJSON_Duplicate(find_action(&f, ACTION_UPDATE_STATUS, "mnist")->object, 1);
        Fixture g = {.job = job2};
        fx_run(&g, NOW + 1);
        assert_string_equal(g.desc, "");
        fx_free(&f);
        fx_free(&g);
    }
    /* A name too long for the hostnames of its workers. */
    Fixture f = {.job = job_new("{\"workers\":10}", NULL)};
    jsonx_set_str(jsonx_ensure_obj(f.job, "metadata"), "name",
                  "a-very-long-training-job-name-that-is-fine-for-etcd-but-not-dns");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "event Warning InvalidSpec\nupdate-status a-very-long-training-"
                                "job-name-that-is-fine-for-etcd-but-not-dns\n");
    fx_free(&f);
}

static void test_malformed_pods_do_not_crash(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC2, "{\"phase\":\"Pending\"}")};
    fx_with_support(&f);
    static const char *const bad[] = {
        "{\"metadata\":{\"name\":\"mnist-worker-0\",\"labels\":\"oops\"}}",
        "{\"metadata\":{\"name\":7,\"annotations\":[1]},\"status\":{\"phase\":5,"
        "\"conditions\":{},\"containerStatuses\":[3,{\"name\":\"trainer\",\"state\":[]}]}}",
        "[]",
        "{\"metadata\":{\"name\":\"mnist-worker-1\",\"labels\":{\"kubetrain.dev/replica-index\":"
        "\"1x\"},\"ownerReferences\":[{\"uid\":\"uid-1\",\"controller\":\"yes\"}]}}",
    };
    for (size_t i = 0; i < 4; i++)
        f.pods[f.npods++] = cJSON_Parse(bad[i]);
    fx_run(&f, NOW);
    /* None of them is a current worker: the named ones are deleted as stale and
     * creation waits until they are gone. */
    assert_string_equal(f.desc, "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n"
                                "update-status mnist\n");
    fx_free(&f);
}

static void test_template_merge_gpus_domain(void **state)
{
    (void)state;
    Fixture f = {
        .job = job_new(
            "{\"workers\":1,\"gpusPerWorker\":2,\"collective\":\"nccl\",\"image\":\"img:1\","
            "\"model\":{\"layers\":[{\"type\":\"dense\",\"units\":10}]},"
            "\"template\":{\"metadata\":{\"labels\":{\"team\":\"ml\","
            "\"kubetrain.dev/role\":\"x\"}},\"spec\":{\"securityContext\":"
            "{\"runAsUser\":0},\"nodeSelector\":{\"gpu\":\"a100\"},\"containers\":["
            "{\"name\":\"sidecar\",\"image\":\"busybox\"},{\"name\":\"trainer\","
            "\"image\":\"ignored\",\"env\":[{\"name\":\"TF_CONFIG\",\"value\":\"x\"},"
            "{\"name\":\"EXTRA\",\"value\":\"1\"}]}]}}}",
            NULL)};
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(f.job, &s, err, sizeof err), 0);
    DesiredConfig dc = {.trainer_image = "def", .cluster_domain = "cluster.local"};
    cJSON *pod = desired_pod(&s, &dc, SECRET, ROLE_WORKER, 0, 4);
    assert_non_null(pod);
    const cJSON *c = container(pod, "trainer");
    assert_string_equal(jsonx_str(c, "image"), "img:1");
    const cJSON *lim = jsonx_obj(c, "resources.limits");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(lim, "nvidia.com/gpu")->valuestring, "2");
    /* two GPUs: the trainer runs two ranks in the pod */
    const cJSON *gargs = jsonx_arr(c, "args"), *gpw = NULL;
    for (const cJSON *a = gargs ? gargs->child : NULL; a && a->next; a = a->next)
        if (cJSON_IsString(a) && !strcmp(a->valuestring, "--gpus-per-worker")) gpw = a->next;
    assert_non_null(gpw);
    assert_string_equal(gpw->valuestring, "2");
    assert_string_equal(env_of(pod, "TF_CONFIG"),
                        "{\"cluster\":{\"worker\":[\"mnist-worker-0.mnist-worker.default.svc."
                        "cluster.local:2222\"]},\"task\":{\"type\":\"worker\",\"index\":0}}");
    assert_string_equal(env_of(pod, "EXTRA"), "1");
    assert_non_null(container(pod, "sidecar"));
    assert_string_equal(jsonx_str(pod, "spec.nodeSelector.gpu"), "a100");
    const cJSON *labels = jsonx_obj(pod, "metadata.labels");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(labels, "team")->valuestring, "ml");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(labels, "kubetrain.dev/role")->valuestring,
                        "worker");
    /* The template chose root: no runAsNonRoot default that would contradict it. */
    assert_null(jsonx_at(pod, "spec.securityContext.runAsNonRoot"));
    assert_int_equal(jsonx_int(pod, "spec.securityContext.runAsUser", -1), 0);
    /* The inline model is mounted from the Secret. */
    const cJSON *args = jsonx_arr(c, "args");
    assert_string_equal(cJSON_GetArrayItem(args, 2)->valuestring, "/etc/kubetrain/model.json");
    cJSON *sec = desired_secret(&s, (const unsigned char[32]){0});
    assert_non_null(cJSON_GetObjectItemCaseSensitive(jsonx_obj(sec, "data"), "model.json"));
    cJSON_Delete(sec);
    cJSON_Delete(pod);
    fx_free(&f);
}

/* spec.command: the user's program in spec.image, with the job's environment and none
 * of the trainer's options (no trainer flags, no collective, no ring key, no model). */
static void test_user_command(void **state)
{
    (void)state;
    Fixture f = {
        .job =
            job_new("{\"workers\":2,\"image\":\"kubetrain/tensorflow:1\",\"gpusPerWorker\":1,"
                    "\"command\":[\"python3\",\"mwms.py\"],\"args\":[\"--epochs\",\"2\"],"
                    "\"model\":{\"layers\":[{\"type\":\"dense\",\"units\":10}]},"
                    "\"training\":{\"epochs\":9},\"checkpoint\":{\"claimName\":\"ckpt\"},"
                    "\"template\":{\"spec\":{\"containers\":[{\"name\":\"trainer\","
                    "\"command\":[\"ignored\"],\"env\":[{\"name\":\"EXTRA\",\"value\":\"1\"}]}]}}}",
                    NULL)};
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(f.job, &s, err, sizeof err), 0);
    cJSON *pod = desired_pod(&s, &CFG.desired, SECRET, ROLE_WORKER, 1, 0);
    assert_non_null(pod);
    const cJSON *c = container(pod, "trainer");
    assert_string_equal(jsonx_str(c, "image"), "kubetrain/tensorflow:1");
    char *cmd = cJSON_PrintUnformatted(jsonx_arr(c, "command"));
    char *args = cJSON_PrintUnformatted(jsonx_arr(c, "args"));
    assert_string_equal(cmd, "[\"python3\",\"mwms.py\"]");
    assert_string_equal(args, "[\"--epochs\",\"2\"]");
    free(cmd);
    free(args);
    /* Exactly the job's environment, beside the template's own. */
    const char *want[] = {"EXTRA", "TF_CONFIG", "KUBETRAIN_JOB", "KUBETRAIN_NAMESPACE",
                          "KUBETRAIN_CHECKPOINT_DIR"};
    const cJSON *env = jsonx_arr(c, "env");
    assert_int_equal(cJSON_GetArraySize(env), 5);
    for (int i = 0; i < 5; i++)
        assert_string_equal(jsonx_str(cJSON_GetArrayItem(env, i), "name"), want[i]);
    assert_string_equal(env_of(pod, "KUBETRAIN_CHECKPOINT_DIR"), "/checkpoints/mnist");
    assert_string_equal(
        env_of(pod, "TF_CONFIG"),
        "{\"cluster\":{\"worker\":[\"mnist-worker-0.mnist-worker.default.svc:2222\","
        "\"mnist-worker-1.mnist-worker.default.svc:2222\"]},"
        "\"task\":{\"type\":\"worker\",\"index\":1}}");
    /* The checkpoint claim is mounted, the model Secret is not; the log tail is the
     * termination message of a failed program; the GPUs are still asked for. */
    const cJSON *vols = jsonx_arr(pod, "spec.volumes");
    assert_int_equal(cJSON_GetArraySize(vols), 1);
    assert_string_equal(jsonx_str(cJSON_GetArrayItem(vols, 0), "name"), "checkpoints");
    assert_string_equal(jsonx_str(c, "terminationMessagePolicy"), "FallbackToLogsOnError");
    const cJSON *lim = jsonx_obj(c, "resources.limits");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(lim, "nvidia.com/gpu")->valuestring, "1");
    /* The program listens on spec.port, declared on its container. */
    const cJSON *port = cJSON_GetArrayItem(jsonx_arr(c, "ports"), 0);
    assert_int_equal(jsonx_int(port, "containerPort", -1), 2222);
    cJSON_Delete(pod);
    fx_free(&f);
}

/* The C trainer serves /metrics by default (the operator reads the chief's for
 * status.progress): KUBETRAIN_METRICS_PORT, the container port `metrics` and the pod's
 * kubetrain.dev/metrics-port annotation, all DESIRED_METRICS_PORT; a template's own
 * KUBETRAIN_METRICS_PORT is kept and named, "0" turns it all off; a user's program
 * (spec.command) whose template declares no port `metrics` gets none of it. */
static void test_metrics_port_defaults(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *env; /* env: KUBETRAIN_METRICS_PORT, NULL: unset */
        int port;               /* the `metrics` container port, -1: none */
        const char *annot;      /* NULL: no annotation */
        int grace;              /* the pod's terminationGracePeriodSeconds, -1: unset */
    } cases[] = {
        {"{\"workers\":2}", "9090", 9090, "9090", -1},
        /* The grace period that lets the chief save on SIGTERM passes through. */
        {"{\"workers\":2,\"template\":{\"spec\":{\"terminationGracePeriodSeconds\":120,"
         "\"containers\":[{\"name\":\"trainer\","
         "\"env\":[{\"name\":\"KUBETRAIN_METRICS_PORT\",\"value\":\"9100\"}]}]}}}",
         "9100", 9100, "9100", 120},
        {"{\"workers\":2,\"template\":{\"spec\":{\"containers\":[{\"name\":\"trainer\","
         "\"env\":[{\"name\":\"KUBETRAIN_METRICS_PORT\",\"value\":\"0\"}]}]}}}",
         "0", -1, NULL, -1},
        {"{\"workers\":2,\"image\":\"tf:1\",\"command\":[\"python\",\"train.py\"]}", NULL, -1, NULL,
         -1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cJSON *job = job_new(cases[k].spec, NULL);
        JobSpec s;
        char err[256];
        assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
        DesiredConfig dc = {.trainer_image = "def"};
        cJSON *pod = desired_pod(&s, &dc, SECRET, ROLE_WORKER, 0, 0);
        assert_non_null(pod);
        assert_int_equal(jsonx_int(pod, "spec.terminationGracePeriodSeconds", -1), cases[k].grace);
        const char *env = env_of(pod, "KUBETRAIN_METRICS_PORT");
        if (cases[k].env)
            assert_string_equal(env, cases[k].env);
        else
            assert_null(env);
        int port = -1;
        const cJSON *p;
        cJSON_ArrayForEach(p, jsonx_arr(container(pod, "trainer"), "ports"))
        {
            if (!strcmp(jsonx_str(p, "name"), "metrics"))
                port = (int)jsonx_int(p, "containerPort", -1);
        }
        assert_int_equal(port, cases[k].port);
        const char *annot = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            jsonx_obj(pod, "metadata.annotations"), ANNOT_METRICS_PORT));
        if (cases[k].annot)
            assert_string_equal(annot, cases[k].annot);
        else
            assert_null(annot);
        cJSON_Delete(pod);
        cJSON_Delete(job);
    }
}

/* A user's program (spec.command, a TensorFlow job with the kubetrain package) serves
 * /metrics only when spec.template declares the port `metrics`: then every pod gets
 * KUBETRAIN_METRICS_PORT and the annotation the progress thread scrapes the chief by, and
 * the NetworkPolicy admits that port from any namespace; a template's
 * KUBETRAIN_METRICS_PORT=0 still turns it off. Without the port, none of it. */
static void test_user_program_metrics_port(void **state)
{
    (void)state;
    static const struct {
        const char *tmpl; /* spec.template */
        const char *env, *annot;
        int policy_port; /* the NetworkPolicy's second rule's port; 0: no second rule */
    } cases[] = {
        {"{\"spec\":{\"containers\":[{\"name\":\"trainer\",\"ports\":[{\"name\":\"metrics\","
         "\"containerPort\":9100}]}]}}",
         "9100", "9100", 9100},
        {"{\"spec\":{\"containers\":[{\"name\":\"trainer\",\"ports\":[{\"name\":\"metrics\","
         "\"containerPort\":9100}],\"env\":[{\"name\":\"KUBETRAIN_METRICS_PORT\",\"value\":\"0\"}]}"
         "]}}",
         "0", NULL, 9100},
        {"{\"spec\":{\"containers\":[{\"name\":\"trainer\",\"ports\":[{\"name\":\"http\","
         "\"containerPort\":8080}]}]}}",
         NULL, NULL, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char spec[1024];
        snprintf(spec, sizeof spec,
                 "{\"workers\":2,\"image\":\"tf:1\",\"command\":[\"python3\",\"mwms.py\"],"
                 "\"networkPolicy\":true,\"template\":%s}",
                 cases[k].tmpl);
        cJSON *job = job_new(spec, NULL);
        JobSpec s;
        char err[256];
        assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
        DesiredConfig dc = {.trainer_image = "def"};
        for (int i = 0; i < 2; i++) {
            cJSON *pod = desired_pod(&s, &dc, SECRET, ROLE_WORKER, i, 0);
            assert_non_null(pod);
            const char *env = env_of(pod, "KUBETRAIN_METRICS_PORT");
            const char *annot = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                jsonx_obj(pod, "metadata.annotations"), ANNOT_METRICS_PORT));
            if (cases[k].env)
                assert_string_equal(env, cases[k].env);
            else
                assert_null(env);
            if (cases[k].annot)
                assert_string_equal(annot, cases[k].annot);
            else
                assert_null(annot);
            cJSON_Delete(pod);
        }
        cJSON *np = desired_network_policy(&s);
        assert_non_null(np);
        const cJSON *ingress = jsonx_at(np, "spec.ingress");
        assert_int_equal(cJSON_GetArraySize(ingress), cases[k].policy_port ? 2 : 1);
        if (cases[k].policy_port) {
            const cJSON *rule = cJSON_GetArrayItem(ingress, 1);
            assert_int_equal(jsonx_int(cJSON_GetArrayItem(jsonx_at(rule, "ports"), 0), "port", -1),
                             cases[k].policy_port);
            assert_non_null(
                jsonx_at(cJSON_GetArrayItem(jsonx_at(rule, "from"), 0), "namespaceSelector"));
        }
        cJSON_Delete(np);
        cJSON_Delete(job);
    }
}

/* A port `metrics` declared in a role's own template (spec.chief.template) is that role's:
 * the chief's pod gets KUBETRAIN_METRICS_PORT and the annotation the progress thread
 * scrapes it by, the workers (spec.template, no port) get neither; the NetworkPolicy
 * admits every role's port, once each. */
static void test_role_template_metrics_port(void **state)
{
    (void)state;
    const char *spec =
        "{\"workers\":2,\"image\":\"tf:1\",\"command\":[\"python3\",\"ps.py\"],"
        "\"networkPolicy\":true,\"chief\":{\"template\":{\"spec\":{\"containers\":[{\"name\":"
        "\"trainer\",\"ports\":[{\"name\":\"metrics\",\"containerPort\":9100}]}]}}},"
        "\"ps\":{\"replicas\":2},\"evaluator\":{\"template\":{\"spec\":{\"containers\":[{"
        "\"name\":\"trainer\",\"ports\":[{\"name\":\"metrics\",\"containerPort\":9200}]}]}}},"
        "\"template\":{\"spec\":{\"containers\":[{\"name\":\"trainer\",\"ports\":[{\"name\":"
        "\"http\",\"containerPort\":8080}]}]}}}";
    cJSON *job = job_new(spec, NULL);
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
    DesiredConfig dc = {.trainer_image = "def"};
    static const struct {
        Role role;
        const char *port; /* KUBETRAIN_METRICS_PORT and the annotation; NULL: neither */
    } pods[] = {
        {ROLE_CHIEF, "9100"}, {ROLE_WORKER, NULL}, {ROLE_PS, NULL}, {ROLE_EVALUATOR, "9200"}};
    for (size_t k = 0; k < sizeof pods / sizeof pods[0]; k++) {
        cJSON *pod = desired_pod(&s, &dc, SECRET, pods[k].role, 0, 0);
        assert_non_null(pod);
        const char *env = env_of(pod, "KUBETRAIN_METRICS_PORT");
        const char *annot = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            jsonx_obj(pod, "metadata.annotations"), ANNOT_METRICS_PORT));
        if (pods[k].port) {
            assert_string_equal(env, pods[k].port);
            assert_string_equal(annot, pods[k].port);
        } else {
            assert_null(env);
            assert_null(annot);
        }
        cJSON_Delete(pod);
    }
    cJSON *np = desired_network_policy(&s);
    assert_non_null(np);
    const cJSON *ingress = jsonx_at(np, "spec.ingress");
    assert_int_equal(cJSON_GetArraySize(ingress), 2);
    const cJSON *ports = jsonx_at(cJSON_GetArrayItem(ingress, 1), "ports");
    assert_int_equal(cJSON_GetArraySize(ports), 2);
    assert_int_equal(jsonx_int(cJSON_GetArrayItem(ports, 0), "port", -1), 9100);
    assert_int_equal(jsonx_int(cJSON_GetArrayItem(ports, 1), "port", -1), 9200);
    cJSON_Delete(np);
    cJSON_Delete(job);
}

/* The chief's /metrics as examples/job-metrics.yaml asks for it: the template's env and
 * its port named "metrics" stay on the trainer container beside the operator's
 * "collective" port, and only worker 0 carries the labels the chart's PodMonitor selects
 * (charts/kubetrain/templates/podmonitor.yaml). */
static void test_template_metrics_port(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":2,\"template\":{\"spec\":{\"containers\":[{\"name\":"
                                "\"trainer\",\"env\":[{\"name\":\"KUBETRAIN_METRICS_PORT\","
                                "\"value\":\"9090\"}],\"ports\":[{\"name\":\"metrics\","
                                "\"containerPort\":9090}]}]}}}",
                                NULL)};
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(f.job, &s, err, sizeof err), 0);
    DesiredConfig dc = {.trainer_image = "def"};
    for (int i = 0; i < 2; i++) {
        cJSON *pod = desired_pod(&s, &dc, SECRET, ROLE_WORKER, i, 0);
        assert_non_null(pod);
        assert_string_equal(env_of(pod, "KUBETRAIN_METRICS_PORT"), "9090");
        assert_non_null(env_of(pod, "TF_CONFIG"));
        const cJSON *ports = jsonx_arr(container(pod, "trainer"), "ports");
        assert_int_equal(cJSON_GetArraySize(ports), 2);
        int metrics = -1, collective = -1;
        const cJSON *p;
        cJSON_ArrayForEach(p, ports)
        {
            if (!strcmp(jsonx_str(p, "name"), "metrics"))
                metrics = (int)jsonx_int(p, "containerPort", -1);
            if (!strcmp(jsonx_str(p, "name"), "collective"))
                collective = (int)jsonx_int(p, "containerPort", -1);
        }
        assert_int_equal(metrics, 9090);
        assert_int_equal(collective, 2222);
        const cJSON *labels = jsonx_obj(pod, "metadata.labels");
#define LABEL(k) cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(labels, k))
        assert_string_equal(LABEL("app.kubernetes.io/managed-by"), "kubetrain-operator");
        assert_string_equal(LABEL("kubetrain.dev/role"), "worker");
        assert_string_equal(LABEL("kubetrain.dev/replica-index"), i == 0 ? "0" : "1");
        assert_string_equal(LABEL("kubetrain.dev/job-name"), "mnist");
#undef LABEL
        cJSON_Delete(pod);
    }
    fx_free(&f);
}

/* spec.networkPolicy: the policy is created before the pods, admits only the job's
 * worker pods on the job's port, and goes when the field is turned off. */
static void test_network_policy(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":2,\"port\":2345,\"networkPolicy\":true}", NULL)};
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-secret mnist-secret-\n"
                                "create-service mnist-worker\n"
                                "create-network-policy mnist-worker\n"
                                "update-status mnist\n");
    fx_apply(&f);
    const cJSON *np = f.netpol;
    assert_non_null(np);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-pod mnist-worker-0\n"
                                "create-pod mnist-worker-1\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    assert_string_equal(jsonx_str(np, "apiVersion"), "networking.k8s.io/v1");
    assert_string_equal(jsonx_str(np, "kind"), "NetworkPolicy");
    const cJSON *ref = cJSON_GetArrayItem(jsonx_at(np, "metadata.ownerReferences"), 0);
    assert_string_equal(jsonx_str(ref, "uid"), "uid-1");
    assert_true(jsonx_bool(ref, "controller", 0));
    const cJSON *rule = cJSON_GetArrayItem(jsonx_at(np, "spec.ingress"), 0);
    const cJSON *from = cJSON_GetArrayItem(jsonx_at(rule, "from"), 0);
    const cJSON *port = cJSON_GetArrayItem(jsonx_at(rule, "ports"), 0);
    const cJSON *types = jsonx_at(np, "spec.policyTypes");
    assert_int_equal(cJSON_GetArraySize(types), 1);
    assert_string_equal(cJSON_GetArrayItem(types, 0)->valuestring, "Ingress");
    const cJSON *sel[2] = {jsonx_obj(np, "spec.podSelector.matchLabels"),
                           jsonx_obj(from, "podSelector.matchLabels")};
    /* Every pod the selectors pick carries these labels. */
    const cJSON *pod = find_action(&f, ACTION_CREATE_POD, "mnist-worker-1")->object;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cJSON_GetArraySize(sel[i]), 2);
        const cJSON *kv;
        cJSON_ArrayForEach(kv, sel[i])
        {
            const cJSON *l =
                cJSON_GetObjectItemCaseSensitive(jsonx_obj(pod, "metadata.labels"), kv->string);
            assert_non_null(l);
            assert_string_equal(l->valuestring, kv->valuestring);
        }
    }
    assert_string_equal(
        cJSON_GetObjectItemCaseSensitive(sel[0], "kubetrain.dev/job-name")->valuestring, "mnist");
    /* The C trainer's chief serves /metrics by default (DESIRED_METRICS_PORT), which the
     * operator reads for status.progress: a second rule admits that port. */
    assert_int_equal(cJSON_GetArraySize(jsonx_at(np, "spec.ingress")), 2);
    const cJSON *mrule = cJSON_GetArrayItem(jsonx_at(np, "spec.ingress"), 1);
    assert_int_equal(jsonx_int(cJSON_GetArrayItem(jsonx_at(mrule, "ports"), 0), "port", -1),
                     DESIRED_METRICS_PORT);
    assert_int_equal(cJSON_GetArraySize(jsonx_at(rule, "from")), 1);
    assert_int_equal(cJSON_GetArraySize(jsonx_at(rule, "ports")), 1);
    assert_int_equal(jsonx_int(port, "port", -1), 2345);
    assert_string_equal(jsonx_str(port, "protocol"), "TCP");

    /* Observed: nothing more to create. */
    cJSON_Delete(f.job);
    f.job = job_new("{\"workers\":2,\"port\":2345,\"networkPolicy\":true}", ST_LAUNCHED(""));
    jsonx_set_str(jsonx_ensure_obj(f.job, "status"), "secretName", SECRET);
    for (int i = 0; i < 2; i++)
        fx_pod(&f, i, 0, "Running");
    plan_free(&f.plan);
    free(f.desc);
    fx_run(&f, NOW);
    assert_null(strstr(f.desc, "network-policy"));

    /* Turned off: deleted. */
    cJSON_Delete(f.job);
    f.job = job_new("{\"workers\":2,\"port\":2345,\"networkPolicy\":false}", ST_LAUNCHED(""));
    jsonx_set_str(jsonx_ensure_obj(f.job, "status"), "secretName", SECRET);
    plan_free(&f.plan);
    free(f.desc);
    fx_run(&f, NOW);
    assert_non_null(strstr(f.desc, "delete-network-policy mnist-worker\n"));
    fx_free(&f);

    /* With the chief's metrics port declared (examples/job-metrics.yaml): a second rule
     * admits that port, and only it, from pods of any namespace (issue 23: the policy
     * blocked Prometheus). */
    Fixture m = {.job = job_new("{\"workers\":2,\"networkPolicy\":true,\"template\":{\"spec\":"
                                "{\"containers\":[{\"name\":\"trainer\",\"ports\":[{\"name\":"
                                "\"metrics\",\"containerPort\":9090}]}]}}}",
                                NULL)};
    fx_run(&m, NOW);
    np = find_action(&m, ACTION_CREATE_NETWORK_POLICY, "mnist-worker")->object;
    const cJSON *ingress = jsonx_at(np, "spec.ingress");
    assert_int_equal(cJSON_GetArraySize(ingress), 2);
    const cJSON *r0 = cJSON_GetArrayItem(ingress, 0), *r1 = cJSON_GetArrayItem(ingress, 1);
    assert_int_equal(jsonx_int(cJSON_GetArrayItem(jsonx_at(r0, "ports"), 0), "port", -1), 2222);
    assert_non_null(jsonx_obj(cJSON_GetArrayItem(jsonx_at(r0, "from"), 0), "podSelector"));
    assert_int_equal(cJSON_GetArraySize(jsonx_at(r1, "ports")), 1);
    assert_int_equal(jsonx_int(cJSON_GetArrayItem(jsonx_at(r1, "ports"), 0), "port", -1), 9090);
    assert_string_equal(jsonx_str(cJSON_GetArrayItem(jsonx_at(r1, "ports"), 0), "protocol"), "TCP");
    assert_int_equal(cJSON_GetArraySize(jsonx_at(r1, "from")), 1);
    const cJSON *peer = cJSON_GetArrayItem(jsonx_at(r1, "from"), 0);
    assert_int_equal(cJSON_GetArraySize(peer), 1); /* no podSelector: any pod there */
    const cJSON *nsel = jsonx_obj(peer, "namespaceSelector");
    assert_non_null(nsel);
    assert_int_equal(cJSON_GetArraySize(nsel), 0);
    fx_free(&m);

    /* Not a boolean: Invalid, nothing created. */
    Fixture g = {.job = job_new("{\"workers\":2,\"networkPolicy\":\"yes\"}", NULL)};
    fx_run(&g, NOW);
    assert_null(strstr(g.desc, "create-"));
    char *st = cJSON_PrintUnformatted(new_status(&g));
    assert_non_null(strstr(st, "spec.networkPolicy"));
    free(st);
    fx_free(&g);
}

/* ------------------------------------------------------------------------------------
 * Crash safety: the operator stopped after any prefix of any plan, then restarted. */

/* Applies the plan's first `k` actions to the fixture, as the API server would. */
static void apply_prefix(Fixture *f, size_t k)
{
    int created = 0;
    for (size_t i = 0; i < k && i < f->plan.n; i++) {
        const Action *a = &f->plan.actions[i];
        switch (a->kind) {
        case ACTION_CREATE_SECRET: /* the controller carries its name to the status update */
            f->secrets++;
            created = 1;
            break;
        case ACTION_CREATE_SERVICE:
            if (!f->service) f->service = cJSON_Duplicate(a->object, 1);
            break;
        case ACTION_CREATE_POD: {
            int exists = 0;
            for (size_t j = 0; j < f->npods; j++)
                exists |= strcmp(jsonx_str(f->pods[j], "metadata.name"), a->name) == 0;
            if (exists) break; /* AlreadyExists */
            assert_true(f->npods < 16);
            cJSON *p = cJSON_Duplicate(a->object, 1);
            jsonx_set_str(jsonx_ensure_obj(p, "metadata"), "uid", a->name);
            jsonx_set_str(jsonx_ensure_obj(p, "status"), "phase", "Pending");
            f->pods[f->npods++] = p;
            break;
        }
        case ACTION_DELETE_POD:
        case ACTION_DELETE_STOPPED_POD:
        case ACTION_FORCE_DELETE_POD:
            /* Unscheduled pods go at once (no kubelet to wait for). */
            for (size_t j = 0; j < f->npods; j++) {
                if (strcmp(jsonx_str(f->pods[j], "metadata.name"), a->name) != 0) continue;
                cJSON_Delete(f->pods[j]);
                f->pods[j] = f->pods[--f->npods];
                break;
            }
            break;
        case ACTION_UPDATE_STATUS:
            cJSON_Delete(f->job);
            f->job = cJSON_Duplicate(a->object, 1);
            if (created) jsonx_set_str(jsonx_ensure_obj(f->job, "status"), "secretName", SECRET);
            break;
        case ACTION_CREATE_NETWORK_POLICY:
            if (!f->netpol) f->netpol = cJSON_Duplicate(a->object, 1);
            break;
        case ACTION_DELETE_NETWORK_POLICY:
            cJSON_Delete(f->netpol);
            f->netpol = NULL;
            break;
        case ACTION_CREATE_POD_GROUP: {
            int exists = 0;
            for (size_t j = 0; j < f->ngroups; j++)
                exists |= strcmp(f->groups[j], a->name) == 0;
            if (exists) break; /* AlreadyExists */
            assert_true(f->ngroups < 8);
            f->group_min[f->ngroups] =
                (int)jsonx_int(a->object, "spec.schedulingPolicy.gang.minCount", -1);
            snprintf(f->groups[f->ngroups++], sizeof f->groups[0], "%s", a->name);
            break;
        }
        case ACTION_DELETE_POD_GROUP:
            for (size_t j = 0; j < f->ngroups; j++) {
                if (strcmp(f->groups[j], a->name) != 0) continue;
                memcpy(f->groups[j], f->groups[--f->ngroups], sizeof f->groups[0]);
                f->group_min[j] = f->group_min[f->ngroups];
                break;
            }
            break;
        case ACTION_PATCH_POD_GROUP: /* 404 for one that is gone */
            for (size_t j = 0; j < f->ngroups; j++)
                if (strcmp(f->groups[j], a->name) == 0)
                    f->group_min[j] =
                        (int)jsonx_int(a->object, "spec.schedulingPolicy.gang.minCount", -1);
            break;
        case ACTION_PATCH_POD: /* a merge patch of annotations, refused for another uid */
            for (size_t j = 0; j < f->npods; j++) {
                if (strcmp(jsonx_str(f->pods[j], "metadata.name"), a->name) != 0) continue;
                const char *uid = jsonx_str(a->object, "metadata.uid");
                if (uid && strcmp(uid, jsonx_str(f->pods[j], "metadata.uid")) != 0) break;
                const cJSON *kv;
                cJSON_ArrayForEach(kv, jsonx_obj(a->object, "metadata.annotations"))
                {
                    jsonx_set_str(jsonx_ensure_obj(f->pods[j], "metadata.annotations"), kv->string,
                                  kv->valuestring);
                }
                break;
            }
            break;
        case ACTION_DELETE_JOB:
        case ACTION_EVENT:
            break;
        }
    }
}

static cJSON *pod_named(Fixture *f, const char *name)
{
    for (size_t j = 0; j < f->npods; j++)
        if (strcmp(jsonx_str(f->pods[j], "metadata.name"), name) == 0) return f->pods[j];
    return NULL;
}

/* Reconciles until a plan has nothing but events to do and no timer pending; each pass
 * may "crash" after a random prefix of its actions. Returns the passes taken. */
static int settle(Fixture *f, double *now, uint64_t *rng)
{
    for (int pass = 0; pass < 60; pass++) {
        plan_free(&f->plan);
        free(f->desc);
        f->desc = NULL;
        fx_run(f, *now);
        size_t real = 0;
        for (size_t i = 0; i < f->plan.n; i++)
            real += f->plan.actions[i].kind != ACTION_EVENT;
        if (real == 0 && f->plan.requeue_after < 0) return pass;
        if (real == 0) { /* a timer: let it fire, as the work queue would */
            *now += f->plan.requeue_after + 0.01;
            continue;
        }
        *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
        size_t k = (*rng % 3 == 0) ? (size_t)(*rng >> 8) % f->plan.n : f->plan.n;
        apply_prefix(f, k);
        *now += 3; /* time passes between passes, so backoff delays run out */
    }
    fail_msg("no steady state after 60 passes; last plan:\n%s", f->desc);
    return -1;
}

static void test_crash_at_any_action_converges(void **state)
{
    (void)state;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int round = 0; round < 150; round++) {
        /* Every other round with a NetworkPolicy, which must exist before any pod. */
        int np = round % 2;
        Fixture f = {.job = job_new(np ? "{\"workers\":2,\"checkpoint\":{\"claimName\":"
                                         "\"ckpt\"},\"networkPolicy\":true}"
                                       : SPEC2,
                                    NULL)};
        double now = NOW;
        settle(&f, &now, &rng);
        assert_int_equal(f.npods, 2);
        /* One Secret, or more when a pass stopped between creating one and recording
         * it (the rest are the garbage collector's when the job goes). */
        assert_true(f.secrets >= 1);
        assert_string_equal(jsonx_str(f.job, "status.secretName"), SECRET);
        assert_non_null(f.service);
        assert_true(np ? f.netpol != NULL : f.netpol == NULL);
        assert_true(jsonx_bool(f.job, "status.launched", 0));

        /* The kubelet starts both; worker 1 then fails with a retryable error. */
        for (size_t j = 0; j < f.npods; j++)
            jsonx_set_str(jsonx_ensure_obj(f.pods[j], "status"), "phase", "Running");
        settle(&f, &now, &rng);
        assert_string_equal(jsonx_str(f.job, "status.phase"), "Running");
        pod_terminated(pod_named(&f, "mnist-worker-1"), 1, NULL);
        settle(&f, &now, &rng);
        /* Exactly one restart counted, whatever the crash points; a new group of two. */
        assert_int_equal(jsonx_int(f.job, "status.restarts.application", -1), 1);
        assert_int_equal(jsonx_int(f.job, "status.restarts.disruption", -1), 0);
        assert_int_equal(jsonx_int(f.job, "status.attempt", -1), 1);
        assert_int_equal(f.npods, 2);
        for (size_t j = 0; j < f.npods; j++)
            assert_string_equal(jsonx_key_str(jsonx_obj(f.pods[j], "metadata.annotations"),
                                              "kubetrain.dev/attempt"),
                                "1");

        /* The chief completes: Succeeded once, the other worker cleaned up. */
        for (size_t j = 0; j < f.npods; j++)
            jsonx_set_str(jsonx_ensure_obj(f.pods[j], "status"), "phase", "Running");
        pod_terminated(pod_named(&f, "mnist-worker-0"), 0, "{\"step\":9}");
        settle(&f, &now, &rng);
        assert_string_equal(jsonx_str(f.job, "status.phase"), "Succeeded");
        assert_int_equal(jsonx_int(f.job, "status.result.step", -1), 9);
        assert_int_equal(f.npods, 1);
        assert_non_null(pod_named(&f, "mnist-worker-0"));
        fx_free(&f);
    }
}

/* ------------------------------------------------------------------------------------
 * Robustness: any field of any object replaced by a value of another type. */

static uint64_t mut_rng = 0x2545f4914f6cdd1dull;

static uint64_t mut_next(void)
{
    mut_rng ^= mut_rng << 13, mut_rng ^= mut_rng >> 7, mut_rng ^= mut_rng << 17;
    return mut_rng;
}

static cJSON *random_value(void)
{
    switch (mut_next() % 7) {
    case 0:
        return cJSON_CreateNumber(-1.5);
    case 1:
        return cJSON_CreateString("\xff\xfe not what you expected");
    case 2:
        return cJSON_CreateArray();
    case 3:
        return cJSON_CreateObject();
    case 4:
        return cJSON_CreateNull();
    case 5:
        return cJSON_CreateTrue();
    default:
        return cJSON_CreateNumber(1e300);
    }
}

/* Replaces each member of the tree with probability 1/rate by a random value. */
static void mutate(cJSON *o, unsigned rate)
{
    cJSON *it = (cJSON_IsObject(o) || cJSON_IsArray(o)) ? o->child : NULL;
    while (it) {
        cJSON *next = it->next;
        if (mut_next() % rate == 0)
            cJSON_ReplaceItemViaPointer(o, it, random_value());
        else
            mutate(it, rate);
        it = next;
    }
}

static void test_wrong_types_anywhere_never_crash(void **state)
{
    (void)state;
    olog_set_level(OLOG_ERROR + 1);
    for (int round = 0; round < 1500; round++) {
        Fixture f = {.job =
                         job_new("{\"workers\":2,\"restartPolicy\":\"ExitCode\","
                                 "\"checkpoint\":{\"claimName\":\"c\"},\"template\":{\"metadata\":"
                                 "{\"labels\":{\"a\":\"b\"}},\"spec\":{\"containers\":[{\"name\":"
                                 "\"trainer\",\"env\":[{\"name\":\"X\",\"value\":\"1\"}]}]}}}",
                                 ST_LAUNCHED(",\"attempt\":0,\"restarts\":{\"application\":1}"))};
        fx_with_support(&f);
        fx_pod(&f, 0, 0, "Running");
        pod_terminated(fx_pod(&f, 1, 0, "Running"), 75, "{\"error\":\"x\"}");
        unsigned rate = 3 + (unsigned)(mut_next() % 40);
        mutate(f.job, rate);
        mutate(f.service, rate);
        for (size_t i = 0; i < f.npods; i++)
            mutate(f.pods[i], rate);
        Observed o = {.job = f.job,
                      .service = f.service,
                      .pods = (const cJSON *const *)f.pods,
                      .npods = f.npods,
                      .now = NOW};
        char err[256];
        int rc = reconcile(&CFG, &o, &f.plan, err, sizeof err);
        /* Either a plan or a clean refusal (a job without a usable name). */
        assert_true(rc == 0 || rc == -EINVAL);
        fx_free(&f);
    }
    olog_set_level(OLOG_INFO);
}

/* A pod whose node died stays terminating for ever (no kubelet confirms the deletion):
 * once it is force_delete_after_s past its grace period it is deleted with grace period 0,
 * with a Warning event; before that the job is looked at again when it falls due. */
static void test_force_delete_stuck_terminating(void **state)
{
    (void)state;
    ReconcileConfig cfg = CFG;
    cfg.force_delete_after_s = 60;
    Fixture f = {.job = job_new(SPEC2, ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Running");
    cJSON *stuck = fx_pod(&f, 1, 0, "Running");
    char ts[40];
    clock_format_rfc3339(NOW - 30, ts, sizeof ts); /* grace period ended 30 s ago */
    jsonx_set_str(jsonx_ensure_obj(stuck, "metadata"), "deletionTimestamp", ts);
    jsonx_set_str(jsonx_ensure_obj(stuck, "spec"), "nodeName", "node-a");

    fx_run_cfg(&f, &cfg, NOW);
    if (strstr(f.desc, "force-delete-pod"))
        fail_msg("forced 30 s after the grace period, before the 60 s allowance:\n%s", f.desc);
    assert_true(f.plan.requeue_after > 0 && f.plan.requeue_after <= 30.0 + 1e-6);
    plan_free(&f.plan);
    free(f.desc);

    fx_run_cfg(&f, &cfg, NOW + 31);
    const Action *a = find_action(&f, ACTION_FORCE_DELETE_POD, "mnist-worker-1");
    assert_non_null(a);
    if (strstr(f.desc, "force-delete-pod mnist-worker-0"))
        fail_msg("forced a pod that is not terminating:\n%s", f.desc);
    if (!strstr(f.desc, "event Warning ForceDeleted"))
        fail_msg("no ForceDeleted event:\n%s", f.desc);
    int named = 0;
    for (size_t i = 0; i < f.plan.n; i++)
        if (f.plan.actions[i].kind == ACTION_EVENT &&
            strcmp(f.plan.actions[i].reason, "ForceDeleted") == 0)
            named = strstr(f.plan.actions[i].message, "mnist-worker-1") &&
                    strstr(f.plan.actions[i].message, "node-a");
    assert_true(named);
    plan_free(&f.plan);
    free(f.desc);

    /* Switched off (the default of a zeroed config): never forced. */
    fx_run(&f, NOW + 3600);
    if (strstr(f.desc, "force-delete-pod")) fail_msg("forced while switched off:\n%s", f.desc);
    fx_free(&f);
}

/* ------------------------------------------------------------------------------------
 * Roles: chief, ps and evaluator pods beside the workers (a user's program). */

#define ORACLE "operator/tests/reference/tfconfig-roles.json"

/* Every case of the TF_CONFIG oracle (generated with TensorFlow's own
 * TFConfigClusterResolver, reference/gen_tfconfig.py): desired.c makes exactly its pods,
 * named, labelled and addressed as listed, each TF_CONFIG equal to the oracle's as a
 * JSON value (keys in any order, lists in order). */
static void test_tf_config_oracle(void **state)
{
    (void)state;
    FILE *fp = fopen(ORACLE, "rb");
    if (!fp) fail_msg("cannot open %s (run from the repository root)", ORACLE);
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    cJSON *doc = cJSON_Parse(buf);
    assert_non_null(doc);
    int ncases = 0, npods = 0;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, jsonx_arr(doc, "cases"))
    {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "{\"workers\":%lld,\"port\":%lld,\"image\":\"tf:1\",\"command\":[\"python3\"],"
                 "\"chief\":{\"replicas\":%lld},\"ps\":{\"replicas\":%lld},"
                 "\"evaluator\":{\"replicas\":%lld}}",
                 jsonx_int(cs, "replicas.worker", -1), jsonx_int(cs, "port", -1),
                 jsonx_int(cs, "replicas.chief", -1), jsonx_int(cs, "replicas.ps", -1),
                 jsonx_int(cs, "replicas.evaluator", -1));
        cJSON *job = job_new(spec, NULL);
        cJSON *md = jsonx_ensure_obj(job, "metadata");
        jsonx_set_str(md, "name", jsonx_str(cs, "job"));
        jsonx_set_str(md, "namespace", jsonx_str(cs, "namespace"));
        JobSpec s;
        char err[256], svc[300];
        if (jobspec_parse(job, &s, err, sizeof err) != 0)
            fail_msg("case %s: %s", jsonx_str(cs, "name"), err);
        DesiredConfig dc = {.trainer_image = "def",
                            .cluster_domain = jsonx_str(cs, "cluster_domain")};
        snprintf(svc, sizeof svc, "%s-worker", s.name);
        const cJSON *want = jsonx_arr(cs, "pods"), *wp = want ? want->child : NULL;
        assert_int_equal(s.npods, cJSON_GetArraySize(want));
        for (int slot = 0; slot < s.npods; slot++, wp = wp->next) {
            Role r;
            int idx;
            jobspec_slot_role(&s, slot, &r, &idx);
            assert_string_equal(jobspec_role_name(r), jsonx_str(wp, "role"));
            assert_int_equal(idx, jsonx_int(wp, "index", -1));
            cJSON *pod = desired_pod(&s, &dc, SECRET, r, idx, 0);
            assert_non_null(pod);
            assert_string_equal(jsonx_str(pod, "metadata.name"), jsonx_str(wp, "pod"));
            assert_string_equal(jsonx_str(pod, "spec.hostname"), jsonx_str(wp, "pod"));
            assert_string_equal(jsonx_str(pod, "spec.subdomain"), svc);
            const cJSON *labels = jsonx_obj(pod, "metadata.labels");
            assert_string_equal(jsonx_key_str(labels, "kubetrain.dev/role"), jsonx_str(wp, "role"));
            char ibuf[16];
            snprintf(ibuf, sizeof ibuf, "%d", idx);
            assert_string_equal(jsonx_key_str(labels, "kubetrain.dev/replica-index"), ibuf);
            /* The chief label is where TensorFlow's is_chief says, among the training tasks
             * (TensorFlow also calls the evaluator the chief of its own evaluation). */
            int want_chief = jsonx_bool(wp, "is_chief", -1);
            assert_true(want_chief == 0 || want_chief == 1);
            if (r == ROLE_EVALUATOR) want_chief = 0;
            const char *chief = jsonx_key_str(labels, "kubetrain.dev/chief");
            if (want_chief ? !chief || strcmp(chief, "true") != 0 : chief != NULL)
                fail_msg("case %s, pod %s: label kubetrain.dev/chief %s", jsonx_str(cs, "name"),
                         jsonx_str(wp, "pod"), chief ? chief : "missing");
            cJSON *got = cJSON_Parse(env_of(pod, "TF_CONFIG"));
            if (!cJSON_Compare(got, jsonx_at(wp, "tf_config"), 1)) {
                char *w = cJSON_PrintUnformatted(jsonx_at(wp, "tf_config"));
                fail_msg("case %s, pod %s: TF_CONFIG\n got  %s\n want %s", jsonx_str(cs, "name"),
                         jsonx_str(wp, "pod"), env_of(pod, "TF_CONFIG"), w);
            }
            cJSON_Delete(got);
            cJSON_Delete(pod);
            npods++;
        }
        cJSON_Delete(job);
        ncases++;
    }
    assert_int_equal(ncases, 6);
    assert_int_equal(npods, 21);
    cJSON_Delete(doc);
}

#define SPEC_PS                                                                                    \
    "{\"workers\":2,\"image\":\"tf:1\",\"command\":[\"python3\",\"ps.py\"],"                       \
    "\"chief\":{},\"ps\":{\"replicas\":1},\"evaluator\":{\"command\":[\"python3\",\"ev.py\"]},"    \
    "\"cleanPodPolicy\":\"None\"}"
/* The status after creating the five pods of SPEC_PS (attempt 0). */
#define ST_PS_LAUNCHED                                                                             \
    "{\"observedGeneration\":3,\"succeededIndexes\":[],\"launched\":true,\"phase\":\"Pending\","   \
    "\"startTime\":\"2027-01-15T07:58:20Z\"}"

/* Adds replica `index` of `role`'s pod of attempt 0 in phase `phase`. */
static cJSON *fx_role_pod(Fixture *f, Role role, int index, const char *phase)
{
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(f->job, &s, err, sizeof err), 0);
    cJSON *p = desired_pod(&s, &CFG.desired, SECRET, role, index, 0);
    assert_non_null(p);
    pod_set_phase(p, phase);
    f->pods[f->npods++] = p;
    return p;
}

/* The five pods of SPEC_PS, all running. */
static void fx_ps_group(Fixture *f)
{
    fx_with_support(f);
    fx_role_pod(f, ROLE_CHIEF, 0, "Running");
    fx_role_pod(f, ROLE_WORKER, 0, "Running");
    fx_role_pod(f, ROLE_WORKER, 1, "Running");
    fx_role_pod(f, ROLE_PS, 0, "Running");
    fx_role_pod(f, ROLE_EVALUATOR, 0, "Running");
}

static void test_roles_create_every_pod(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC_PS, NULL)};
    fx_with_support(&f);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-pod mnist-chief-0\n"
                                "create-pod mnist-worker-0\n"
                                "create-pod mnist-worker-1\n"
                                "create-pod mnist-ps-0\n"
                                "create-pod mnist-evaluator-0\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    const cJSON *st = new_status(&f);
    assert_int_equal(jsonx_int(st, "workers.active", -1), 5);
    assert_int_equal(jsonx_int(st, "roles.worker.active", -1), 2);
    assert_int_equal(jsonx_int(st, "roles.ps.active", -1), 1);
    assert_true(jsonx_bool(st, "launched", 0));
    /* The role's command wins over the job's; the others run the job's. */
    const cJSON *ev = find_action(&f, ACTION_CREATE_POD, "mnist-evaluator-0")->object;
    const cJSON *ps = find_action(&f, ACTION_CREATE_POD, "mnist-ps-0")->object;
    assert_string_equal(
        cJSON_GetArrayItem(jsonx_arr(container(ev, "trainer"), "command"), 1)->valuestring,
        "ev.py");
    assert_string_equal(
        cJSON_GetArrayItem(jsonx_arr(container(ps, "trainer"), "command"), 1)->valuestring,
        "ps.py");
    assert_string_equal(
        jsonx_key_str(jsonx_obj(ps, "metadata.annotations"), "kubetrain.dev/cluster"),
        "chief=1,worker=2,ps=1");
    fx_apply(&f);
    /* Once they run: Running, and the next pass is a no-op. */
    for (size_t i = 0; i < f.npods; i++)
        pod_set_phase(f.pods[i], "Running");
    fx_run(&f, NOW + 1);
    assert_string_equal(f.desc, "update-status mnist\n");
    st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Running");
    assert_int_equal(jsonx_int(st, "roles.chief.ready", -1), 1);
    assert_int_equal(jsonx_int(st, "roles.evaluator.ready", -1), 1);
    assert_int_equal(jsonx_int(st, "workers.ready", -1), 5);
    assert_string_equal(jsonx_str(st, "ready"), "5/5");
    /* The scale subresource's replicas: the 2 workers, not the chief, ps or evaluator. */
    assert_int_equal(jsonx_int(st, "currentWorkers", -1), 2);
    assert_string_equal(jsonx_str(st, "selector"), WORKER_SELECTOR);
    fx_apply(&f);
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "");
    fx_free(&f);
}

/* The chief's exit 0 completes the job: the ps and evaluator pods, which would run
 * forever, are deleted although cleanPodPolicy is None; the workers stay. */
static void test_roles_chief_completes(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC_PS, ST_PS_LAUNCHED)};
    fx_ps_group(&f);
    pod_terminated(f.pods[0], 0, "done\n");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Completed\n"
                                "delete-pod mnist-ps-0\n"
                                "delete-pod mnist-evaluator-0\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Succeeded");
    assert_int_equal(jsonx_int(st, "roles.chief.succeeded", -1), 1);
    fx_free(&f);

    /* AllWorkers: the chief's and both workers' exits; the chief is remembered after
     * its pod is gone. */
    f = (Fixture){.job = job_new(SPEC_PS, ST_PS_LAUNCHED)};
    cJSON *spec = jsonx_ensure_obj(f.job, "spec");
    jsonx_set_str(spec, "successPolicy", "AllWorkers");
    fx_ps_group(&f);
    pod_terminated(f.pods[0], 0, NULL);
    pod_terminated(f.pods[1], 0, NULL);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n");
    assert_int_equal(jsonx_int(new_status(&f), "roles.chief.succeeded", -1), 1);
    cJSON *job2 = cJSON_Duplicate(find_action(&f, ACTION_UPDATE_STATUS, "mnist")->object, 1);
    Fixture g = {.job = job2};
    fx_with_support(&g);
    fx_role_pod(&g, ROLE_WORKER, 1, "Running");
    fx_role_pod(&g, ROLE_PS, 0, "Running");
    fx_role_pod(&g, ROLE_EVALUATOR, 0, "Running");
    pod_terminated(fx_role_pod(&g, ROLE_WORKER, 0, "Running"), 0, NULL);
    pod_terminated(g.pods[0], 0, NULL);
    fx_run(&g, NOW + 1);
    assert_string_equal(g.desc, "update-status mnist\n"
                                "event Normal Completed\n"
                                "delete-pod mnist-ps-0\n"
                                "delete-pod mnist-evaluator-0\n");
    fx_free(&f);
    fx_free(&g);
}

/* The Restarting condition's quote of a failed ps task whose termination message is
 * `log` (its log tail). */
static char *ps_failure_quote(const char *log)
{
    Fixture f = {.job = job_new(SPEC_PS, ST_PS_LAUNCHED)};
    fx_ps_group(&f);
    pod_terminated(f.pods[3], 1, log);
    fx_run(&f, NOW);
    char *quote = strdup(cond_message(new_status(&f), "Restarting"));
    fx_free(&f);
    return quote;
}

/* A program's log tail is quoted by what went wrong: the exception line, with the first
 * line of its details where TensorFlow's says only "Graph execution error:" and ends
 * with the op's context; where the tail has lost the exception line, the paragraph
 * above that context. */
static void test_failure_quote_from_log_tail(void **state)
{
    (void)state;
    static const char graph_error[] =
        "Traceback (most recent call last):\n"
        "  File \"/opt/kubetrain/examples/mwms.py\", line 104, in <module>\n"
        "    main()\n"
        "tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:\n"
        "\n"
        "Detected at node div_no_nan/CollectiveReduceV2_1 defined at (most recent call "
        "last):\n"
        "  File \"/opt/kubetrain/examples/mwms.py\", line 104, in <module>\n"
        "\n"
        "Collective ops is aborted by: cluster check alive failed, /job:worker/replica:0/"
        "task:0 is down\n"
        "The error could be from a previous operation. Restart your program to reset.\n"
        "\t [[{{node div_no_nan/CollectiveReduceV2_1}}]] "
        "[Op:__inference_train_function_1093]\n";
    char *q = ps_failure_quote(graph_error);
    assert_string_equal(q, "ps 0 exited with code 1: tensorflow.python.framework.errors_impl."
                           "UnavailableError: Graph execution error: Collective ops is aborted "
                           "by: cluster check alive failed, /job:worker/replica:0/task:0 is "
                           "down");
    free(q);

    /* The same tail cut above the exception line, as a 2 KB termination message is. */
    q = ps_failure_quote(strstr(graph_error, "  File \"/opt/kubetrain/examples/mwms.py\", "
                                             "line 104, in <module>\n\nCollective"));
    assert_string_equal(q, "ps 0 exited with code 1: Collective ops is aborted by: cluster "
                           "check alive failed, /job:worker/replica:0/task:0 is down");
    free(q);

    /* An exception whose line says it all, followed by nothing; and a plain last line
     * after an exception the program went on from. */
    q = ps_failure_quote("adding\nTraceback (most recent call last):\n  File \"<string>\", "
                         "line 1, in <module>\nKeyError: 'images'\n\n");
    assert_string_equal(q, "ps 0 exited with code 1: KeyError: 'images'");
    free(q);
    q = ps_failure_quote("step 1\nValueError: retrying\nstep 2\nfatal: out of data \n");
    assert_string_equal(q, "ps 0 exited with code 1: fatal: out of data");
    free(q);
}

/* A failed evaluator decides nothing and is not restarted; a failed ps task restarts
 * the group, quoting the last line of its log (a Python traceback's exception). */
static void test_roles_failures(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC_PS, ST_PS_LAUNCHED)};
    fx_ps_group(&f);
    pod_terminated(f.pods[4], 1,
                   "Traceback (most recent call last):\n  File \"ev.py\"\n"
                   "ValueError: no checkpoint\n");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Running");
    assert_int_equal(jsonx_int(st, "roles.evaluator.failed", -1), 1);
    assert_int_equal(jsonx_int(st, "roles.evaluator.active", -1), 0);
    fx_free(&f);

    f = (Fixture){.job = job_new(SPEC_PS, ST_PS_LAUNCHED)};
    fx_ps_group(&f);
    pod_terminated(f.pods[3], 1,
                   "Traceback (most recent call last):\n  File \"ps.py\"\n"
                   "RuntimeError: port in use\n\n");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning WorkerFailed\n"
                                "delete-pod mnist-chief-0\n"
                                "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n"
                                "delete-pod mnist-ps-0\n"
                                "delete-pod mnist-evaluator-0\n");
    st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Restarting");
    assert_null(jsonx_at(st, "roles"));
    assert_string_equal(cond_message(st, "Restarting"),
                        "ps 0 exited with code 1: RuntimeError: port in use");
    fx_free(&f);

    /* A lost chief is a disruption, as a lost worker. */
    f = (Fixture){.job = job_new(SPEC_PS, ST_PS_LAUNCHED)};
    fx_ps_group(&f);
    cJSON_Delete(f.pods[0]);
    f.pods[0] = f.pods[--f.npods];
    fx_run(&f, NOW);
    assert_cond(new_status(&f), "Restarting", "True/Disruption");
    fx_free(&f);
}

/* Adding a chief to a running job changes every pod's TF_CONFIG: the group restarts. */
static void test_roles_cluster_change_restarts(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":2}", ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Running");
    fx_pod(&f, 1, 0, "Running");
    jsonx_set(jsonx_ensure_obj(f.job, "spec"), "chief", cJSON_Parse("{\"replicas\":1}"));
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning WorkersChanged\n"
                                "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n");
    fx_free(&f);
}

static void test_roles_invalid(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"{\"ps\":{\"replicas\":1}}", "spec.ps: the C trainer runs chief and workers only"},
        {"{\"evaluator\":{}}", "spec.evaluator: the C trainer runs chief and workers only"},
        {"{\"image\":\"tf\",\"command\":[\"p\"],\"ps\":{}}",
         "spec.ps: parameter servers need a chief"},
        {"{\"chief\":{\"replicas\":2}}", "spec.chief.replicas: expected an integer in [0, 1]"},
        {"{\"chief\":{\"command\":[\"p\"]}}", "spec.chief.command: needs spec.command"},
        {"{\"chief\":{\"template\":[]}}", "spec.chief.template: expected a PodTemplateSpec"},
        {"{\"chief\":[]}", "spec.chief: expected an object"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cJSON *job = job_new(cases[k][0], NULL);
        JobSpec s;
        char err[256];
        assert_int_equal(jobspec_parse(job, &s, err, sizeof err), -EINVAL);
        if (strncmp(err, cases[k][1], strlen(cases[k][1])) != 0)
            fail_msg("%s: got \"%s\", want \"%s...\"", cases[k][0], err, cases[k][1]);
        cJSON_Delete(job);
    }
    /* The C trainer with a chief: rank 0, first in TF_CONFIG. */
    cJSON *job = job_new("{\"workers\":1,\"chief\":{}}", NULL);
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
    cJSON *pod = desired_pod(&s, &CFG.desired, SECRET, ROLE_CHIEF, 0, 0);
    assert_string_equal(env_of(pod, "TF_CONFIG"),
                        "{\"cluster\":{\"chief\":[\"mnist-chief-0.mnist-worker.default.svc:2222\"],"
                        "\"worker\":[\"mnist-worker-0.mnist-worker.default.svc:2222\"]},"
                        "\"task\":{\"type\":\"chief\",\"index\":0}}");
    assert_string_equal(
        cJSON_GetArrayItem(jsonx_arr(container(pod, "trainer"), "command"), 0)->valuestring,
        "kubetrain-trainer");
    cJSON_Delete(pod);
    cJSON_Delete(job);
}

/* The label, annotation values of a created pod. */
static const char *label_of(const cJSON *pod, const char *key)
{
    return jsonx_key_str(jsonx_obj(pod, "metadata.labels"), key);
}
static const char *annot_of(const cJSON *pod, const char *key)
{
    return jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), key);
}

/* A job labelled with a Kueue queue: every pod of the attempt (chief, workers, ps,
 * evaluator) is in one plain pod group named for the attempt, of that many pods, not
 * retriable in group; Kueue's stop (TerminationTarget, then a SIGTERM exit) is a
 * disruption, and the next attempt is a new group. A job without the label has none of
 * these; a template's queue label alone also makes the group. */
static void test_kueue_pod_group(void **state)
{
    (void)state;
    static const char *const names[] = {"mnist-chief-0", "mnist-worker-0", "mnist-worker-1",
                                        "mnist-ps-0", "mnist-evaluator-0"};
    Fixture f = {.job = job_new(SPEC_PS, NULL)};
    jsonx_set_str(jsonx_ensure_obj(f.job, "metadata.labels"), LABEL_KUEUE_QUEUE, "training");
    fx_with_support(&f);
    fx_run(&f, NOW);
    for (size_t i = 0; i < 5; i++) {
        const cJSON *p = find_action(&f, ACTION_CREATE_POD, names[i])->object;
        assert_string_equal(label_of(p, "kueue.x-k8s.io/queue-name"), "training");
        assert_string_equal(label_of(p, "kueue.x-k8s.io/pod-group-name"), "mnist-0-uid-1");
        assert_string_equal(annot_of(p, "kueue.x-k8s.io/pod-group-total-count"), "5");
        assert_string_equal(annot_of(p, "kueue.x-k8s.io/retriable-in-group"), "false");
    }
    fx_free(&f);

    /* --default-queue: a job that names no queue goes to it, in one group all the same;
     * a job's own label wins; without the flag an unlabelled job gets nothing of Kueue. */
    ReconcileConfig dq = CFG;
    dq.desired.default_queue = "team";
    f = (Fixture){.job = job_new("{\"workers\":2}", NULL)};
    fx_with_support(&f);
    fx_run_cfg(&f, &dq, NOW);
    for (int i = 0; i < 2; i++) {
        const cJSON *p =
            find_action(&f, ACTION_CREATE_POD, i ? "mnist-worker-1" : "mnist-worker-0")->object;
        assert_string_equal(label_of(p, "kueue.x-k8s.io/queue-name"), "team");
        assert_string_equal(label_of(p, "kueue.x-k8s.io/pod-group-name"), "mnist-0-uid-1");
        assert_string_equal(annot_of(p, "kueue.x-k8s.io/pod-group-total-count"), "2");
    }
    fx_free(&f);
    f = (Fixture){.job = job_new("{\"workers\":2}", NULL)};
    jsonx_set_str(jsonx_ensure_obj(f.job, "metadata.labels"), LABEL_KUEUE_QUEUE, "training");
    fx_with_support(&f);
    fx_run_cfg(&f, &dq, NOW);
    assert_string_equal(label_of(find_action(&f, ACTION_CREATE_POD, "mnist-worker-1")->object,
                                 "kueue.x-k8s.io/queue-name"),
                        "training");
    fx_free(&f);
    f = (Fixture){.job = job_new("{\"workers\":2}", NULL)};
    fx_with_support(&f);
    fx_run(&f, NOW);
    assert_null(label_of(find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object,
                         "kueue.x-k8s.io/queue-name"));
    assert_null(label_of(find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object,
                         "kueue.x-k8s.io/pod-group-name"));
    fx_free(&f);

    /* Kueue preempts the admitted group: the condition, then the pods' deletion; a
     * worker's program exits 143 on the SIGTERM under restartPolicy Never. */
    f = (Fixture){.job = job_new("{\"workers\":2,\"restartPolicy\":\"Never\"}", ST_LAUNCHED(""))};
    jsonx_set_str(jsonx_ensure_obj(f.job, "metadata.labels"), LABEL_KUEUE_QUEUE, "training");
    fx_with_support(&f);
    fx_pod(&f, 0, 0, "Running");
    cJSON *p = fx_pod(&f, 1, 0, "Running");
    pod_terminated(p, 143, NULL);
    jsonx_set(jsonx_ensure_obj(p, "status"), "conditions",
              cJSON_Parse("[{\"type\":\"TerminationTarget\",\"status\":\"True\","
                          "\"reason\":\"Preempted\"}]"));
    jsonx_set_str(jsonx_ensure_obj(p, "metadata"), "deletionTimestamp", "2027-01-15T08:00:00Z");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\nevent Warning Disruption\n"
                                "delete-pod mnist-worker-0\n");
    const cJSON *st = new_status(&f);
    assert_int_equal(jsonx_int(st, "restarts.disruption", -1), 1);
    assert_int_equal(jsonx_int(st, "restarts.application", -1), 0);
    fx_apply(&f);
    /* Both pods gone: attempt 1 is a new group. */
    for (size_t i = 0; i < f.npods; i++)
        cJSON_Delete(f.pods[i]);
    f.npods = 0;
    fx_run(&f, NOW + 1);
    p = find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object;
    assert_string_equal(label_of(p, "kueue.x-k8s.io/pod-group-name"), "mnist-1-uid-1");
    assert_string_equal(annot_of(p, "kueue.x-k8s.io/pod-group-total-count"), "2");
    fx_free(&f);

    /* No label: no group. The template's label alone: a group all the same. */
    f = (Fixture){.job = job_new(SPEC2, NULL)};
    fx_with_support(&f);
    fx_run(&f, NOW);
    p = find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object;
    assert_null(label_of(p, "kueue.x-k8s.io/queue-name"));
    assert_null(label_of(p, "kueue.x-k8s.io/pod-group-name"));
    assert_null(annot_of(p, "kueue.x-k8s.io/pod-group-total-count"));
    fx_free(&f);
    f = (Fixture){.job = job_new("{\"workers\":2,\"template\":{\"metadata\":{\"labels\":"
                                 "{\"kueue.x-k8s.io/queue-name\":\"q2\"}}}}",
                                 NULL)};
    fx_with_support(&f);
    fx_run(&f, NOW);
    p = find_action(&f, ACTION_CREATE_POD, "mnist-worker-1")->object;
    assert_string_equal(label_of(p, "kueue.x-k8s.io/queue-name"), "q2");
    assert_string_equal(label_of(p, "kueue.x-k8s.io/pod-group-name"), "mnist-0-uid-1");
    fx_free(&f);

    /* A long job name is cut so that the group name fits a label value. */
    char name[64], group[80];
    memset(name, 'a', 55);
    name[55] = '\0';
    JobSpec js = {.name = name, .uid = "0123456789abcdef"};
    desired_kueue_group(&js, 12345, group, sizeof group);
    assert_int_equal(strlen(group), 63);
    assert_string_equal(group + 63 - 15, "-12345-01234567");
}

/* The pod's labels or annotations (`which`) as compact JSON, for exact comparison. */
static char *keys_of(const cJSON *pod, const char *which)
{
    char *out = cJSON_PrintUnformatted(jsonx_obj(pod, which));
    assert_non_null(out);
    return out;
}

/* A template's own keys under kubetrain.dev/ and Kueue's pod group keys are dropped:
 * the operator alone sets them, and only on some pods (issue 41, item 3). The user's
 * other keys and the queue label are kept. */
static void test_template_reserved_keys(void **state)
{
    (void)state;
    Fixture f = {
        .job = job_new("{\"workers\":2,\"template\":{\"metadata\":{\"labels\":{"
                       "\"kubetrain.dev/chief\":\"true\",\"kubetrain.dev/role\":\"ps\","
                       "\"kueue.x-k8s.io/pod-group-name\":\"evil\",\"team\":\"a\"},"
                       "\"annotations\":{\"kubetrain.dev/metrics-port\":\"1@127.0.0.1:8080/x?\","
                       "\"kubetrain.dev/cluster\":\"chief=1,worker=2,ps=0\","
                       "\"kubetrain.dev/replacement\":\"9\","
                       "\"kueue.x-k8s.io/pod-group-total-count\":\"1\","
                       "\"kueue.x-k8s.io/retriable-in-group\":\"true\",\"note\":\"kept\"}},"
                       "\"spec\":{\"containers\":[{\"name\":\"trainer\",\"env\":[{\"name\":"
                       "\"KUBETRAIN_METRICS_PORT\",\"value\":\"0\"}]}]}}}",
                       NULL)};
    fx_with_support(&f);
    fx_run(&f, NOW);
    const cJSON *w0 = find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object;
    const cJSON *w1 = find_action(&f, ACTION_CREATE_POD, "mnist-worker-1")->object;
    char *l0 = keys_of(w0, "metadata.labels"), *l1 = keys_of(w1, "metadata.labels");
    char *a1 = keys_of(w1, "metadata.annotations");
    assert_string_equal(l0,
                        "{\"kubetrain.dev/job-name\":\"mnist\","
                        "\"app.kubernetes.io/managed-by\":\"kubetrain-operator\","
                        "\"team\":\"a\",\"kubetrain.dev/role\":\"worker\","
                        "\"kubetrain.dev/replica-index\":\"0\",\"kubetrain.dev/chief\":\"true\"}");
    assert_string_equal(l1, "{\"kubetrain.dev/job-name\":\"mnist\","
                            "\"app.kubernetes.io/managed-by\":\"kubetrain-operator\","
                            "\"team\":\"a\",\"kubetrain.dev/role\":\"worker\","
                            "\"kubetrain.dev/replica-index\":\"1\"}");
    assert_string_equal(a1, "{\"note\":\"kept\",\"kubetrain.dev/attempt\":\"0\","
                            "\"kubetrain.dev/world-size\":\"2\"}");
    free(l0), free(l1), free(a1);
    assert_int_equal(desired_reserved_key("kubetrain.dev/anything"), 1);
    assert_int_equal(desired_reserved_key("kueue.x-k8s.io/pod-group-name"), 1);
    assert_int_equal(desired_reserved_key("kueue.x-k8s.io/queue-name"), 0);
    assert_int_equal(desired_reserved_key("kubetrain.dev"), 0);
    fx_free(&f);
}

/* A template's kubetrain.dev/cluster on a job without chief or ps made every pod look
 * made for another cluster: the group restarted at every pass, counted nowhere (issue
 * 41, item 4b). Driven pass after pass, the job now runs and stays still. */
static void test_template_cluster_annotation_no_restart_loop(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":2,\"template\":{\"metadata\":{\"annotations\":"
                                "{\"kubetrain.dev/cluster\":\"chief=1,worker=2,ps=0\"}}}}",
                                NULL)};
    fx_with_support(&f);
    double now = NOW;
    fx_run(&f, now);
    assert_string_equal(f.desc, "create-pod mnist-worker-0\ncreate-pod mnist-worker-1\n"
                                "event Normal CreatedWorkers\nupdate-status mnist\n");
    fx_apply(&f);
    for (int pass = 0; pass < 5; pass++) {
        for (size_t i = 0; i < f.npods; i++)
            jsonx_set_str(jsonx_ensure_obj(f.pods[i], "status"), "phase", "Running");
        fx_run(&f, now += 5);
        assert_string_equal(f.desc, pass == 0 ? "update-status mnist\n" : "");
        fx_apply(&f);
    }
    assert_string_equal(jsonx_str(f.job, "status.phase"), "Running");
    assert_null(jsonx_at(f.job, "status.restarts"));
    assert_int_equal(jsonx_int(f.job, "status.attempt", 0), 0);
    fx_free(&f);
}

/* An empty queue label is no queue: --default-queue applies, and without it the pods get
 * no Kueue label at all (issue 41, item 11). The job's label and the template's alike. */
static void test_kueue_empty_queue_is_absent(void **state)
{
    (void)state;
    ReconcileConfig dq = CFG;
    dq.desired.default_queue = "team";
    for (int k = 0; k < 4; k++) {
        int on_job = k & 1, with_default = k >> 1;
        Fixture f = {.job = job_new(on_job ? "{\"workers\":2}"
                                           : "{\"workers\":2,\"template\":{\"metadata\":{"
                                             "\"labels\":{\"kueue.x-k8s.io/queue-name\":\"\"}}}}",
                                    NULL)};
        if (on_job)
            jsonx_set_str(jsonx_ensure_obj(f.job, "metadata.labels"), LABEL_KUEUE_QUEUE, "");
        fx_with_support(&f);
        fx_run_cfg(&f, with_default ? &dq : &CFG, NOW);
        const cJSON *p = find_action(&f, ACTION_CREATE_POD, "mnist-worker-1")->object;
        if (with_default) {
            assert_string_equal(label_of(p, "kueue.x-k8s.io/queue-name"), "team");
            assert_string_equal(label_of(p, "kueue.x-k8s.io/pod-group-name"), "mnist-0-uid-1");
        } else {
            assert_null(label_of(p, "kueue.x-k8s.io/queue-name"));
            assert_null(label_of(p, "kueue.x-k8s.io/pod-group-name"));
        }
        fx_free(&f);
    }
}

/* ------------------------------------------------------------------------------------
 * Restart loops (issue 41, item 4), driven pass after pass as the work queue would */

/* The kubelet's part for a pod whose init container `fetch` failed: the trainer never
 * ran. */
static void init_failed(cJSON *pod)
{
    cJSON *st = jsonx_ensure_obj(pod, "status");
    jsonx_set_str(st, "phase", "Failed");
    jsonx_set(st, "initContainerStatuses",
              cJSON_Parse("[{\"name\":\"fetch\",\"state\":{\"terminated\":{\"exitCode\":2,"
                          "\"reason\":\"Error\",\"message\":\"dataset not found\\n\"}}}]"));
    jsonx_set(st, "containerStatuses",
              cJSON_Parse("[{\"name\":\"trainer\",\"state\":{\"waiting\":{\"reason\":"
                          "\"PodInitializing\"}}}]"));
}

/* Runs a pass at *now and carries out its plan; the plan's description is kept in
 * f->desc until the next pass. */
static void fx_pass(Fixture *f, double now)
{
    plan_free(&f->plan);
    free(f->desc);
    f->desc = NULL;
    fx_run(f, now);
    apply_prefix(f, f->plan.n);
}

#define CREATE2                                                                                    \
    "create-pod mnist-worker-0\ncreate-pod mnist-worker-1\nevent Normal CreatedWorkers\n"          \
    "update-status mnist\n"

/* A pod failed in its own init container is the program's failure, not a disruption:
 * counted in restarts.application with its backoff, the init container's words quoted,
 * and backoffLimit ends it. It was a disruption, restarted at once at every pass. */
static void test_init_container_failure_is_the_programs(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":2,\"restartPolicy\":\"OnFailure\","
                                "\"backoffLimit\":2,\"recoveryTimeoutSeconds\":0}",
                                NULL)};
    fx_with_support(&f);
    double now = NOW;
    const char *why = "worker 0 init container fetch exited with code 2: dataset not found";
    for (int k = 0; k < 3; k++) {
        fx_pass(&f, now);
        assert_string_equal(f.desc, CREATE2);
        init_failed(pod_named(&f, "mnist-worker-0"));
        fx_pass(&f, now += 1);
        const cJSON *st = jsonx_obj(f.job, "status");
        if (k == 2) {
            assert_string_equal(f.desc, "update-status mnist\nevent Warning BackoffLimitExceeded\n"
                                        "delete-pod mnist-worker-1\n");
            assert_string_equal(jsonx_str(st, "phase"), "Failed");
            char want[256];
            snprintf(want, sizeof want, "backoffLimit=2 reached; last: %s", why);
            assert_string_equal(cond_message(st, "Failed"), want);
            break;
        }
        assert_string_equal(f.desc, "update-status mnist\nevent Warning WorkerFailed\n"
                                    "delete-pod mnist-worker-0\ndelete-pod mnist-worker-1\n");
        assert_int_equal(jsonx_int(st, "restarts.application", -1), k + 1);
        assert_int_equal(jsonx_int(st, "restarts.disruption", -1), 0);
        assert_cond(st, "Restarting", "True/WorkerFailed");
        assert_string_equal(cond_message(st, "Restarting"), why);
        double delay = reconcile_backoff_delay(&CFG, k + 1);
        assert_close(f.plan.requeue_after, delay, 0);
        /* The backoff holds the new pods back (the status counts the pods gone). */
        fx_pass(&f, now += 1);
        assert_string_equal(f.desc, "update-status mnist\n");
        assert_close(f.plan.requeue_after, delay, 0);
        now += delay;
    }
    fx_free(&f);
}

/* A pod the kubelet refuses at admission is a disruption; restarted at once at every
 * pass, it looped for ever. Now the first disruption restarts at once, the next ones
 * after a growing backoff, and the 11th in a row without the group ever running fails
 * the job saying so. A group that runs counts from zero again. */
static void test_disruption_restarts_back_off_and_stop(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":2,\"recoveryTimeoutSeconds\":0}", NULL)};
    fx_with_support(&f);
    double now = NOW;
    const char *why = "worker 1 was disrupted: it failed before the trainer ran (OutOfcpu: "
                      "Pod was rejected: Node didn't have enough resource: cpu)";
    for (int n = 1; n <= 11; n++) {
        fx_pass(&f, now);
        assert_string_equal(f.desc, CREATE2);
        cJSON *st = jsonx_ensure_obj(pod_named(&f, "mnist-worker-1"), "status");
        jsonx_set_str(st, "phase", "Failed");
        jsonx_set_str(st, "reason", "OutOfcpu");
        jsonx_set_str(st, "message", "Pod was rejected: Node didn't have enough resource: cpu");
        fx_pass(&f, now += 1);
        const cJSON *js = jsonx_obj(f.job, "status");
        if (n == 11) {
            assert_string_equal(f.desc,
                                "update-status mnist\nevent Warning DisruptionLimitExceeded\n"
                                "delete-pod mnist-worker-0\n");
            assert_string_equal(jsonx_str(js, "phase"), "Failed");
            char want[400];
            snprintf(want, sizeof want, "10 disruptions in a row and the group never ran; last: %s",
                     why);
            assert_string_equal(cond_message(js, "Failed"), want);
            assert_int_equal(jsonx_int(js, "restarts.disruption", -1), 10);
            break;
        }
        assert_string_equal(f.desc, "update-status mnist\nevent Warning Disruption\n"
                                    "delete-pod mnist-worker-0\ndelete-pod mnist-worker-1\n");
        assert_string_equal(cond_message(js, "Restarting"), why);
        assert_int_equal(jsonx_int(js, "restarts.disruption", -1), n);
        assert_int_equal(jsonx_int(js, "restarts.consecutiveDisruptions", -1), n);
        assert_int_equal(jsonx_int(js, "restarts.application", -1), 0);
        double delay = reconcile_backoff_delay(&CFG, n - 1);
        if (n == 1) {
            assert_close(f.plan.requeue_after, -1, 0); /* the first: at once */
            continue;
        }
        assert_close(f.plan.requeue_after, delay, 0);
        fx_pass(&f, now += 1);
        assert_string_equal(f.desc, "update-status mnist\n");
        assert_close(f.plan.requeue_after, delay, 0);
        now += delay;
    }
    fx_free(&f);

    /* Two disruptions, then the group runs: the count starts again. */
    f = (Fixture){.job = job_new("{\"workers\":2,\"recoveryTimeoutSeconds\":0}", NULL)};
    fx_with_support(&f);
    now = NOW;
    for (int n = 1; n <= 3; n++) {
        fx_pass(&f, now);
        assert_string_equal(f.desc, CREATE2);
        for (size_t i = 0; i < f.npods; i++)
            jsonx_set_str(jsonx_ensure_obj(f.pods[i], "status"), "phase",
                          n < 3 && i == 1 ? "Failed" : "Running");
        fx_pass(&f, now += 1);
        now += reconcile_backoff_delay(&CFG, n - 1) + 2;
    }
    assert_string_equal(jsonx_str(f.job, "status.phase"), "Running");
    assert_int_equal(jsonx_int(f.job, "status.restarts.consecutiveDisruptions", -1), 0);
    assert_int_equal(jsonx_int(f.job, "status.restarts.disruption", -1), 2);
    fx_free(&f);
}

/* ------------------------------------------------------------------------------------
 * Gang scheduling: one PodGroup per attempt (docs/design.md, "Gang scheduling") */

/* How many times `line` is in the plan's description. */
static int count_lines(const Fixture *f, const char *line)
{
    int n = 0;
    size_t len = strlen(line);
    for (const char *p = f->desc; (p = strstr(p, line)); p += len)
        n += (p == f->desc || p[-1] == '\n') && p[len] == '\n';
    return n;
}

static const char *group_of(const cJSON *pod)
{
    return jsonx_str(pod, "spec.schedulingGroup.podGroupName");
}

/* ------------------------------------------------------------------------------------
 * Live recovery: one lost pod is replaced inside its attempt */

#define SPEC3 "{\"workers\":3,\"checkpoint\":{\"claimName\":\"ckpt\"}}"
/* Attempt 4 of a 3-worker job, all running. */
#define ST_RUNNING3(extra)                                                                         \
    "{\"observedGeneration\":3,\"succeededIndexes\":[],\"attempt\":4,\"launched\":true,"           \
    "\"secretName\":\"" SECRET                                                                     \
    "\",\"phase\":\"Running\",\"startTime\":\"2027-01-15T07:58:20Z\"" extra "}"

/* The trainer's value of `flag` in the pod's trainer container, or NULL. */
static const char *arg_of(const cJSON *pod, const char *flag)
{
    const cJSON *args = jsonx_arr(container(pod, "trainer"), "args");
    for (const cJSON *a = args ? args->child : NULL; a && a->next; a = a->next)
        if (cJSON_IsString(a) && strcmp(a->valuestring, flag) == 0 && cJSON_IsString(a->next))
            return a->next->valuestring;
    return NULL;
}

/* A 2-worker job on claim c at /ck with spec.training `training` (JSON): each worker's
 * trainer args are the defaults with `want` (JSON array items, from ",") appended. */
static void assert_training_args(const char *training, const char *want_tail)
{
    char spec[256], want[512];
    snprintf(spec, sizeof spec,
             "{\"workers\":2,\"checkpoint\":{\"claimName\":\"c\",\"path\":\"/ck\"},"
             "\"training\":%s}",
             training);
    snprintf(want, sizeof want,
             "[\"train\",\"--model\",\"tutorial-cnn\",\"--collective\",\"auto\","
             "\"--recovery-timeout\",\"120\",\"--checkpoint-dir\",\"/ck/mnist\"%s]",
             want_tail);
    cJSON *job = job_new(spec, NULL);
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
    for (int w = 0; w < 2; w++) {
        cJSON *pod = desired_pod(&s, &CFG.desired, SECRET, ROLE_WORKER, w, 0);
        char *args = cJSON_PrintUnformatted(jsonx_arr(container(pod, "trainer"), "args"));
        assert_string_equal(args, want);
        free(args);
        cJSON_Delete(pod);
    }
    cJSON_Delete(job);
}

/* A job of spec `spec` (JSON) is refused by jobspec_parse with exactly `want`. */
static void assert_spec_refused(const char *spec, const char *want)
{
    cJSON *job = job_new(spec, NULL);
    JobSpec s;
    char err[512] = "";
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), -EINVAL);
    assert_string_equal(err, want);
    cJSON_Delete(job);
}

/* spec.training.export: the C trainer's --export, in the job's checkpoint directory on
 * the claim, after the checkpoint flags; unset, no --export. The CRD's rules hold for an
 * object that missed them, each error naming the field. */
static void test_export_arg(void **state)
{
    (void)state;
    static const struct {
        const char *training, *want;
    } cases[] = {
        {"{}", ""},
        {"{\"export\":\"model.keras\"}", ",\"--export\",\"/ck/mnist/model.keras\""},
        {"{\"export\":\"out/m.weights.h5\"}", ",\"--export\",\"/ck/mnist/out/m.weights.h5\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_training_args(cases[i].training, cases[i].want);
    static const char *const bad[][2] = {
        {"{\"training\":{\"export\":\"model.keras\"}}",
         "spec.training.export: needs spec.checkpoint.claimName (the claim the chief writes it "
         "to)"},
        {"{\"image\":\"tf\",\"command\":[\"p\"],\"checkpoint\":{\"claimName\":\"c\"},"
         "\"training\":{\"export\":\"model.keras\"}}",
         "spec.training.export: the C trainer's; a program in spec.command saves its own model"},
        {"{\"checkpoint\":{\"claimName\":\"c\"},\"training\":{\"export\":\"model.zip\"}}",
         "spec.training.export: a file name ending in .keras or .weights.h5, got \"model.zip\""},
        {"{\"checkpoint\":{\"claimName\":\"c\"},\"training\":{\"export\":\"a/../../x.keras\"}}",
         "spec.training.export: a path relative to the job's checkpoint directory, without a "
         "leading / or a .. component, got \"a/../../x.keras\""},
        {"{\"checkpoint\":{\"claimName\":\"c\"},\"training\":{\"export\":\"/a.keras\"}}",
         "spec.training.export: a path relative to the job's checkpoint directory, without a "
         "leading / or a .. component, got \"/a.keras\""},
        {"{\"checkpoint\":{\"claimName\":\"c\"},\"training\":{\"export\":\"\"}}",
         "spec.training.export: expected 1 to 255 bytes"},
        {"{\"training\":{\"export\":7}}", "spec.training.export: expected a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_spec_refused(bad[i][0], bad[i][1]);
    /* ".." inside a name is no component: accepted */
    cJSON *job = job_new("{\"checkpoint\":{\"claimName\":\"c\"},"
                         "\"training\":{\"export\":\"m..v2.keras\"}}",
                         NULL);
    JobSpec s;
    char err[256] = "";
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
    assert_string_equal(s.export_file, "m..v2.keras");
    cJSON_Delete(job);
}

/* spec.training.initialWeights: the C trainer's --initial-weights, given to every worker,
 * a path on the claim's mount (so another job's export, "<job>/<file>", is named), right
 * after --checkpoint-dir; unset, none. The CRD's rules hold for an object that missed
 * them, each error naming the field. */
static void test_initial_weights_arg(void **state)
{
    (void)state;
    static const struct {
        const char *training, *want;
    } cases[] = {
        {"{}", ""},
        {"{\"initialWeights\":\"base/model.keras\"}",
         ",\"--initial-weights\",\"/ck/base/model.keras\""},
        {"{\"initialWeights\":\"w/m.weights.h5\",\"export\":\"tuned.keras\"}",
         ",\"--initial-weights\",\"/ck/w/m.weights.h5\",\"--export\",\"/ck/mnist/tuned.keras\""},
        {"{\"initialWeights\":\"legacy.h5\"}", ",\"--initial-weights\",\"/ck/legacy.h5\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_training_args(cases[i].training, cases[i].want);
    char long_name[300], long_spec[400];
    memset(long_name, 'a', 250);
    snprintf(long_name + 250, sizeof long_name - 250, ".keras"); /* 256 bytes */
    snprintf(long_spec, sizeof long_spec,
             "{\"checkpoint\":{\"claimName\":\"c\"},\"training\":{\"initialWeights\":\"%s\"}}",
             long_name);
#define REL                                                                                        \
    "spec.training.initialWeights: a path relative to the checkpoint claim's mount "               \
    "(spec.checkpoint.path), without a leading / or a .. component, got "
    const char *const bad[][2] = {
        {"{\"training\":{\"initialWeights\":\"m.keras\"}}",
         "spec.training.initialWeights: needs spec.checkpoint.claimName (the claim the weights "
         "are read from)"},
        {"{\"image\":\"tf\",\"command\":[\"p\"],\"checkpoint\":{\"claimName\":\"c\"},"
         "\"training\":{\"initialWeights\":\"m.keras\"}}",
         "spec.training.initialWeights: the C trainer's; a program in spec.command loads its "
         "own weights"},
        {"{\"checkpoint\":{\"claimName\":\"c\"},\"training\":{\"initialWeights\":\"m.pt\"}}",
         "spec.training.initialWeights: a file name ending in .keras, .weights.h5 or .h5, got "
         "\"m.pt\""},
        {"{\"checkpoint\":{\"claimName\":\"c\"},\"training\":{\"initialWeights\":\"../x.h5\"}}",
         REL "\"../x.h5\""},
        {"{\"checkpoint\":{\"claimName\":\"c\"},\"training\":{\"initialWeights\":\"/x.h5\"}}",
         REL "\"/x.h5\""},
        {"{\"checkpoint\":{\"claimName\":\"c\"},\"training\":{\"initialWeights\":\"\"}}",
         "spec.training.initialWeights: expected 1 to 255 bytes"},
        {long_spec, "spec.training.initialWeights: expected 1 to 255 bytes"},
        {"{\"training\":{\"initialWeights\":7}}",
         "spec.training.initialWeights: expected a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_spec_refused(bad[i][0], bad[i][1]);
#undef REL
}

/* spec.elastic: minWorkers (1..workers) and replaceTimeoutSeconds (default 30, 1..3600)
 * read with the CRD's rules, for an object that missed them, each error naming the field;
 * unset, no elastic job. */
static void test_elastic_spec(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int elastic, min_workers;
        long long replace_timeout_s;
    } cases[] = {
        {"{\"workers\":3}", 0, 0, 0},
        {"{\"workers\":3,\"elastic\":{\"minWorkers\":2}}", 1, 2, 30},
        {"{\"workers\":3,\"elastic\":{\"minWorkers\":3,\"replaceTimeoutSeconds\":3600}}", 1, 3,
         3600},
        {"{\"elastic\":{\"minWorkers\":1,\"replaceTimeoutSeconds\":1}}", 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *job = job_new(cases[i].spec, NULL);
        JobSpec s;
        char err[256] = "";
        assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
        assert_int_equal(s.elastic, cases[i].elastic);
        assert_int_equal(s.min_workers, cases[i].min_workers);
        assert_int_equal(s.replace_timeout_s, cases[i].replace_timeout_s);
        cJSON_Delete(job);
    }
    static const char *const bad[][2] = {
        {"{\"workers\":2,\"elastic\":{\"minWorkers\":3}}",
         "spec.elastic.minWorkers: must be at most spec.workers (2), got 3"},
        {"{\"workers\":2,\"elastic\":{\"minWorkers\":0}}",
         "spec.elastic.minWorkers: expected an integer in [1, 1024]"},
        {"{\"workers\":2,\"elastic\":{}}", "spec.elastic.minWorkers: required with spec.elastic"},
        {"{\"workers\":2,\"elastic\":true}", "spec.elastic: expected an object"},
        {"{\"workers\":2,\"elastic\":{\"minWorkers\":1,\"replaceTimeoutSeconds\":0}}",
         "spec.elastic.replaceTimeoutSeconds: expected an integer in [1, 3600]"},
        {"{\"workers\":2,\"elastic\":{\"minWorkers\":1,\"replaceTimeoutSeconds\":3601}}",
         "spec.elastic.replaceTimeoutSeconds: expected an integer in [1, 3600]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_spec_refused(bad[i][0], bad[i][1]);
}

/* spec.training.stepsPerEpoch 0 with spec.dataset.shardPolicy file: refused for a C-trainer
 * job of more than one rank (the chief counted), as the CRD's rule and the trainer refuse
 * it; accepted for one rank, a step count, another policy or a user's program. */
static void test_file_shards_spec(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "{\"workers\":1,\"dataset\":{\"shardPolicy\":\"file\"},"
        "\"training\":{\"stepsPerEpoch\":0}}",
        "{\"workers\":3,\"dataset\":{\"shardPolicy\":\"file\"},"
        "\"training\":{\"stepsPerEpoch\":5}}",
        "{\"workers\":3,\"dataset\":{\"shardPolicy\":\"data\"},"
        "\"training\":{\"stepsPerEpoch\":0}}",
        "{\"workers\":3,\"training\":{\"stepsPerEpoch\":0}}",
        "{\"workers\":3,\"image\":\"tf:1\",\"command\":[\"python3\",\"m.py\"],"
        "\"dataset\":{\"shardPolicy\":\"file\"},\"training\":{\"stepsPerEpoch\":0}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        cJSON *job = job_new(ok[i], NULL);
        JobSpec s;
        char err[512] = "";
        assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
        cJSON_Delete(job);
    }
    static const char *const tail =
        ": the workers' files hold different numbers of examples, so a pass has no common "
        "length; give stepsPerEpoch N, or shardPolicy data";
    static const struct {
        const char *spec;
        int world;
    } bad[] = {
        {"{\"workers\":2,\"dataset\":{\"shardPolicy\":\"file\"},"
         "\"training\":{\"stepsPerEpoch\":0}}",
         2},
        {"{\"workers\":1,\"chief\":{\"replicas\":1},\"dataset\":{\"shardPolicy\":\"file\"},"
         "\"training\":{\"stepsPerEpoch\":0}}",
         2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[512];
        snprintf(want, sizeof want,
                 "spec.training.stepsPerEpoch: 0 (one pass over a worker's files) with "
                 "spec.dataset.shardPolicy file needs a single worker, got %d%s",
                 bad[i].world, tail);
        assert_spec_refused(bad[i].spec, want);
    }
}

/* The pod of `role` `index` (desired_pod, attempt 0) of a job with `spec` and `status`
 * (JSON or NULL). Caller frees. */
static cJSON *spec_pod(const char *spec, const char *status, Role role, int index)
{
    cJSON *job = job_new(spec, status);
    JobSpec s;
    char err[256] = "";
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
    cJSON *pod = desired_pod(&s, &CFG.desired, SECRET, role, index, 0);
    assert_non_null(pod);
    cJSON_Delete(job);
    return pod;
}

/* The trainer's argument after `flag`, "(none)" when the flag is not given. */
static const char *arg_after(const cJSON *pod, const char *flag)
{
    const cJSON *a;
    cJSON_ArrayForEach(a, jsonx_arr(container(pod, "trainer"), "args"))
    {
        if (cJSON_IsString(a) && strcmp(a->valuestring, flag) == 0 && a->next)
            return a->next->valuestring;
    }
    return "(none)";
}

/* A Keras model's to_json() inline in spec.model (issue #44): taken as an inline model,
 * its JSON in the Secret's model.json, which the trainer is given as --model. */
static void test_keras_model_inline(void **state)
{
    (void)state;
    static const char spec[] =
        "{\"workers\":1,\"model\":{\"class_name\":\"Sequential\",\"config\":{\"name\":"
        "\"m\",\"layers\":[{\"class_name\":\"Dense\",\"config\":{\"units\":10}}]}}}";
    Fixture f = {.job = job_new(spec, NULL)};
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(f.job, &s, err, sizeof err), 0);
    assert_ptr_equal(s.model_inline, jsonx_at(f.job, "spec.model"));
    fx_run(&f, NOW);
    const cJSON *sec = find_action(&f, ACTION_CREATE_SECRET, "mnist-secret-")->object;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(jsonx_at(sec, "data"), SECRET_MODEL);
    assert_true(cJSON_IsString(m) && *m->valuestring);
    fx_free(&f);
    f = (Fixture){.job = job_new(spec, NULL)};
    fx_with_support(&f);
    fx_run(&f, NOW);
    const cJSON *pod = find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object;
    assert_string_equal(arg_after(pod, "--model"), MODEL_MOUNT_DIR "/" SECRET_MODEL);
    fx_free(&f);
}

#define ESPEC3                                                                                     \
    "{\"workers\":3,\"elastic\":{\"minWorkers\":2},\"checkpoint\":{\"claimName\":\"ckpt\"}}"

/* An elastic job of 3 running workers (attempt 0, launched) whose spec.workers is now
 * `workers`, with `status_extra` in its status. */
static void fx_elastic3(Fixture *f, const char *spec, const char *status_extra, int workers)
{
    memset(f, 0, sizeof *f);
    f->job = job_new(spec, status_extra);
    fx_with_support(f);
    for (int i = 0; i < 3; i++)
        fx_pod(f, i, 0, "Running");
    jsonx_set_num(jsonx_ensure_obj(f->job, "spec"), "workers", workers);
}

/* A running elastic job of 3 workers scaled to 2 (kubectl scale), the two passes that
 * shrink it applied (NOW, NOW + 1): worker 2's pod is gone. */
static void fx_scaled_to_2(Fixture *f)
{
    fx_elastic3(f, ESPEC3, ST_LAUNCHED(""), 2);
    jsonx_set_str(jsonx_ensure_obj(f->job, "status"), "phase", "Running");
    fx_run(f, NOW);
    fx_apply(f);
    fx_run(f, NOW + 1);
    fx_apply(f);
    assert_null(pod_named(f, "mnist-worker-2"));
}

/* kubectl scale of an elastic job from 3 to 2: no restart; status.members, the Resized
 * condition and event say it, the survivors' annotations name the smaller ring, then the
 * dropped worker goes. The next pass changes nothing and counts 2 current workers. A
 * pass stopped after the status write is finished by the next one. */
static void test_elastic_scale_down(void **state)
{
    (void)state;
    Fixture f;
    fx_elastic3(&f, ESPEC3, ST_LAUNCHED(""), 2);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n"
                                "delete-pod mnist-worker-2\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "members"), "0,1");
    assert_int_equal(jsonx_int(st, "attempt", 0), 0);
    assert_null(jsonx_at(st, "restarts"));
    assert_cond(st, "Resized", "True/Shrank");
    assert_string_equal(cond_message(st, "Resized"),
                        "shrank from 3 to 2 workers (members 0,1): spec.workers lowered to 2");
    assert_string_equal(find_action(&f, ACTION_EVENT, "mnist")->message,
                        "shrank from 3 to 2 workers (members 0,1): spec.workers lowered to 2");
    assert_string_equal(members_of(find_action(&f, ACTION_PATCH_POD, "mnist-worker-1")->object),
                        "0,1");
    fx_apply(&f);
    assert_int_equal(f.npods, 2);
    assert_string_equal(members_of(f.pods[0]), "0,1");
    assert_string_equal(members_of(f.pods[1]), "0,1");
    assert_int_equal(jsonx_int(f.job, "status.currentWorkers", -1), 2);
    fx_run(&f, NOW + 1);
    assert_string_equal(f.desc, "update-status mnist\n");
    assert_string_equal(cond_message(new_status(&f), "Running"), "all 2 workers are running");
    fx_free(&f);

    /* Stopped after the status write: the next pass patches and deletes. */
    fx_elastic3(&f, ESPEC3, ST_LAUNCHED(""), 2);
    fx_run(&f, NOW);
    apply_prefix(&f, 1);
    plan_free(&f.plan);
    free(f.desc);
    fx_run(&f, NOW + 1);
    assert_string_equal(f.desc, "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n"
                                "delete-pod mnist-worker-2\n"
                                "update-status mnist\n");
    fx_free(&f);
}

/* Worker 3's address in TF_CONFIG (the new pods') and in the members past a TF_CONFIG of 3. */
#define W3_ADDR "mnist-worker-3.mnist-worker.default.svc:2222"

/* An elastic job with a chief: the chief stays (TF_CONFIG index 0) and is told too. The
 * pods' cluster annotation (chief=1,worker=3,ps=0) is judged by its chief and ps counts
 * alone: the next pass restarts nothing. */
static void test_elastic_scale_down_with_chief(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":3,\"chief\":{},\"elastic\":{\"minWorkers\":2}}",
                                ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_role_pod(&f, ROLE_CHIEF, 0, "Running");
    for (int i = 0; i < 3; i++)
        fx_role_pod(&f, ROLE_WORKER, i, "Running");
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 2);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-chief-0\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n"
                                "delete-pod mnist-worker-2\n");
    assert_string_equal(cond_message(new_status(&f), "Resized"),
                        "shrank from 3 to 2 workers (members 0,1,2): spec.workers lowered to 2");
    fx_apply(&f);
    fx_run(&f, NOW + 1);
    assert_string_equal(f.desc, "update-status mnist\n");
    fx_free(&f);

    /* Up to 4 past the attempt's TF_CONFIG: worker 3 (TF_CONFIG index 4) made in place,
     * its address past the chief and the 3 workers the others' TF_CONFIG names. */
    f = (Fixture){.job = job_new("{\"workers\":3,\"chief\":{},\"elastic\":{\"minWorkers\":2}}",
                                 ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_role_pod(&f, ROLE_CHIEF, 0, "Running");
    for (int i = 0; i < 3; i++)
        fx_role_pod(&f, ROLE_WORKER, i, "Running");
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 4);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-pod mnist-worker-3\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    const Action *w = find_action(&f, ACTION_CREATE_POD, "mnist-worker-3");
    assert_string_equal(members_of(w->object), "0,1,2,3,4=" W3_ADDR);
    fx_apply(&f);
    pod_set_phase(pod_named(&f, "mnist-worker-3"), "Running");
    fx_run(&f, NOW + 1);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-chief-0\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n"
                                "patch-pod mnist-worker-2\n");
    assert_string_equal(members_of(find_action(&f, ACTION_PATCH_POD, "mnist-chief-0")->object),
                        "0,1,2,3,4=" W3_ADDR);
    fx_apply(&f);
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n");
    fx_free(&f);
}

/* The workers TF_CONFIG names in pod, and its world-size annotation. */
static void assert_cluster(const cJSON *pod, int workers)
{
    char want[16];
    snprintf(want, sizeof want, "%d", workers);
    assert_string_equal(
        jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), "kubetrain.dev/world-size"), want);
    cJSON *tf = cJSON_Parse(env_of(pod, "TF_CONFIG"));
    assert_int_equal(cJSON_GetArraySize(jsonx_arr(tf, "cluster.worker")), workers);
    cJSON_Delete(tf);
}

/* kubectl scale of a running elastic job from 3 to 4: past the workers its attempt's
 * TF_CONFIG names, in place all the same. Worker 3 is made in the same attempt with a
 * TF_CONFIG of 4, naming the members and itself with its address (the text every pod
 * gets: the pods made for 3 need it); once it runs the others' annotations name it with
 * its address, Resized/Grew says it, no restart. */
static void test_elastic_scale_up(void **state)
{
    (void)state;
    Fixture f;
    fx_elastic3(&f, ESPEC3, ST_LAUNCHED(""), 4);
    jsonx_set_str(jsonx_ensure_obj(f.job, "status"), "phase", "Running");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-pod mnist-worker-3\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    const Action *w = find_action(&f, ACTION_CREATE_POD, "mnist-worker-3");
    assert_cluster(w->object, 4);
    assert_string_equal(members_of(w->object), "0,1,2,3=" W3_ADDR);
    /* the address is TF_CONFIG's */
    cJSON *tf = cJSON_Parse(env_of(w->object, "TF_CONFIG"));
    assert_string_equal(cJSON_GetArrayItem(jsonx_arr(tf, "cluster.worker"), 3)->valuestring,
                        W3_ADDR);
    cJSON_Delete(tf);
    assert_int_equal(jsonx_int(new_status(&f), "attempt", 0), 0);
    assert_string_equal(jsonx_str(new_status(&f), "phase"), "Running");
    fx_apply(&f);
    fx_run(&f, NOW + 1); /* Pending: nothing changes */
    assert_null(strstr(f.desc, "-pod"));
    fx_apply(&f);
    pod_set_phase(pod_named(&f, "mnist-worker-3"), "Running");
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n"
                                "patch-pod mnist-worker-2\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "members"), "0,1,2,3");
    assert_cond(st, "Resized", "True/Grew");
    assert_string_equal(cond_message(st, "Resized"),
                        "grew from 3 to 4 workers (members 0,1,2,3): pod mnist-worker-3 runs");
    assert_int_equal(jsonx_int(st, "attempt", 0), 0);
    assert_null(jsonx_at(st, "restarts"));
    fx_apply(&f);
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "mnist-worker-%d", i);
        assert_string_equal(members_of(pod_named(&f, name)), "0,1,2,3=" W3_ADDR);
    }
    fx_run(&f, NOW + 3);
    assert_null(strstr(f.desc, "-pod"));
    assert_int_equal(jsonx_int(new_status(&f), "currentWorkers", -1), 4);
    fx_free(&f);
}

/* kubectl scale from 3 to 2 and then to 4 while running (the issue's test): the
 * survivors stay; workers 2 and 3 are made with a TF_CONFIG of 4 and join one a pass as
 * they run, the survivors' annotations naming index 3 with its address (their TF_CONFIG
 * names 3 workers, index 2 among them). The next pod made (a survivor's replacement)
 * names the grown cluster. */
static void test_elastic_scale_down_then_past(void **state)
{
    (void)state;
    Fixture f;
    fx_scaled_to_2(&f);
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 4);
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "create-pod mnist-worker-2\n"
                                "create-pod mnist-worker-3\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    const Action *w2 = find_action(&f, ACTION_CREATE_POD, "mnist-worker-2");
    const Action *w3 = find_action(&f, ACTION_CREATE_POD, "mnist-worker-3");
    assert_cluster(w2->object, 4);
    assert_cluster(w3->object, 4);
    assert_string_equal(members_of(w2->object), "0,1,2");
    assert_string_equal(members_of(w3->object), "0,1,3=" W3_ADDR);
    fx_apply(&f);
    pod_set_phase(pod_named(&f, "mnist-worker-2"), "Running");
    fx_run(&f, NOW + 3);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n");
    assert_string_equal(cond_message(new_status(&f), "Resized"),
                        "grew from 2 to 3 workers (members 0,1,2): pod mnist-worker-2 runs");
    fx_apply(&f);
    assert_string_equal(members_of(pod_named(&f, "mnist-worker-0")), "0,1,2");
    pod_set_phase(pod_named(&f, "mnist-worker-3"), "Running");
    fx_run(&f, NOW + 4);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n"
                                "patch-pod mnist-worker-2\n"
                                "patch-pod mnist-worker-3\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "members"), "0,1,2,3");
    assert_string_equal(cond_message(st, "Resized"),
                        "grew from 3 to 4 workers (members 0,1,2,3): pod mnist-worker-3 runs");
    assert_int_equal(jsonx_int(st, "attempt", 0), 0);
    assert_null(strstr(f.desc, "WorkersChanged"));
    fx_apply(&f);
    /* no pod deleted since the shrink (the lists above are exact): the survivors'
     * annotations name index 3's address */
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "mnist-worker-%d", i);
        assert_string_equal(members_of(pod_named(&f, name)), "0,1,2,3=" W3_ADDR);
    }
    fx_run(&f, NOW + 5);
    assert_null(strstr(f.desc, "-pod"));
    fx_apply(&f);
    assert_int_equal(jsonx_int(f.job, "status.currentWorkers", -1), 4);
    /* worker 1 lost: its replacement names the grown cluster */
    for (size_t i = 0; i < f.npods; i++) {
        if (strcmp(jsonx_str(f.pods[i], "metadata.name"), "mnist-worker-1") != 0) continue;
        cJSON_Delete(f.pods[i]);
        f.pods[i] = f.pods[--f.npods];
        break;
    }
    fx_run(&f, NOW + 6);
    fx_apply(&f);
    fx_run(&f, NOW + 7);
    const Action *r = find_action(&f, ACTION_CREATE_POD, "mnist-worker-1");
    assert_cluster(r->object, 4);
    assert_string_equal(members_of(r->object), "0,1,2,3=" W3_ADDR);
    fx_free(&f);
}

/* Scaled from 3 to 2 and back to 3: within the attempt's TF_CONFIG, so in place. Every
 * pod made meanwhile names the attempt's 3 workers in its TF_CONFIG, whatever
 * spec.workers is then (a replacement made at 2 workers would otherwise disagree with
 * its peers about the cluster), and a new worker 2 names the members and itself. */
static void test_elastic_scale_down_then_up(void **state)
{
    (void)state;
    Fixture f;
    fx_scaled_to_2(&f);
    assert_string_equal(jsonx_str(jsonx_obj(f.job, "status"), "members"), "0,1");
    /* worker 1 lost at 2 workers: its replacement's TF_CONFIG still names 3 */
    for (size_t i = 0; i < f.npods; i++) {
        if (strcmp(jsonx_str(f.pods[i], "metadata.name"), "mnist-worker-1") != 0) continue;
        cJSON_Delete(f.pods[i]);
        f.pods[i] = f.pods[--f.npods];
        break;
    }
    fx_run(&f, NOW + 2);
    assert_non_null(strstr(f.desc, "event Normal WorkerReplaced\n"));
    fx_apply(&f);
    fx_run(&f, NOW + 3);
    const Action *r = find_action(&f, ACTION_CREATE_POD, "mnist-worker-1");
    assert_string_equal(
        jsonx_key_str(jsonx_obj(r->object, "metadata.annotations"), "kubetrain.dev/world-size"),
        "3");
    cJSON *tf = cJSON_Parse(env_of(r->object, "TF_CONFIG"));
    assert_int_equal(cJSON_GetArraySize(jsonx_arr(tf, "cluster.worker")), 3);
    cJSON_Delete(tf);
    fx_apply(&f);
    pod_set_phase(pod_named(&f, "mnist-worker-1"), "Running");
    fx_run(&f, NOW + 4);
    fx_apply(&f);
    /* back to 3: worker 2 made in the same attempt, naming the members and itself */
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 3);
    fx_run(&f, NOW + 5);
    assert_null(strstr(f.desc, "WorkersChanged"));
    const Action *w = find_action(&f, ACTION_CREATE_POD, "mnist-worker-2");
    assert_string_equal(members_of(w->object), "0,1,2");
    tf = cJSON_Parse(env_of(w->object, "TF_CONFIG"));
    assert_int_equal(cJSON_GetArraySize(jsonx_arr(tf, "cluster.worker")), 3);
    cJSON_Delete(tf);
    fx_apply(&f);
    pod_set_phase(pod_named(&f, "mnist-worker-2"), "Running");
    fx_run(&f, NOW + 6);
    assert_string_equal(cond_message(new_status(&f), "Resized"),
                        "grew from 2 to 3 workers (members 0,1,2): pod mnist-worker-2 runs");
    fx_free(&f);
}

/* What an elastic job does not resize in place: a shrink that would leave fewer than
 * minWorkers, and any resize of a job that is not elastic. */
static void test_elastic_resize_restarts(void **state)
{
    (void)state;
    Fixture f;
    /* members 0,2 (worker 1 dropped earlier): scaling to 2 would leave worker 0 alone */
    fx_elastic3(&f, ESPEC3, ST_LAUNCHED(",\"members\":\"0,2\""), 2);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning WorkersChanged\n"
                                "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n"
                                "delete-pod mnist-worker-2\n");
    const cJSON *st = new_status(&f);
    assert_int_equal(jsonx_int(st, "attempt", -1), 1);
    assert_null(jsonx_at(st, "members"));
    fx_free(&f);

    /* Not elastic: the same scale down restarts the group, as always. */
    fx_elastic3(&f, "{\"workers\":3,\"checkpoint\":{\"claimName\":\"ckpt\"}}", ST_LAUNCHED(""), 2);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning WorkersChanged\n"
                                "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n"
                                "delete-pod mnist-worker-2\n");
    fx_free(&f);
}

/* The running job's pod `name` lost and replaced live: the replacement made (Pending,
 * created at `created`). */
static void fx_lose_and_replace(Fixture *f, const char *name, double created)
{
    jsonx_set_str(jsonx_ensure_obj(f->job, "status"), "phase", "Running");
    for (size_t j = 0; j < f->npods; j++)
        if (strcmp(jsonx_str(f->pods[j], "metadata.name"), name) == 0) {
            cJSON_Delete(f->pods[j]);
            f->pods[j] = f->pods[--f->npods];
            break;
        }
    fx_run(f, created);
    assert_non_null(strstr(f->desc, "event Normal WorkerReplaced\n"));
    fx_apply(f);
    fx_run(f, created);
    char want[64];
    snprintf(want, sizeof want, "create-pod %s\n", name);
    assert_non_null(strstr(f->desc, want));
    fx_apply(f);
    char ts[32];
    clock_format_rfc3339(created, ts, sizeof ts);
    jsonx_set_str(jsonx_ensure_obj(pod_named(f, name), "metadata"), "creationTimestamp", ts);
}

/* A running elastic job of 3 workers whose worker `lost` was lost and replaced live: the
 * replacement made (Pending, created at `created`). */
static void fx_elastic_replacing(Fixture *f, const char *spec, int lost, double created)
{
    char name[32];
    fx_elastic3(f, spec, ST_LAUNCHED(""), 3);
    snprintf(name, sizeof name, "mnist-worker-%d", lost);
    fx_lose_and_replace(f, name, created);
}

/* The pod's annotation `key`, "(none)" when absent. */
static const char *annotation_of(const cJSON *pod, const char *key)
{
    const char *v = jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), key);
    return v ? v : "(none)";
}

/* After a resize's patches the survivors are updated again every MEMBERS_NUDGE_S seconds,
 * MEMBERS_NUDGES times, each time only ANNOT_MEMBERS_NUDGE (a kubelet that missed the
 * prompt refresh of the members file syncs the pod again), and the job is looked at
 * again for each; none after that, and none for a pod the operator did not patch. */
static void test_elastic_members_nudge(void **state)
{
    (void)state;
    Fixture f;
    fx_elastic3(&f, ESPEC3, ST_LAUNCHED(""), 2);
    fx_run(&f, NOW);
    assert_true(f.plan.requeue_after >= 0 && f.plan.requeue_after <= MEMBERS_NUDGE_S);
    const cJSON *patch = find_action(&f, ACTION_PATCH_POD, "mnist-worker-0")->object;
    assert_string_equal(annotation_of(patch, ANNOT_MEMBERS_NUDGE), "0");
    char ts[32];
    clock_format_rfc3339(NOW, ts, sizeof ts);
    assert_string_equal(annotation_of(patch, ANNOT_MEMBERS_AT), ts);
    fx_apply(&f);
    fx_run(&f, NOW + 2);
    assert_null(strstr(f.desc, "patch-pod"));
    assert_close(f.plan.requeue_after, MEMBERS_NUDGE_S - 2, 0.01);
    fx_apply(&f);
    for (int n = 1; n <= MEMBERS_NUDGES; n++) {
        fx_run(&f, NOW + n * MEMBERS_NUDGE_S + 0.5);
        assert_string_equal(f.desc, "patch-pod mnist-worker-0\n"
                                    "patch-pod mnist-worker-1\n");
        patch = find_action(&f, ACTION_PATCH_POD, "mnist-worker-1")->object;
        char want[16];
        snprintf(want, sizeof want, "%d", n);
        assert_string_equal(annotation_of(patch, ANNOT_MEMBERS_NUDGE), want);
        assert_string_equal(annotation_of(patch, ANNOT_MEMBERS), "(none)");
        if (n < MEMBERS_NUDGES) assert_close(f.plan.requeue_after, MEMBERS_NUDGE_S - 0.5, 0.01);
        fx_apply(&f);
        /* the same period again: done */
        fx_run(&f, NOW + n * MEMBERS_NUDGE_S + 1);
        assert_null(strstr(f.desc, "patch-pod"));
        fx_apply(&f);
    }
    assert_string_equal(annotation_of(pod_named(&f, "mnist-worker-0"), ANNOT_MEMBERS), "0,1");
    fx_run(&f, NOW + (MEMBERS_NUDGES + 2) * MEMBERS_NUDGE_S);
    assert_null(strstr(f.desc, "patch-pod"));
    assert_true(f.plan.requeue_after < 0);
    fx_free(&f);
}

/* A lost worker's replacement that the scheduler cannot place: the survivors go on
 * without it (status.members, Resized/Shrank saying why, their annotations patched; the
 * replacement stays, Pending); once it runs it joins them again (Grew, the others patched
 * to name it). */
static void test_elastic_shrink_when_replacement_unschedulable(void **state)
{
    (void)state;
    Fixture f;
    fx_elastic_replacing(&f, ESPEC3, 2, NOW);
    jsonx_set(jsonx_ensure_obj(pod_named(&f, "mnist-worker-2"), "status"), "conditions",
              cJSON_Parse("[{\"type\":\"PodScheduled\",\"status\":\"False\",\"reason\":"
                          "\"Unschedulable\",\"message\":\"0/1 nodes are available: 1 "
                          "Insufficient cpu.\"}]"));
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "members"), "0,1");
    assert_string_equal(cond_message(st, "Resized"),
                        "shrank from 3 to 2 workers (members 0,1): pod mnist-worker-2 "
                        "unschedulable: 0/1 nodes are available: 1 Insufficient cpu.");
    assert_int_equal(jsonx_int(st, "attempt", 0), 0);
    fx_apply(&f);
    assert_string_equal(members_of(pod_named(&f, "mnist-worker-0")), "0,1");
    assert_string_equal(members_of(pod_named(&f, "mnist-worker-2")), "0,1,2");
    fx_run(&f, NOW + 3);
    assert_null(strstr(f.desc, "-pod"));
    fx_apply(&f);

    /* A scale to 4 meanwhile: past the attempt's TF_CONFIG, in place too: worker 3 is
     * made (not taken here: the plan is dropped). */
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 4);
    fx_run(&f, NOW + 4);
    assert_int_equal(count_lines(&f, "event Warning WorkersChanged"), 0);
    assert_int_equal(count_lines(&f, "create-pod mnist-worker-3"), 1);
    plan_free(&f.plan);
    free(f.desc);
    f.desc = NULL;
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 3);

    pod_set_phase(pod_named(&f, "mnist-worker-2"), "Running");
    fx_run(&f, NOW + 60);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n");
    st = new_status(&f);
    assert_string_equal(jsonx_str(st, "members"), "0,1,2");
    assert_cond(st, "Resized", "True/Grew");
    assert_string_equal(cond_message(st, "Resized"),
                        "grew from 2 to 3 workers (members 0,1,2): pod mnist-worker-2 runs");
    fx_apply(&f);
    for (int i = 0; i < 3; i++)
        assert_string_equal(members_of(f.pods[i]), "0,1,2");
    fx_free(&f);
}

/* The same after elastic.replaceTimeoutSeconds with the replacement not running (no word
 * from the scheduler): looked at again when the time is up, shrunk then. Not below
 * minWorkers; the chief's slot (worker 0 here) as any other. */
static void test_elastic_shrink_after_replace_timeout(void **state)
{
    (void)state;
    Fixture f;
    fx_elastic_replacing(&f, ESPEC3, 1, NOW);
    fx_run(&f, NOW + 10);
    assert_null(strstr(f.desc, "Resized"));
    assert_close(f.plan.requeue_after, 20, 1e-9);
    plan_free(&f.plan);
    free(f.desc);
    f.desc = NULL;
    fx_run(&f, NOW + 30);
    assert_string_equal(cond_message(new_status(&f), "Resized"),
                        "shrank from 3 to 2 workers (members 0,2): pod mnist-worker-1 not "
                        "running 30 s (elastic.replaceTimeoutSeconds) after it was made to "
                        "replace a lost one");
    fx_free(&f);

    fx_elastic_replacing(&f, "{\"workers\":3,\"elastic\":{\"minWorkers\":3}}", 1, NOW);
    fx_run(&f, NOW + 60);
    assert_null(strstr(f.desc, "Resized"));
    fx_free(&f);

    fx_elastic_replacing(&f, ESPEC3, 0, NOW);
    fx_run(&f, NOW + 60);
    assert_string_equal(cond_message(new_status(&f), "Resized"),
                        "shrank from 3 to 2 workers (members 1,2): pod mnist-worker-0 not "
                        "running 30 s (elastic.replaceTimeoutSeconds) after it was made to "
                        "replace a lost one");
    fx_free(&f);
}

#define UNSCHED "0/1 nodes are available: 1 Insufficient cpu."
static void pod_unschedulable(cJSON *pod, const char *message);

/* The chief's pod lost while its room is taken (issue 46): worker 0, the chief of a job
 * without a chief task, lost and its replacement unschedulable, minWorkers 2 of 3. Its
 * slot leaves the members as a worker's would (status.members, Resized/Shrank naming the
 * pod, the event, the survivors patched; the replacement left Pending, naming itself,
 * its chief label kept). The lowest member, worker 1, completes the job: worker 2's exit
 * first decides nothing (the left-out replacement strands no one), worker 1's does, with
 * its result. */
static void test_elastic_chief_lost_shrinks(void **state)
{
    (void)state;
    Fixture f;
    fx_elastic_replacing(&f, ESPEC3, 0, NOW);
    pod_unschedulable(pod_named(&f, "mnist-worker-0"), UNSCHED);
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-1\n"
                                "patch-pod mnist-worker-2\n");
    const char *want = "shrank from 3 to 2 workers (members 1,2): pod mnist-worker-0 "
                       "unschedulable: " UNSCHED;
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "members"), "1,2");
    assert_cond(st, "Resized", "True/Shrank");
    assert_string_equal(cond_message(st, "Resized"), want);
    assert_string_equal(find_action(&f, ACTION_EVENT, "mnist")->message, want);
    assert_int_equal(jsonx_int(st, "attempt", 0), 0);
    fx_apply(&f);
    assert_string_equal(members_of(pod_named(&f, "mnist-worker-1")), "1,2");
    assert_string_equal(members_of(pod_named(&f, "mnist-worker-2")), "1,2");
    cJSON *w0 = pod_named(&f, "mnist-worker-0");
    assert_string_equal(members_of(w0), "0,1,2");
    assert_string_equal(jsonx_key_str(jsonx_obj(w0, "metadata.labels"), "kubetrain.dev/chief"),
                        "true");
    fx_run(&f, NOW + 3);
    assert_null(strstr(f.desc, "-pod"));
    fx_apply(&f);

    pod_terminated(pod_named(&f, "mnist-worker-2"), 0,
                   "{\"step\":300,\"epoch\":5,\"loss\":0.5,\"accuracy\":0.8}");
    fx_run(&f, NOW + 4);
    assert_string_equal(f.desc, "update-status mnist\n");
    st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Running");
    assert_null(jsonx_at(st, "result"));
    fx_apply(&f);
    pod_terminated(pod_named(&f, "mnist-worker-1"), 0,
                   "{\"step\":300,\"epoch\":5,\"loss\":0.3,\"accuracy\":0.9,"
                   "\"weights_sha256\":\"cd34\"}");
    fx_run(&f, NOW + 5);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Completed\n"
                                "delete-pod mnist-worker-0\n");
    st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Succeeded");
    assert_string_equal(cond_message(st, "Succeeded"),
                        "the chief (worker 1, the lowest member while worker 0 is left out) "
                        "completed");
    assert_close(jsonx_num(st, "result.loss", 0), 0.3, 0);
    assert_string_equal(jsonx_str(st, "result.weightsSha256"), "cd34");
    fx_free(&f);
}

/* The chief's loss below minWorkers changes nothing (the survivors wait out
 * recoveryTimeoutSeconds, then the group restarts): worker 0 of 3 with minWorkers 3.
 * With a chief task the chief is no worker: its loss leaves every worker, so minWorkers 3
 * of 3 still shrinks. */
static void test_elastic_chief_lost_below_min(void **state)
{
    (void)state;
    Fixture f;
    fx_elastic_replacing(&f, "{\"workers\":3,\"elastic\":{\"minWorkers\":3}}", 0, NOW);
    pod_unschedulable(pod_named(&f, "mnist-worker-0"), UNSCHED);
    fx_run(&f, NOW + 60);
    assert_string_equal(f.desc, "event Warning PodsWaiting\n"
                                "update-status mnist\n");
    const cJSON *st = new_status(&f);
    assert_null(jsonx_at(st, "members"));
    assert_cond(st, "Resized", "absent");
    assert_string_equal(jsonx_str(st, "phase"), "Running");
    fx_free(&f);

    f = (Fixture){.job = job_new("{\"workers\":3,\"chief\":{},\"elastic\":{\"minWorkers\":3}}",
                                 ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_role_pod(&f, ROLE_CHIEF, 0, "Running");
    for (int i = 0; i < 3; i++)
        fx_role_pod(&f, ROLE_WORKER, i, "Running");
    fx_lose_and_replace(&f, "mnist-chief-0", NOW);
    pod_unschedulable(pod_named(&f, "mnist-chief-0"), UNSCHED);
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n"
                                "patch-pod mnist-worker-2\n");
    assert_string_equal(cond_message(new_status(&f), "Resized"),
                        "shrank from 3 workers and the chief to 3 workers (members 1,2,3): pod "
                        "mnist-chief-0 unschedulable: " UNSCHED);
    fx_free(&f);
}

/* The chief's slot running again (a chief task here) joins back (Grew, the workers
 * patched to name it) and completes the job again: worker 0, the lowest worker, decided
 * while the chief was out; now its exit decides nothing, the chief's does. */
static void test_elastic_chief_grows_back(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":3,\"chief\":{},\"elastic\":{\"minWorkers\":2}}",
                                ST_LAUNCHED(""))};
    fx_with_support(&f);
    fx_role_pod(&f, ROLE_CHIEF, 0, "Running");
    for (int i = 0; i < 3; i++)
        fx_role_pod(&f, ROLE_WORKER, i, "Running");
    fx_lose_and_replace(&f, "mnist-chief-0", NOW);
    fx_run(&f, NOW + 30); /* replaceTimeoutSeconds */
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n"
                                "patch-pod mnist-worker-2\n");
    assert_string_equal(jsonx_str(new_status(&f), "members"), "1,2,3");
    fx_apply(&f);

    cJSON *chief = pod_named(&f, "mnist-chief-0");
    pod_set_phase(chief, "Running");
    jsonx_set(jsonx_ensure_obj(chief, "status"), "containerStatuses",
              cJSON_Parse("[{\"name\":\"trainer\",\"state\":{\"running\":"
                          "{\"startedAt\":\"2027-01-15T08:00:59Z\"}}}]"));
    fx_run(&f, NOW + 60);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n"
                                "patch-pod mnist-worker-2\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "members"), "0,1,2,3");
    assert_cond(st, "Resized", "True/Grew");
    assert_string_equal(cond_message(st, "Resized"),
                        "grew from 3 workers to 3 workers and the chief (members 0,1,2,3): pod "
                        "mnist-chief-0 runs");
    fx_apply(&f);
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "mnist-worker-%d", i);
        assert_string_equal(members_of(pod_named(&f, name)), "0,1,2,3");
    }
    pod_terminated(pod_named(&f, "mnist-worker-0"), 0, "{\"step\":300}");
    fx_run(&f, NOW + 61);
    assert_string_equal(f.desc, "update-status mnist\n");
    assert_string_equal(jsonx_str(new_status(&f), "phase"), "Running");
    fx_apply(&f);
    pod_terminated(pod_named(&f, "mnist-chief-0"), 0, "{\"step\":300,\"loss\":0.25}");
    fx_run(&f, NOW + 62);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Completed\n"
                                "delete-pod mnist-worker-2\n"
                                "delete-pod mnist-worker-1\n");
    st = new_status(&f);
    assert_string_equal(cond_message(st, "Succeeded"), "the chief completed");
    assert_close(jsonx_num(st, "result.loss", 0), 0.25, 0);
    fx_free(&f);
}

/* The chief's slot back at the last steps (docs/design.md, "The chief."): worker 0 lost
 * and left out (members 1,2), its replacement runs as the survivors take their last
 * steps and is patched in (Grew), so it is the chief again; its trainer never joins (the
 * ring takes no growth at its last step), the survivors finish, and the trainer, finding
 * the checkpoint of the last step, exits 0 with the step alone. The survivors' exits
 * decide nothing; worker 0's completes the job, no restart: its message is the result. */
static void test_elastic_chief_back_at_the_end(void **state)
{
    (void)state;
    Fixture f;
    fx_elastic_replacing(&f, ESPEC3, 0, NOW);
    pod_unschedulable(pod_named(&f, "mnist-worker-0"), UNSCHED);
    fx_run(&f, NOW + 2);
    assert_string_equal(jsonx_str(new_status(&f), "members"), "1,2");
    fx_apply(&f);
    cJSON *w0 = pod_named(&f, "mnist-worker-0");
    pod_set_phase(w0, "Running");
    jsonx_set(jsonx_ensure_obj(w0, "status"), "conditions", cJSON_CreateArray());
    jsonx_set(jsonx_ensure_obj(w0, "status"), "containerStatuses",
              cJSON_Parse("[{\"name\":\"trainer\",\"state\":{\"running\":"
                          "{\"startedAt\":\"2027-01-15T08:00:59Z\"}}}]"));
    fx_run(&f, NOW + 60);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-1\n"
                                "patch-pod mnist-worker-2\n");
    assert_string_equal(jsonx_str(new_status(&f), "members"), "0,1,2");
    fx_apply(&f);

    pod_terminated(pod_named(&f, "mnist-worker-2"), 0,
                   "{\"step\":50,\"epoch\":1,\"loss\":0.5,\"accuracy\":0.8}");
    pod_terminated(pod_named(&f, "mnist-worker-1"), 0,
                   "{\"step\":50,\"epoch\":1,\"loss\":0.5,\"accuracy\":0.8,"
                   "\"weights_sha256\":\"cd34\",\"export\":\"/out/m.keras\"}");
    fx_run(&f, NOW + 61);
    assert_string_equal(f.desc, "update-status mnist\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Running");
    assert_int_equal(jsonx_int(st, "attempt", 0), 0);
    fx_apply(&f);
    pod_terminated(pod_named(&f, "mnist-worker-0"), 0, "{\"step\":50,\"checkpoint_step\":50}");
    fx_run(&f, NOW + 62);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Completed\n");
    st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Succeeded");
    assert_string_equal(cond_message(st, "Succeeded"), "the chief (worker 0) completed");
    assert_int_equal(jsonx_int(st, "result.step", -1), 50);
    assert_null(jsonx_at(st, "result.weightsSha256"));
    assert_int_equal(jsonx_int(st, "attempt", 0), 0);
    fx_free(&f);
}

/* Sets a Pending pod's PodScheduled condition as the scheduler does. */
static void pod_unschedulable(cJSON *pod, const char *message)
{
    cJSON *cond = cJSON_CreateArray(), *c = cJSON_CreateObject();
    jsonx_set_str(c, "type", "PodScheduled");
    jsonx_set_str(c, "status", "False");
    jsonx_set_str(c, "reason", "Unschedulable");
    jsonx_set_str(c, "message", message);
    cJSON_AddItemToArray(cond, c);
    jsonx_set(jsonx_ensure_obj(pod, "status"), "conditions", cond);
}

/* An elastic job's first attempt (launched, 3 workers as ESPEC3) whose pods are Pending
 * and made at `created`; `bound` of them (workers 0..bound-1) bound to a node. */
static void fx_elastic_start(Fixture *f, const char *spec, int bound, double created)
{
    memset(f, 0, sizeof *f);
    f->job = job_new(spec, ST_LAUNCHED(""));
    fx_with_support(f);
    char ts[32];
    clock_format_rfc3339(created, ts, sizeof ts);
    for (int i = 0; i < 3; i++) {
        cJSON *p = fx_pod(f, i, 0, "Pending");
        jsonx_set_str(jsonx_ensure_obj(p, "metadata"), "creationTimestamp", ts);
        if (i < bound) jsonx_set_str(jsonx_ensure_obj(p, "spec"), "nodeName", "node-a");
    }
}

/* An attempt that starts with a worker the scheduler cannot place, the others bound
 * (not running yet): it starts at 2 without it (status.members, Resized/Shrank saying
 * why, the placed pods' annotations patched before their trainers start; no restart,
 * the pod left Pending naming itself); once it runs it joins them (Grew). */
static void test_elastic_start_without_unschedulable(void **state)
{
    (void)state;
    Fixture f;
    fx_elastic_start(&f, ESPEC3, 2, NOW);
    fx_run(&f, NOW + 1);
    assert_null(strstr(f.desc, "Resized")); /* worker 2 not judged yet: wait */
    assert_close(f.plan.requeue_after, 29, 1e-9);
    plan_free(&f.plan);
    free(f.desc);
    f.desc = NULL;
    pod_unschedulable(pod_named(&f, "mnist-worker-2"),
                      "0/1 nodes are available: 1 Insufficient cpu.");
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n");
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "members"), "0,1");
    assert_cond(st, "Resized", "True/Shrank");
    assert_string_equal(cond_message(st, "Resized"),
                        "shrank from 3 to 2 workers (members 0,1): pod mnist-worker-2 "
                        "unschedulable: 0/1 nodes are available: 1 Insufficient cpu.");
    assert_int_equal(jsonx_int(st, "attempt", 0), 0);
    fx_apply(&f);
    assert_string_equal(members_of(pod_named(&f, "mnist-worker-0")), "0,1");
    assert_string_equal(members_of(pod_named(&f, "mnist-worker-2")), "0,1,2");
    pod_set_phase(pod_named(&f, "mnist-worker-0"), "Running");
    pod_set_phase(pod_named(&f, "mnist-worker-1"), "Running");
    fx_run(&f, NOW + 3);
    assert_null(strstr(f.desc, "-pod"));
    assert_int_equal(jsonx_int(new_status(&f), "currentWorkers", -1), 2);
    fx_apply(&f);

    pod_set_phase(pod_named(&f, "mnist-worker-2"), "Running");
    fx_run(&f, NOW + 60);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n");
    st = new_status(&f);
    assert_string_equal(jsonx_str(st, "members"), "0,1,2");
    assert_string_equal(cond_message(st, "Resized"),
                        "grew from 2 to 3 workers (members 0,1,2): pod mnist-worker-2 runs");
    fx_apply(&f);
    for (int i = 0; i < 3; i++)
        assert_string_equal(members_of(f.pods[i]), "0,1,2");
    fx_free(&f);
}

/* What an attempt's start does not shrink for: fewer than minWorkers placed (two of
 * three unschedulable, or one bound and one not yet judged), and a job that is not
 * elastic. The chief's own pod (worker 0 here) unschedulable leaves as another would.
 * Not running after replaceTimeoutSeconds counts as unschedulable: both unplaced workers
 * leave at once. */
static void test_elastic_start_below_min(void **state)
{
    (void)state;
    Fixture f;
    const char *m = "0/1 nodes are available: 1 Insufficient cpu.";
    fx_elastic_start(&f, ESPEC3, 1, NOW);
    pod_unschedulable(pod_named(&f, "mnist-worker-1"), m);
    pod_unschedulable(pod_named(&f, "mnist-worker-2"), m);
    fx_run(&f, NOW + 2);
    assert_null(strstr(f.desc, "Resized"));
    assert_null(strstr(f.desc, "-pod"));
    assert_null(jsonx_str(new_status(&f), "members"));
    plan_free(&f.plan);
    free(f.desc);
    f.desc = NULL;
    /* one bound, one unschedulable, one not judged: wait */
    cJSON_DeleteItemFromObject(jsonx_ensure_obj(pod_named(&f, "mnist-worker-1"), "status"),
                               "conditions");
    fx_run(&f, NOW + 2);
    assert_null(strstr(f.desc, "Resized"));
    fx_free(&f);

    /* worker 0, the chief without a chief task, unschedulable: the others start without
     * it, worker 1 their chief */
    fx_elastic_start(&f, ESPEC3, 0, NOW);
    jsonx_set_str(jsonx_ensure_obj(pod_named(&f, "mnist-worker-1"), "spec"), "nodeName", "n");
    jsonx_set_str(jsonx_ensure_obj(pod_named(&f, "mnist-worker-2"), "spec"), "nodeName", "n");
    pod_unschedulable(pod_named(&f, "mnist-worker-0"), m);
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-1\n"
                                "patch-pod mnist-worker-2\n");
    assert_string_equal(cond_message(new_status(&f), "Resized"),
                        "shrank from 3 to 2 workers (members 1,2): pod mnist-worker-0 "
                        "unschedulable: 0/1 nodes are available: 1 Insufficient cpu.");
    fx_free(&f);
    /* ... but not below minWorkers: with worker 2 unschedulable too, wait */
    fx_elastic_start(&f, ESPEC3, 0, NOW);
    jsonx_set_str(jsonx_ensure_obj(pod_named(&f, "mnist-worker-1"), "spec"), "nodeName", "n");
    pod_unschedulable(pod_named(&f, "mnist-worker-0"), m);
    pod_unschedulable(pod_named(&f, "mnist-worker-2"), m);
    fx_run(&f, NOW + 2);
    assert_null(strstr(f.desc, "Resized"));
    assert_null(strstr(f.desc, "-pod"));
    fx_free(&f);

    /* minWorkers 1: both unbound workers leave once replaceTimeoutSeconds has passed */
    fx_elastic_start(&f, "{\"workers\":3,\"elastic\":{\"minWorkers\":1}}", 1, NOW);
    pod_set_phase(pod_named(&f, "mnist-worker-0"), "Running");
    fx_run(&f, NOW + 10);
    assert_null(strstr(f.desc, "Resized"));
    assert_close(f.plan.requeue_after, 20, 1e-9);
    plan_free(&f.plan);
    free(f.desc);
    f.desc = NULL;
    fx_run(&f, NOW + 30);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n");
    assert_string_equal(cond_message(new_status(&f), "Resized"),
                        "shrank from 3 to 1 workers (members 0): pod mnist-worker-1 not running "
                        "30 s (elastic.replaceTimeoutSeconds) after it was made; pod "
                        "mnist-worker-2 not running 30 s (elastic.replaceTimeoutSeconds) after "
                        "it was made");
    fx_free(&f);

    /* not elastic: the attempt waits for every pod, as always */
    fx_elastic_start(&f, "{\"workers\":3}", 2, NOW);
    pod_unschedulable(pod_named(&f, "mnist-worker-2"), m);
    fx_run(&f, NOW + 60);
    assert_null(strstr(f.desc, "Resized"));
    assert_null(strstr(f.desc, "-pod"));
    fx_free(&f);
}

/* An elastic job's global batch goes into status in the pass that creates the Secret,
 * before any pod; a scale before the pods are made (or at any later time) leaves it, and
 * the pods are given it. A job that is not elastic records none. */
static void test_elastic_global_batch_recorded(void **state)
{
    (void)state;
    Fixture f = {.job = job_new("{\"workers\":3,\"elastic\":{\"minWorkers\":2},\"training\":{"
                                "\"perWorkerBatchSize\":32}}",
                                NULL)};
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-secret mnist-secret-\n"
                                "create-service mnist-worker\n"
                                "update-status mnist\n");
    assert_int_equal(jsonx_int(new_status(&f), "globalBatch", -1), 96);
    fx_apply(&f);
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 2);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-pod mnist-worker-0\n"
                                "create-pod mnist-worker-1\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    assert_int_equal(jsonx_int(new_status(&f), "globalBatch", -1), 96);
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "mnist-worker-%d", i);
        const cJSON *pod = find_action(&f, ACTION_CREATE_POD, name)->object;
        assert_string_equal(arg_after(pod, "--global-batch"), "96");
        assert_string_equal(
            jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), "kubetrain.dev/members"), "0,1");
    }
    fx_free(&f);

    Fixture g = {.job = job_new("{\"workers\":3}", NULL)};
    fx_run(&g, NOW);
    assert_null(jsonx_at(new_status(&g), "globalBatch"));
    fx_free(&g);
}

/* The pods of an elastic C-trainer job: ANNOT_MEMBERS naming every chief and worker
 * (TF_CONFIG indices: the chief 0), projected by a downwardAPI volume as the file that
 * KUBETRAIN_MEMBERS_FILE names, and --global-batch fixed: the world times
 * perWorkerBatchSize, or status.globalBatch once recorded (a later scale leaves it). A job
 * that is not elastic, or cannot resize in place (a user's program, NCCL, no live
 * recovery), gets none of it. */
static void test_elastic_pod(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *status;
        Role role;
        int index;
        const char *members, *global_batch;
    } cases[] = {
        {"{\"workers\":3,\"elastic\":{\"minWorkers\":2},\"training\":{\"perWorkerBatchSize\":32}}",
         NULL, ROLE_WORKER, 2, "0,1,2", "96"},
        {"{\"workers\":2,\"elastic\":{\"minWorkers\":2},\"training\":{\"perWorkerBatchSize\":32}}",
         "{\"globalBatch\":96}", ROLE_WORKER, 0, "0,1", "96"},
        {"{\"workers\":2,\"chief\":{},\"elastic\":{\"minWorkers\":1}}", NULL, ROLE_CHIEF, 0,
         "0,1,2", "192"},
        {"{\"workers\":2,\"chief\":{},\"elastic\":{\"minWorkers\":1}}", NULL, ROLE_WORKER, 1,
         "0,1,2", "192"},
        {"{\"workers\":3}", NULL, ROLE_WORKER, 0, NULL, NULL},
        {"{\"workers\":3,\"elastic\":{\"minWorkers\":2},\"image\":\"tf\",\"command\":[\"p\"]}",
         NULL, ROLE_WORKER, 0, NULL, NULL},
        {"{\"workers\":3,\"elastic\":{\"minWorkers\":2},\"gpusPerWorker\":1}", NULL, ROLE_WORKER, 0,
         NULL, NULL},
        {"{\"workers\":3,\"elastic\":{\"minWorkers\":2},\"recoveryTimeoutSeconds\":0}", NULL,
         ROLE_WORKER, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *pod = spec_pod(cases[i].spec, cases[i].status, cases[i].role, cases[i].index);
        const char *members = members_of(pod);
        const char *file = env_of(pod, "KUBETRAIN_MEMBERS_FILE");
        const cJSON *vol = NULL, *mount = NULL, *it;
        cJSON_ArrayForEach(it, jsonx_arr(pod, "spec.volumes"))
        {
            if (strcmp(jsonx_str(it, "name"), "kubetrain-members") == 0) vol = it;
        }
        cJSON_ArrayForEach(it, jsonx_arr(container(pod, "trainer"), "volumeMounts"))
        {
            if (strcmp(jsonx_str(it, "name"), "kubetrain-members") == 0) mount = it;
        }
        if (!cases[i].members) {
            assert_string_equal(members, "(none)");
            assert_null(file);
            assert_null(vol);
            assert_null(mount);
            assert_string_equal(arg_after(pod, "--global-batch"), "(none)");
            cJSON_Delete(pod);
            continue;
        }
        assert_string_equal(members, cases[i].members);
        assert_string_equal(file ? file : "(none)", "/etc/kubetrain-members/members");
        assert_non_null(vol);
        const cJSON *item = cJSON_GetArrayItem(jsonx_arr(vol, "downwardAPI.items"), 0);
        assert_string_equal(jsonx_str(item, "path"), "members");
        assert_string_equal(jsonx_str(item, "fieldRef.fieldPath"),
                            "metadata.annotations['kubetrain.dev/members']");
        assert_non_null(mount);
        assert_string_equal(jsonx_str(mount, "mountPath"), "/etc/kubetrain-members");
        assert_true(jsonx_bool(mount, "readOnly", 0));
        assert_string_equal(arg_after(pod, "--global-batch"), cases[i].global_batch);
        cJSON_Delete(pod);
    }
    /* desired_pod_set_members replaces the list */
    cJSON *pod = spec_pod("{\"workers\":3,\"elastic\":{\"minWorkers\":2}}", NULL, ROLE_WORKER, 0);
    assert_int_equal(desired_pod_set_members(pod, "0,2"), 0);
    assert_string_equal(members_of(pod), "0,2");
    cJSON_Delete(pod);
    assert_spec_refused("{\"workers\":5,\"elastic\":{\"minWorkers\":2},"
                        "\"training\":{\"perWorkerBatchSize\":1000000}}",
                        "spec.elastic: the global batch, 5 workers x perWorkerBatchSize 1000000 = "
                        "5000000, exceeds the trainer's 4194304");
    cJSON *job = job_new("{\"workers\":2,\"elastic\":{\"minWorkers\":1}}", "{\"globalBatch\":0}");
    JobSpec s;
    char err[256] = "";
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), -EINVAL);
    assert_string_equal(err, "status.globalBatch: expected an integer in [1, 4194304]");
    cJSON_Delete(job);
}

/* spec.dataset.source, evalSource, pixelScale, imageFeature, labelFeature, imageShape and
 * cacheMiB become the trainer's --data, --eval-data, --pixel-scale, --image-feature,
 * --label-feature, --image-shape and --data-cache-mib; unset, none of them is passed
 * (the trainer's defaults hold). */
static void test_data_source_args(void **state)
{
    (void)state;
    JobSpec s;
    char err[256];
    cJSON *job = job_new("{\"workers\":1,\"dataset\":{\"name\":\"fashion-mnist\",\"path\":"
                         "\"/data\",\"source\":\"npz:/data/fm.npz?x=images&y=labels\","
                         "\"evalSource\":\"npz:/data/test.npz\",\"pixelScale\":\"raw\"}}",
                         NULL);
    cJSON *tfr = job_new("{\"workers\":1,\"dataset\":{\"source\":\"tfrecord:/d/train-*\","
                         "\"imageFeature\":\"image/encoded\",\"labelFeature\":\"image/class\","
                         "\"imageShape\":[28,28,1],\"cacheMiB\":0}}",
                         NULL);
    assert_int_equal(jobspec_parse(tfr, &s, err, sizeof err), 0);
    cJSON *pod = desired_pod(&s, &CFG.desired, SECRET, ROLE_WORKER, 0, 0);
    assert_string_equal(arg_of(pod, "--data"), "tfrecord:/d/train-*");
    assert_string_equal(arg_of(pod, "--image-feature"), "image/encoded");
    assert_string_equal(arg_of(pod, "--label-feature"), "image/class");
    assert_string_equal(arg_of(pod, "--image-shape"), "28,28,1");
    assert_string_equal(arg_of(pod, "--data-cache-mib"), "0");
    cJSON_Delete(pod);
    cJSON_Delete(tfr);
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
    pod = desired_pod(&s, &CFG.desired, SECRET, ROLE_WORKER, 0, 0);
    assert_string_equal(arg_of(pod, "--data"), "npz:/data/fm.npz?x=images&y=labels");
    assert_string_equal(arg_of(pod, "--eval-data"), "npz:/data/test.npz");
    assert_string_equal(arg_of(pod, "--pixel-scale"), "raw");
    assert_string_equal(arg_of(pod, "--data-dir"), "/data");
    cJSON_Delete(pod);
    cJSON_Delete(job);
    job = job_new("{\"workers\":1,\"dataset\":{\"path\":\"/data\"}}", NULL);
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
    pod = desired_pod(&s, &CFG.desired, SECRET, ROLE_WORKER, 0, 0);
    assert_null(arg_of(pod, "--data"));
    assert_null(arg_of(pod, "--eval-data"));
    assert_null(arg_of(pod, "--pixel-scale"));
    assert_null(arg_of(pod, "--image-feature"));
    assert_null(arg_of(pod, "--label-feature"));
    assert_null(arg_of(pod, "--image-shape"));
    assert_null(arg_of(pod, "--data-cache-mib"));
    cJSON_Delete(pod);
    cJSON_Delete(job);
    const char *bad[][2] = {
        {"{\"dataset\":{\"pixelScale\":\"half\"}}",
         "spec.dataset.pixelScale: expected one of unit | raw"},
        {"{\"dataset\":{\"source\":7}}", "spec.dataset.source: expected a string"},
        {"{\"dataset\":{\"imageShape\":[28,28]}}",
         "spec.dataset.imageShape: expected [H, W, C], three integers in [1, 65535]"},
        {"{\"dataset\":{\"imageShape\":[28,0,1]}}",
         "spec.dataset.imageShape: expected [H, W, C], three integers in [1, 65535]"},
        {"{\"dataset\":{\"labelFeature\":[]}}", "spec.dataset.labelFeature: expected a string"},
        {"{\"dataset\":{\"cacheMiB\":-1}}",
         "spec.dataset.cacheMiB: expected an integer in [0, 1073741824]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        job = job_new(bad[i][0], NULL);
        assert_int_equal(jobspec_parse(job, &s, err, sizeof err), -EINVAL);
        assert_string_equal(err, bad[i][1]);
        cJSON_Delete(job);
    }
}

/* The trainer container's env entry `name`, or NULL. */
static const cJSON *env_entry(const cJSON *pod, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, jsonx_arr(container(pod, "trainer"), "env"))
    {
        if (strcmp(jsonx_str(e, "name"), name) == 0) return e;
    }
    return NULL;
}

/* An s3:// source reaches --data as given, and spec.dataset.credentialsSecret's keys
 * become the trainer's AWS_* env from the Secret: the key pair required (a missing
 * Secret keeps the pod from starting), the session token, region and endpoint optional.
 * Without it no AWS_* variable is set; a name that is not a Secret's is refused. */
static void test_data_credentials_secret(void **state)
{
    (void)state;
    JobSpec s;
    char err[256];
    cJSON *job = job_new("{\"workers\":1,\"dataset\":{\"source\":\"tfrecord:s3://b/p/train-*\","
                         "\"credentialsSecret\":\"s3-creds\"}}",
                         NULL);
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
    cJSON *pod = desired_pod(&s, &CFG.desired, SECRET, ROLE_WORKER, 0, 0);
    assert_string_equal(arg_of(pod, "--data"), "tfrecord:s3://b/p/train-*");
    const char *keys[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                          "AWS_REGION", "AWS_ENDPOINT_URL"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const cJSON *e = env_entry(pod, keys[i]);
        assert_non_null(e);
        assert_string_equal(jsonx_str(e, "valueFrom.secretKeyRef.name"), "s3-creds");
        assert_string_equal(jsonx_str(e, "valueFrom.secretKeyRef.key"), keys[i]);
        assert_int_equal(jsonx_bool(e, "valueFrom.secretKeyRef.optional", 0), i >= 2);
    }
    cJSON_Delete(pod);
    cJSON_Delete(job);
    job = job_new("{\"workers\":1,\"dataset\":{\"source\":\"tfrecord:s3://b/train-*\"}}", NULL);
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
    pod = desired_pod(&s, &CFG.desired, SECRET, ROLE_WORKER, 0, 0);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        assert_null(env_entry(pod, keys[i]));
    cJSON_Delete(pod);
    cJSON_Delete(job);
    job = job_new("{\"workers\":1,\"dataset\":{\"credentialsSecret\":\"S3_creds\"}}", NULL);
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), -EINVAL);
    assert_string_equal(err, "spec.dataset.credentialsSecret: expected a Secret's name (lowercase "
                             "letters, digits, '-' and '.', at most 253), got \"S3_creds\"");
    cJSON_Delete(job);
}

static const char *annotation(const cJSON *pod, const char *key)
{
    return jsonx_key_str(jsonx_obj(pod, "metadata.annotations"), key);
}

/* A 3-worker job running in attempt 4 with a PodGroup, all pods Running. */
static void fx_running3(Fixture *f, const char *spec, const char *status)
{
    memset(f, 0, sizeof *f);
    f->job = job_new(spec, status);
    f->gang_api = GANG_API_V1BETA1;
    fx_with_support(f);
    snprintf(f->groups[f->ngroups++], sizeof f->groups[0], "mnist-4");
    for (int i = 0; i < 3; i++)
        fx_pod(f, i, 4, "Running");
}

/* A job in a Kueue queue: the lost pod's object keeps Kueue's finalizer until Kueue sees
 * a replacement, so the replacement is <name>-r<n> (hostname and group unchanged), made
 * once the old object has failed (while it runs Kueue would count the replacement in
 * excess and delete it). */
#define KSPEC3                                                                                     \
    "{\"workers\":3,\"checkpoint\":{\"claimName\":\"ckpt\"},\"template\":{\"metadata\":"           \
    "{\"labels\":{\"kueue.x-k8s.io/queue-name\":\"q\"}}}}"
static void test_live_replacement_in_a_kueue_group(void **state)
{
    (void)state;
    Fixture f;
    fx_running3(&f, KSPEC3, ST_RUNNING3(""));
    const char *group = label_of(f.pods[2], "kueue.x-k8s.io/pod-group-name");
    assert_non_null(group);
    char kgroup[64];
    snprintf(kgroup, sizeof kgroup, "%s", group);
    assert_string_equal(arg_of(f.pods[2], "--recovery-timeout"), "120");
    /* Worker 2's pod deleted: terminating, still running its last step. */
    jsonx_set_str(jsonx_ensure_obj(f.pods[2], "metadata"), "deletionTimestamp",
                  "2027-01-15T08:00:00Z");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\nevent Normal WorkerReplaced\n");
    fx_apply(&f);
    fx_run(&f, NOW + 1);
    assert_string_equal(f.desc, ""); /* still running: no replacement yet */
    fx_apply(&f);

    /* Its trainer exited 75; Kueue's finalizer holds the object: the replacement is made
     * beside it, under its own name, counted once. */
    pod_terminated(f.pods[2], 75, "{\"error\":\"stopped by SIGTERM\",\"step\":40}");
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "create-pod mnist-worker-2-r1\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    const cJSON *pod = find_action(&f, ACTION_CREATE_POD, "mnist-worker-2-r1")->object;
    assert_string_equal(jsonx_str(pod, "spec.hostname"), "mnist-worker-2");
    assert_string_equal(label_of(pod, "kueue.x-k8s.io/pod-group-name"), kgroup);
    assert_string_equal(annotation(pod, "kueue.x-k8s.io/pod-group-total-count"), "3");
    assert_string_equal(annotation(pod, "kubetrain.dev/replacement"), "1");
    assert_string_equal(arg_of(pod, "--recovery-timeout"), "120");
    const cJSON *st = new_status(&f);
    assert_int_equal(jsonx_int(st, "attempt", -1), 4);
    assert_int_equal(jsonx_int(st, "restarts.replaced", -1), 1);
    assert_int_equal(jsonx_int(st, "restarts.disruption", -1), 1);
    assert_int_equal(jsonx_int(st, "restarts.application", -1), 0);
    fx_apply(&f);

    /* Kueue finalizes the old object; the replacement runs: steady. */
    cJSON_Delete(f.pods[2]);
    f.pods[2] = f.pods[--f.npods];
    jsonx_set_str(jsonx_ensure_obj(pod_named(&f, "mnist-worker-2-r1"), "status"), "phase",
                  "Running");
    fx_run(&f, NOW + 10);
    assert_null(strstr(f.desc, "WorkerReplaced"));
    assert_null(strstr(f.desc, "pod "));
    fx_apply(&f);

    /* The replacement's trainer is killed (137): replaced again, as -r2, once its
     * object is deleted (Kueue's finalizer keeps it, Failed). */
    pod_terminated(pod_named(&f, "mnist-worker-2-r1"), 137, NULL);
    fx_run(&f, NOW + 20);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal WorkerReplaced\n"
                                "delete-stopped-pod mnist-worker-2-r1\n");
    assert_int_equal(jsonx_int(new_status(&f), "restarts.application", -1), 1);
    apply_prefix(&f, 2); /* the deletion waits for Kueue */
    plan_free(&f.plan);
    free(f.desc);
    f.desc = NULL;
    jsonx_set_str(jsonx_ensure_obj(pod_named(&f, "mnist-worker-2-r1"), "metadata"),
                  "deletionTimestamp", "2027-01-15T08:01:00Z");
    fx_run(&f, NOW + 21);
    assert_string_equal(f.desc, "create-pod mnist-worker-2-r2\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    st = new_status(&f);
    assert_int_equal(jsonx_int(st, "restarts.replaced", -1), 2);
    assert_int_equal(jsonx_int(st, "restarts.application", -1), 1);
    assert_int_equal(jsonx_int(st, "attempt", -1), 4);
    fx_free(&f);

    /* Kueue stopping the group (preemption) is no single loss: see
     * test_live_replacement_falls_back. */
}

#define KESPEC3                                                                                    \
    "{\"workers\":3,\"elastic\":{\"minWorkers\":2},\"checkpoint\":{\"claimName\":\"ckpt\"},"       \
    "\"template\":{\"metadata\":{\"labels\":{\"kueue.x-k8s.io/queue-name\":\"q\"}}}}"

/* An elastic job in a Kueue queue scaled from 3 to `workers` (docs/kueue.md, "Elastic
 * jobs in a queue"): Kueue admitted a group of 3 pods and cannot resize it, so the scale
 * restarts the group (WorkersChanged, saying why), and the next attempt's pods form a new
 * group of the new count. Never a pod deleted from or added to the admitted group. */
static void check_queued_scale(int workers)
{
    Fixture f;
    fx_elastic3(&f, KESPEC3, ST_LAUNCHED(""), workers);
    jsonx_set_str(jsonx_ensure_obj(f.job, "status"), "phase", "Running");
    assert_string_equal(label_of(f.pods[0], "kueue.x-k8s.io/pod-group-name"), "mnist-0-uid-1");
    assert_string_equal(annotation(f.pods[0], "kueue.x-k8s.io/pod-group-total-count"), "3");
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning WorkersChanged\n"
                                "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n"
                                "delete-pod mnist-worker-2\n");
    const cJSON *st = new_status(&f);
    assert_int_equal(jsonx_int(st, "attempt", -1), 1);
    assert_null(jsonx_at(st, "members"));
    assert_null(jsonx_at(st, "restarts"));
    assert_string_equal(cond_message(st, "Resized"), "(none)");
    assert_cond(st, "Restarting", "True/WorkersChanged");
    char want[512];
    snprintf(want, sizeof want,
             "spec.workers is %d (%d pods) in Kueue queue q, whose pod group mnist-0-uid-1 was "
             "admitted for 3 pods: Kueue cannot resize a plain pod group, so the group "
             "restarts at the new size in a new pod group that Kueue admits anew, and "
             "resumes from its checkpoint",
             workers, workers);
    assert_string_equal(cond_message(st, "Restarting"), want);
    char ev[600];
    snprintf(ev, sizeof ev, "restarting all pods: %s", want);
    assert_string_equal(find_action(&f, ACTION_EVENT, "mnist")->message, ev);
    fx_apply(&f);
    assert_int_equal(f.npods, 0);
    fx_run(&f, NOW + 1);
    char name[32], want_desc[256] = "";
    for (int i = 0; i < workers; i++)
        snprintf(want_desc + strlen(want_desc), sizeof want_desc - strlen(want_desc),
                 "create-pod mnist-worker-%d\n", i);
    strcat(want_desc, "event Normal CreatedWorkers\nupdate-status mnist\n");
    assert_string_equal(f.desc, want_desc);
    for (int i = 0; i < workers; i++) {
        snprintf(name, sizeof name, "mnist-worker-%d", i);
        const Action *a = find_action(&f, ACTION_CREATE_POD, name);
        assert_non_null(a);
        assert_string_equal(label_of(a->object, "kueue.x-k8s.io/pod-group-name"), "mnist-1-uid-1");
        char count[16];
        snprintf(count, sizeof count, "%d", workers);
        assert_string_equal(annotation(a->object, "kueue.x-k8s.io/pod-group-total-count"), count);
    }
    fx_apply(&f);
    for (size_t i = 0; i < f.npods; i++)
        pod_set_phase(f.pods[i], "Running");
    fx_run(&f, NOW + 2); /* the new size is steady */
    assert_null(strstr(f.desc, "-pod"));
    assert_null(strstr(f.desc, "WorkersChanged"));
    fx_free(&f);
}

static void test_elastic_in_a_queue_scale_restarts(void **state)
{
    (void)state;
    check_queued_scale(2); /* kubectl scale down */
    check_queued_scale(4); /* kubectl scale up */
}

/* What stays in place for an elastic job in a Kueue queue, since it never adds a pod to
 * the admitted group: a lost worker whose replacement (`-r1`, in the same group of 3)
 * cannot run leaves the members, the replacement left Pending in the group, and joins
 * once it runs; an attempt that starts with a worker that cannot be placed starts
 * without it. Neither deletes nor creates a pod. */
static void test_elastic_in_a_queue_shrinks_in_place(void **state)
{
    (void)state;
    Fixture f;
    const char *m = "0/1 nodes are available: 1 Insufficient cpu.";
    fx_elastic3(&f, KESPEC3, ST_LAUNCHED(""), 3);
    jsonx_set_str(jsonx_ensure_obj(f.job, "status"), "phase", "Running");
    pod_terminated(f.pods[2], 137, NULL);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal WorkerReplaced\n"
                                "delete-stopped-pod mnist-worker-2\n");
    apply_prefix(&f, 2); /* Kueue's finalizer holds the Failed object */
    plan_free(&f.plan);
    free(f.desc);
    f.desc = NULL;
    jsonx_set_str(jsonx_ensure_obj(pod_named(&f, "mnist-worker-2"), "metadata"),
                  "deletionTimestamp", "2027-01-15T08:00:00Z");
    fx_run(&f, NOW + 1);
    assert_string_equal(f.desc, "create-pod mnist-worker-2-r1\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    const cJSON *pod = find_action(&f, ACTION_CREATE_POD, "mnist-worker-2-r1")->object;
    assert_string_equal(label_of(pod, "kueue.x-k8s.io/pod-group-name"), "mnist-0-uid-1");
    assert_string_equal(annotation(pod, "kueue.x-k8s.io/pod-group-total-count"), "3");
    fx_apply(&f);
    cJSON *r1 = pod_named(&f, "mnist-worker-2-r1");
    jsonx_set_str(jsonx_ensure_obj(r1, "metadata"), "creationTimestamp", "2027-01-15T08:00:01Z");
    pod_unschedulable(r1, m);
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n");
    assert_string_equal(cond_message(new_status(&f), "Resized"),
                        "shrank from 3 to 2 workers (members 0,1): pod mnist-worker-2-r1 "
                        "unschedulable: 0/1 nodes are available: 1 Insufficient cpu.");
    assert_int_equal(jsonx_int(new_status(&f), "attempt", 0), 0);
    fx_apply(&f);
    fx_run(&f, NOW + 3);
    assert_null(strstr(f.desc, "-pod"));
    fx_apply(&f);
    r1 = pod_named(&f, "mnist-worker-2-r1");
    cJSON_DeleteItemFromObject(jsonx_ensure_obj(r1, "status"), "conditions");
    pod_set_phase(r1, "Running");
    fx_run(&f, NOW + 60);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n");
    assert_string_equal(cond_message(new_status(&f), "Resized"),
                        "grew from 2 to 3 workers (members 0,1,2): pod mnist-worker-2-r1 runs");
    fx_free(&f);

    fx_elastic_start(&f, KESPEC3, 2, NOW);
    pod_unschedulable(pod_named(&f, "mnist-worker-2"), m);
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal Resized\n"
                                "patch-pod mnist-worker-0\n"
                                "patch-pod mnist-worker-1\n");
    assert_string_equal(jsonx_str(new_status(&f), "members"), "0,1");
    fx_apply(&f);
    /* Shrunk so, then scaled down: still the group restart. */
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 2);
    fx_run(&f, NOW + 3);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Warning WorkersChanged\n"
                                "delete-pod mnist-worker-0\n"
                                "delete-pod mnist-worker-1\n"
                                "delete-pod mnist-worker-2\n");
    fx_free(&f);
}

static void test_live_replacement_of_a_deleted_worker(void **state)
{
    (void)state;
    Fixture f;
    fx_running3(&f, SPEC3, ST_RUNNING3(""));
    const char *uid1 = "uid-of-worker-1";
    jsonx_set_str(jsonx_ensure_obj(f.pods[1], "metadata"), "uid", uid1);
    /* Someone deleted worker 2: it is terminating (its trainer leaves after the step). */
    jsonx_set_str(jsonx_ensure_obj(f.pods[2], "metadata"), "deletionTimestamp",
                  "2027-01-15T08:00:00Z");
    fx_run(&f, NOW);
    /* Status first; nothing to delete (it is going), nothing else touched. */
    assert_string_equal(f.desc, "update-status mnist\nevent Normal WorkerReplaced\n");
    const cJSON *st = new_status(&f);
    assert_int_equal(jsonx_int(st, "attempt", -1), 4);
    assert_string_equal(jsonx_str(st, "phase"), "Running");
    assert_int_equal(jsonx_int(st, "restarts.replaced", -1), 1);
    assert_int_equal(jsonx_int(st, "restarts.disruption", -1), 1);
    assert_int_equal(jsonx_int(st, "restarts.application", -1), 0);
    const cJSON *e = cJSON_GetArrayItem(jsonx_arr(st, "replacedPods"), 0);
    assert_string_equal(jsonx_str(e, "name"), "mnist-worker-2");
    assert_int_equal(jsonx_int(e, "replacement", -1), 1);
    assert_false(jsonx_bool(e, "launched", 1));
    assert_string_equal(f.plan.actions[1].message,
                        "pod mnist-worker-2 replaced; live recovery (worker 2: it was deleted)");
    fx_apply(&f);

    /* Still terminating, its trainer exited 75 meanwhile: the same loss, not counted
     * again, and the name is not reused yet. Twice, as the operator may look again. */
    pod_terminated(f.pods[2], 75, "{\"error\":\"stopped by SIGTERM\",\"step\":40}");
    for (int pass = 0; pass < 2; pass++) {
        fx_run(&f, NOW + 1 + pass);
        assert_string_equal(f.desc, "");
        plan_free(&f.plan);
        free(f.desc);
        f.desc = NULL;
    }

    /* The old object is gone: the same name again, same attempt, same PodGroup. */
    cJSON_Delete(f.pods[2]);
    f.npods = 2;
    fx_run(&f, NOW + 5);
    assert_string_equal(f.desc, "create-pod mnist-worker-2\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    const cJSON *pod = find_action(&f, ACTION_CREATE_POD, "mnist-worker-2")->object;
    assert_string_equal(annotation(pod, "kubetrain.dev/attempt"), "4");
    assert_string_equal(annotation(pod, "kubetrain.dev/replacement"), "1");
    assert_string_equal(jsonx_str(pod, "spec.schedulingGroup.podGroupName"), "mnist-4");
    assert_string_equal(arg_of(pod, "--recovery-timeout"), "120");
    st = new_status(&f);
    assert_int_equal(jsonx_int(st, "attempt", -1), 4);
    assert_string_equal(jsonx_str(st, "phase"), "Running");
    assert_int_equal(jsonx_int(st, "restarts.replaced", -1), 1);
    assert_true(jsonx_bool(cJSON_GetArrayItem(jsonx_arr(st, "replacedPods"), 0), "launched", 0));
    fx_apply(&f);
    assert_int_equal(f.npods, 3);
    assert_string_equal(jsonx_str(pod_named(&f, "mnist-worker-1"), "metadata.uid"), uid1);

    /* The replacement runs: steady, nothing counted. */
    cJSON *w2 = pod_named(&f, "mnist-worker-2");
    jsonx_set_str(jsonx_ensure_obj(w2, "status"), "phase", "Running");
    fx_run(&f, NOW + 10);
    assert_null(strstr(f.desc, "WorkerReplaced"));
    assert_null(strstr(f.desc, "pod "));
    if (f.plan.n) assert_int_equal(jsonx_int(new_status(&f), "restarts.replaced", -1), 1);
    fx_apply(&f);

    /* The replacement is killed (SIGKILL, 137): a failure, replaced again (number 2),
     * counted in restarts.application; its object is deleted first. */
    pod_terminated(pod_named(&f, "mnist-worker-2"), 137, NULL);
    fx_run(&f, NOW + 20);
    assert_string_equal(f.desc, "update-status mnist\n"
                                "event Normal WorkerReplaced\n"
                                "delete-stopped-pod mnist-worker-2\n");
    st = new_status(&f);
    assert_int_equal(jsonx_int(st, "restarts.replaced", -1), 2);
    assert_int_equal(jsonx_int(st, "restarts.application", -1), 1);
    assert_int_equal(jsonx_int(st, "restarts.disruption", -1), 1);
    assert_int_equal(
        jsonx_int(cJSON_GetArrayItem(jsonx_arr(st, "replacedPods"), 0), "replacement", -1), 2);
    assert_true(f.plan.requeue_after < 0); /* no backoff: the survivors are waiting */
    fx_apply(&f);
    fx_run(&f, NOW + 21);
    pod = find_action(&f, ACTION_CREATE_POD, "mnist-worker-2")->object;
    assert_string_equal(annotation(pod, "kubetrain.dev/replacement"), "2");
    assert_int_equal(jsonx_int(new_status(&f), "attempt", -1), 4);
    fx_free(&f);
}

static void test_live_replacement_of_a_missing_chief(void **state)
{
    (void)state;
    /* The chief's pod vanished with its node (no object left): replaced at once. */
    Fixture f;
    fx_running3(&f, SPEC3, ST_RUNNING3(""));
    cJSON_Delete(f.pods[0]);
    f.pods[0] = f.pods[--f.npods];
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "update-status mnist\nevent Normal WorkerReplaced\n");
    assert_int_equal(jsonx_int(new_status(&f), "restarts.disruption", -1), 1);
    fx_apply(&f);
    fx_run(&f, NOW + 1);
    const cJSON *pod = find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object;
    assert_string_equal(jsonx_key_str(jsonx_obj(pod, "metadata.labels"), "kubetrain.dev/chief"),
                        "true");
    assert_string_equal(annotation(pod, "kubetrain.dev/replacement"), "1");
    fx_free(&f);
}

/* A replacement whose peers finished before it started can never rejoin them: the group
 * restarts at once (ReplacementStranded, no counter) instead of the replacement waiting
 * out its rendezvous timeout. One that started before they finished is left alone. */
static void test_stranded_replacement(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        int chief; /* 0: not made yet, 1: Pending, 2: Running since `started` */
        const char *started;
        int stranded;
    } cases[] = {
        {"the chief's replacement not made yet", 0, NULL, 1},
        {"the chief's replacement Pending", 1, NULL, 1},
        {"the chief's replacement started after worker 1 finished", 2, "2027-01-15T08:00:03Z", 1},
        {"the chief's replacement started before worker 1 finished", 2, "2027-01-15T07:59:50Z", 0},
        {"the chief's replacement started in worker 1's last second", 2, "2027-01-15T08:00:00Z", 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        Fixture f;
        char status[1024];
        snprintf(status, sizeof status,
                 ST_RUNNING3(",\"replacedPods\":[{\"name\":\"mnist-worker-0\",\"replacement\":1,"
                             "\"launched\":%s}],\"restarts\":{\"replaced\":1,"
                             "\"disruption\":1,\"application\":0}"),
                 cases[k].chief ? "true" : "false");
        fx_running3(&f, SPEC3, status);
        /* Worker 1 trained the last step with the old chief and finished at 08:00:00;
         * worker 2 still runs. */
        jsonx_set(jsonx_ensure_obj(f.pods[1], "status"), "containerStatuses",
                  cJSON_Parse("[{\"name\":\"trainer\",\"state\":{\"terminated\":{\"exitCode\":0,"
                              "\"startedAt\":\"2027-01-15T07:58:21Z\","
                              "\"finishedAt\":\"2027-01-15T08:00:00Z\"}}}]"));
        jsonx_set_str(jsonx_ensure_obj(f.pods[1], "status"), "phase", "Succeeded");
        cJSON *w0 = f.pods[0];
        jsonx_set_str(jsonx_ensure_obj(w0, "metadata.annotations"), "kubetrain.dev/replacement",
                      "1");
        if (cases[k].chief == 0) {
            cJSON_Delete(w0);
            f.pods[0] = f.pods[--f.npods];
        } else if (cases[k].chief == 1) {
            jsonx_set_str(jsonx_ensure_obj(w0, "status"), "phase", "Pending");
        } else {
            char cs[256];
            snprintf(cs, sizeof cs,
                     "[{\"name\":\"trainer\",\"state\":{\"running\":{\"startedAt\":\"%s\"}}}]",
                     cases[k].started);
            jsonx_set(jsonx_ensure_obj(w0, "status"), "containerStatuses", cJSON_Parse(cs));
        }
        fx_run(&f, NOW);
        if (cases[k].stranded) {
            const cJSON *st = new_status(&f);
            if (strncmp(f.desc, "update-status mnist\nevent Warning ReplacementStranded\n", 53) !=
                0)
                fail_msg("%s: %s", cases[k].what, f.desc);
            assert_int_equal(jsonx_int(st, "attempt", -1), 5);
            assert_int_equal(jsonx_int(st, "restarts.replaced", -1), 1);
            assert_int_equal(jsonx_int(st, "restarts.disruption", -1), 1);
            assert_int_equal(jsonx_int(st, "restarts.application", -1), 0);
            assert_string_equal(cond_message(st, "Restarting"),
                                "the replacement of pod mnist-worker-0 cannot rejoin: worker 1 "
                                "completed before it started");
        } else {
            if (strstr(f.desc, "ReplacementStranded") || strstr(f.desc, "delete-pod"))
                fail_msg("%s: %s", cases[k].what, f.desc);
            for (size_t i = 0; i < f.plan.n; i++)
                if (f.plan.actions[i].kind == ACTION_UPDATE_STATUS)
                    assert_int_equal(jsonx_int(f.plan.actions[i].object, "status.attempt", -1), 4);
        }
        fx_free(&f);
    }
}

/* Losses live recovery does not take: the group decisions of before. */
static void test_live_replacement_falls_back(void **state)
{
    (void)state;
    static const struct {
        const char *what, *spec, *extra_status;
        int case_; /* what happens to the pods, below */
        const char *want;
    } cases[] = {
        {"two pods lost", SPEC3, "", 0,
         "update-status mnist\nevent Warning Disruption\ndelete-pod mnist-worker-0\n"
         "delete-pod mnist-worker-1\ndelete-pod-group mnist-4\n"},
        {"a survivor gave up", SPEC3, "", 1,
         "update-status mnist\nevent Warning WorkerFailed\ndelete-pod mnist-worker-0\n"
         "delete-pod mnist-worker-1\ndelete-pod mnist-worker-2\ndelete-pod-group mnist-4\n"},
        {"a code that is not retried", "{\"workers\":3,\"restartPolicy\":\"ExitCode\"}", "", 2,
         "update-status mnist\nevent Warning NonRetryableExitCode\ndelete-pod mnist-worker-0\n"
         "delete-pod mnist-worker-2\ndelete-pod-group mnist-4\n"},
        {"a user's program", "{\"workers\":3,\"image\":\"tf:1\",\"command\":[\"python3\"]}", "", 3,
         "update-status mnist\nevent Warning Disruption\ndelete-pod mnist-worker-0\n"
         "delete-pod mnist-worker-1\ndelete-pod-group mnist-4\n"},
        {"recovery off", "{\"workers\":3,\"recoveryTimeoutSeconds\":0}", "", 3,
         "update-status mnist\nevent Warning Disruption\ndelete-pod mnist-worker-0\n"
         "delete-pod mnist-worker-1\ndelete-pod-group mnist-4\n"},
        {"NCCL", "{\"workers\":3,\"gpusPerWorker\":1}", "", 3,
         "update-status mnist\nevent Warning Disruption\ndelete-pod mnist-worker-0\n"
         "delete-pod mnist-worker-1\ndelete-pod-group mnist-4\n"},
        {"Kueue stopped the group",
         "{\"workers\":3,\"template\":{\"metadata\":{\"labels\":"
         "{\"kueue.x-k8s.io/queue-name\":\"q\"}}}}",
         "", 6,
         "update-status mnist\nevent Warning Disruption\ndelete-pod mnist-worker-0\n"
         "delete-pod mnist-worker-1\ndelete-pod mnist-worker-2\ndelete-pod-group mnist-4\n"},
        {"a loss while a replacement is being made", SPEC3,
         ",\"replacedPods\":[{\"name\":\"mnist-worker-1\",\"replacement\":1,"
         "\"launched\":false}],\"restarts\":{\"replaced\":1,\"disruption\":1,"
         "\"application\":0}",
         4,
         "update-status mnist\nevent Warning Disruption\ndelete-pod mnist-worker-0\n"
         "delete-pod-group mnist-4\n"},
        {"a loss while a replacement starts", SPEC3,
         ",\"replacedPods\":[{\"name\":\"mnist-worker-1\",\"replacement\":1,"
         "\"launched\":true}],\"restarts\":{\"replaced\":1,\"disruption\":1,"
         "\"application\":0}",
         5,
         "update-status mnist\nevent Warning Disruption\ndelete-pod mnist-worker-0\n"
         "delete-pod mnist-worker-1\ndelete-pod-group mnist-4\n"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char status[1024];
        snprintf(status, sizeof status, ST_RUNNING3("%s"), cases[k].extra_status);
        Fixture f;
        fx_running3(&f, cases[k].spec, status);
        cJSON *w1 = f.pods[1], *w2 = f.pods[2];
        const char *deleted = "2027-01-15T08:00:00Z";
        switch (cases[k].case_) {
        case 0: /* worker 1 killed and worker 2 deleted */
            pod_terminated(w1, 137, NULL);
            jsonx_set_str(jsonx_ensure_obj(w2, "metadata"), "deletionTimestamp", deleted);
            break;
        case 1: /* worker 2 waited for a replacement that never came */
            pod_terminated(w2, 75,
                           "{\"error\":\"lost mnist-worker-1: no replacement within 120 s\","
                           "\"step\":40,\"recoveryTimedOut\":true}");
            break;
        case 2: /* bad configuration: exit 2 */
            pod_terminated(w1, 2, "{\"error\":\"--lr: bad value\"}");
            break;
        case 3: /* worker 2 deleted */
            jsonx_set_str(jsonx_ensure_obj(w2, "metadata"), "deletionTimestamp", deleted);
            break;
        case 4: /* worker 1's replacement not made yet; worker 2 deleted */
            cJSON_Delete(w1);
            f.pods[1] = f.pods[--f.npods];
            jsonx_set_str(jsonx_ensure_obj(w2, "metadata"), "deletionTimestamp", deleted);
            break;
        case 6: /* Kueue marked worker 2 first (preemption): the others follow */
            jsonx_set(jsonx_ensure_obj(w2, "status"), "conditions",
                      cJSON_Parse("[{\"type\":\"TerminationTarget\",\"status\":\"True\"}]"));
            break;
        case 5: /* worker 1's replacement still Pending; worker 2 deleted */
            jsonx_set_str(jsonx_ensure_obj(w1, "status"), "phase", "Pending");
            jsonx_set_str(jsonx_ensure_obj(w1, "metadata.annotations"), "kubetrain.dev/replacement",
                          "1");
            jsonx_set_str(jsonx_ensure_obj(w2, "metadata"), "deletionTimestamp", deleted);
            break;
        }
        fx_run(&f, NOW);
        if (strcmp(f.desc, cases[k].want) != 0)
            fail_msg("%s:\n%s!=\n%s", cases[k].what, f.desc, cases[k].want);
        const cJSON *st = new_status(&f);
        assert_int_equal(jsonx_int(st, "restarts.replaced", 0),
                         cases[k].case_ == 4 || cases[k].case_ == 5);
        if (cases[k].case_ != 2) assert_int_equal(jsonx_int(st, "attempt", -1), 5);
        assert_null(jsonx_at(st, "replacedPods"));
        fx_free(&f);
    }
}

static void test_live_replacement_backoff_limit(void **state)
{
    (void)state;
    /* A failed pod's replacement counts against backoffLimit; once reached, the job fails
     * as before. */
    for (int app = 1; app <= 2; app++) {
        char status[512];
        snprintf(status, sizeof status,
                 ST_RUNNING3(",\"restarts\":{\"application\":%d,\"disruption\":0}"), app);
        Fixture f;
        fx_running3(&f, "{\"workers\":3,\"backoffLimit\":2}", status);
        pod_terminated(f.pods[1], 75, "{\"error\":\"lost mnist-worker-2: connection reset\"}");
        fx_run(&f, NOW);
        const cJSON *st = new_status(&f);
        if (app == 1) {
            assert_string_equal(f.desc, "update-status mnist\n"
                                        "event Normal WorkerReplaced\n"
                                        "delete-stopped-pod mnist-worker-1\n");
            assert_int_equal(jsonx_int(st, "restarts.application", -1), 2);
            assert_int_equal(jsonx_int(st, "restarts.replaced", -1), 1);
        } else {
            assert_string_equal(f.desc, "update-status mnist\n"
                                        "event Warning BackoffLimitExceeded\n"
                                        "delete-pod mnist-worker-0\n"
                                        "delete-pod mnist-worker-2\n"
                                        "delete-pod-group mnist-4\n");
            assert_string_equal(jsonx_str(st, "phase"), "Failed");
        }
        fx_free(&f);
    }
}

/* --recovery-timeout: the spec's value where the operator replaces lost pods, else 0. */
static void test_recovery_timeout_flag(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"{\"workers\":2}", "120"},
        {"{\"workers\":2,\"recoveryTimeoutSeconds\":30}", "30"},
        {"{\"workers\":2,\"recoveryTimeoutSeconds\":0}", "0"},
        {"{\"workers\":2,\"gpusPerWorker\":1}", "0"},
        {"{\"workers\":2,\"gpusPerWorker\":1,\"collective\":\"ring\"}", "120"},
        {"{\"workers\":2,\"template\":{\"metadata\":{\"labels\":"
         "{\"kueue.x-k8s.io/queue-name\":\"q\"}}}}",
         "120"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cJSON *job = job_new(cases[k].spec, NULL);
        JobSpec s;
        char err[256];
        assert_int_equal(jobspec_parse(job, &s, err, sizeof err), 0);
        cJSON *pod = desired_pod(&s, &CFG.desired, SECRET, ROLE_WORKER, 1, 0);
        assert_string_equal(arg_of(pod, "--recovery-timeout"), cases[k].want);
        assert_null(annotation(pod, "kubetrain.dev/replacement"));
        cJSON_Delete(pod);
        cJSON_Delete(job);
    }
    /* An unlabelled job that --default-queue puts in a Kueue queue is replaced live too;
     * a replacement in a Kueue group has a name of its own and the lost pod's hostname,
     * one outside keeps the name. */
    DesiredConfig dq = CFG.desired;
    dq.default_queue = "team";
    cJSON *qjob = job_new("{\"workers\":2}", NULL);
    JobSpec qs;
    char qerr[256];
    assert_int_equal(jobspec_parse(qjob, &qs, qerr, sizeof qerr), 0);
    assert_true(desired_live_recovery(&qs));
    for (int queued = 0; queued < 2; queued++) {
        cJSON *qpod = desired_pod(&qs, queued ? &dq : &CFG.desired, SECRET, ROLE_WORKER, 1, 0);
        assert_string_equal(arg_of(qpod, "--recovery-timeout"), "120");
        assert_int_equal(desired_pod_set_replacement(qpod, 2), 0);
        assert_string_equal(annotation(qpod, "kubetrain.dev/replacement"), "2");
        assert_string_equal(jsonx_str(qpod, "metadata.name"),
                            queued ? "mnist-worker-1-r2" : "mnist-worker-1");
        assert_string_equal(jsonx_str(qpod, "spec.hostname"), "mnist-worker-1");
        cJSON_Delete(qpod);
    }
    cJSON_Delete(qjob);
    cJSON *job = job_new("{\"workers\":2,\"recoveryTimeoutSeconds\":-1}", NULL);
    JobSpec s;
    char err[256];
    assert_int_equal(jobspec_parse(job, &s, err, sizeof err), -EINVAL);
    assert_string_equal(err, "spec.recoveryTimeoutSeconds: expected an integer in [0, 86400]");
    cJSON_Delete(job);
}

static void test_gang_pod_group_per_attempt(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC_PS, NULL), .gang_api = GANG_API_V1BETA1};
    fx_with_support(&f);
    fx_run(&f, NOW);
    /* The group before its pods; the first attempt has no older group to delete. */
    assert_string_equal(f.desc, "create-pod-group mnist-0\n"
                                "create-pod mnist-chief-0\n"
                                "create-pod mnist-worker-0\n"
                                "create-pod mnist-worker-1\n"
                                "create-pod mnist-ps-0\n"
                                "create-pod mnist-evaluator-0\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    const cJSON *pg = find_action(&f, ACTION_CREATE_POD_GROUP, "mnist-0")->object;
    assert_string_equal(jsonx_str(pg, "apiVersion"), "scheduling.k8s.io/v1beta1");
    assert_string_equal(jsonx_str(pg, "kind"), "PodGroup");
    /* Preempted whole or not at all (v1beta1's disruptionMode). */
    assert_non_null(jsonx_obj(pg, "spec.disruptionMode.all"));
    assert_null(jsonx_obj(pg, "spec.disruptionMode.single"));
    assert_string_equal(jsonx_str(pg, "metadata.name"), "mnist-0");
    assert_string_equal(jsonx_str(pg, "metadata.namespace"), "default");
    /* chief + 2 workers + ps: the evaluator is not one of the pods that run together. */
    assert_int_equal(jsonx_int(pg, "spec.schedulingPolicy.gang.minCount", -1), 4);
    const cJSON *ref = cJSON_GetArrayItem(jsonx_arr(pg, "metadata.ownerReferences"), 0);
    assert_string_equal(jsonx_str(ref, "uid"), "uid-1");
    assert_string_equal(jsonx_str(ref, "kind"), "TrainingJob");
    assert_true(jsonx_bool(ref, "controller", 0));
    assert_true(jsonx_bool(ref, "blockOwnerDeletion", 0));
    assert_string_equal(jsonx_key_str(jsonx_obj(pg, "metadata.labels"), "kubetrain.dev/job-name"),
                        "mnist");
    assert_string_equal(
        jsonx_key_str(jsonx_obj(pg, "metadata.annotations"), "kubetrain.dev/attempt"), "0");
    const char *const linked[] = {"mnist-chief-0", "mnist-worker-0", "mnist-worker-1",
                                  "mnist-ps-0"};
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(group_of(find_action(&f, ACTION_CREATE_POD, linked[i])->object),
                            "mnist-0");
    assert_null(group_of(find_action(&f, ACTION_CREATE_POD, "mnist-evaluator-0")->object));
    const cJSON *st = new_status(&f);
    assert_cond(st, "GangScheduling", "True/PodGroupCreated");
    /* The condition names the group version in use. */
    assert_non_null(strstr(cond_message(st, "GangScheduling"),
                           "(PodGroup mnist-0, scheduling.k8s.io/v1beta1, minCount 4)"));
    fx_apply(&f);
    assert_int_equal(f.ngroups, 1);

    /* Running: nothing more to do, no second group. */
    for (size_t i = 0; i < f.npods; i++)
        pod_set_phase(f.pods[i], "Running");
    fx_run(&f, NOW + 10);
    fx_apply(&f);
    fx_run(&f, NOW + 11);
    assert_string_equal(f.desc, "");
    fx_apply(&f);

    /* A worker fails: the restart deletes the pods and the attempt's group. */
    pod_terminated(pod_named(&f, "mnist-worker-1"), 1, "{\"error\":\"boom\"}");
    fx_run(&f, NOW + 20);
    assert_int_equal(count_lines(&f, "delete-pod-group mnist-0"), 1);
    assert_int_equal(count_lines(&f, "create-pod-group mnist-1"), 0);
    fx_apply(&f);
    assert_int_equal(f.ngroups, 0);
    /* After the backoff: attempt 1's group, attempt 0's deleted again (it may have been
     * missed by an operator that stopped after the status write; 404 is success). */
    fx_run(&f, NOW + 40);
    assert_int_equal(count_lines(&f, "delete-pod-group mnist-0"), 1);
    assert_int_equal(count_lines(&f, "create-pod-group mnist-1"), 1);
    assert_string_equal(group_of(find_action(&f, ACTION_CREATE_POD, "mnist-worker-1")->object),
                        "mnist-1");
    fx_apply(&f);
    assert_int_equal(f.ngroups, 1);
    assert_string_equal(f.groups[0], "mnist-1");

    /* The chief completes: the finished job's group goes too. */
    for (size_t i = 0; i < f.npods; i++)
        jsonx_set_str(jsonx_ensure_obj(f.pods[i], "status"), "phase", "Running");
    pod_terminated(pod_named(&f, "mnist-chief-0"), 0, "{\"step\":3}");
    fx_run(&f, NOW + 50);
    assert_string_equal(jsonx_str(new_status(&f), "phase"), "Succeeded");
    assert_int_equal(count_lines(&f, "delete-pod-group mnist-1"), 1);
    fx_apply(&f);
    assert_int_equal(f.ngroups, 0);
    fx_free(&f);
}

/* On a Kubernetes 1.36 cluster (v1alpha2 served, not v1beta1) the same group in that
 * version's shape: no disruptionMode (its gate is off there and the field refused), and
 * the condition says v1alpha2. */
static void test_gang_pod_group_v1alpha2(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC2, NULL), .gang_api = GANG_API_V1ALPHA2};
    fx_with_support(&f);
    fx_run(&f, NOW);
    const cJSON *pg = find_action(&f, ACTION_CREATE_POD_GROUP, "mnist-0")->object;
    assert_string_equal(jsonx_str(pg, "apiVersion"), "scheduling.k8s.io/v1alpha2");
    assert_int_equal(jsonx_int(pg, "spec.schedulingPolicy.gang.minCount", -1), 2);
    assert_null(jsonx_at(pg, "spec.disruptionMode"));
    assert_string_equal(group_of(find_action(&f, ACTION_CREATE_POD, "mnist-worker-1")->object),
                        "mnist-0");
    assert_non_null(strstr(cond_message(new_status(&f), "GangScheduling"),
                           "(PodGroup mnist-0, scheduling.k8s.io/v1alpha2, minCount 2)"));
    fx_free(&f);
}

/* The lines of the plan that start with `prefix`. */
static int count_prefix(const Fixture *f, const char *prefix)
{
    int n = 0;
    for (const char *p = f->desc; (p = strstr(p, prefix)); p++)
        n += p == f->desc || p[-1] == '\n';
    return n;
}

/* Kueue's gate on each of the fixture's pods, as its webhook puts it there. */
static void gate_all(Fixture *f)
{
    for (size_t i = 0; i < f->npods; i++)
        jsonx_set(jsonx_ensure_obj(f->pods[i], "spec"), "schedulingGates",
                  cJSON_Parse("[{\"name\":\"kueue.x-k8s.io/admission\"}]"));
}

static void ungate(Fixture *f, const char *pod)
{
    cJSON_DeleteItemFromObjectCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(pod_named(f, pod), "spec"), "schedulingGates");
}

/* Gang and Kueue together: the pods are linked to the attempt's PodGroup when they are
 * made, but the group is made only once Kueue has lifted every pod's gate (made first,
 * the scheduler tried it at the first pod ungated and failed its quorum), once per
 * attempt, and a restart's attempt waits for its own admission again. */
static void test_gang_group_after_kueue_admission(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(SPEC2, NULL), .gang_api = GANG_API_V1BETA1};
    jsonx_set_str(jsonx_ensure_obj(f.job, "metadata.labels"), LABEL_KUEUE_QUEUE, "q");
    fx_with_support(&f);
    fx_run(&f, NOW);
    assert_int_equal(count_prefix(&f, "create-pod-group "), 0);
    assert_int_equal(count_prefix(&f, "create-pod "), 2);
    assert_string_equal(group_of(find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object),
                        "mnist-0");
    const cJSON *st = new_status(&f);
    assert_cond(st, "GangScheduling", "True/PodGroupAfterAdmission");
    fx_apply(&f);
    gate_all(&f);

    /* Queued, then half admitted: no group yet. */
    fx_run(&f, NOW + 1);
    assert_int_equal(count_prefix(&f, "create-pod-group "), 0);
    fx_apply(&f);
    ungate(&f, "mnist-worker-0");
    fx_run(&f, NOW + 2);
    assert_int_equal(count_prefix(&f, "create-pod-group "), 0);
    fx_apply(&f);

    /* Admitted: the group, once, and the condition names it. */
    ungate(&f, "mnist-worker-1");
    fx_run(&f, NOW + 3);
    assert_int_equal(count_lines(&f, "create-pod-group mnist-0"), 1);
    assert_int_equal(jsonx_int(find_action(&f, ACTION_CREATE_POD_GROUP, "mnist-0")->object,
                               "spec.schedulingPolicy.gang.minCount", -1),
                     2);
    assert_cond(new_status(&f), "GangScheduling", "True/PodGroupCreated");
    fx_apply(&f);
    assert_int_equal(f.ngroups, 1);
    fx_run(&f, NOW + 4);
    assert_int_equal(count_prefix(&f, "create-pod-group "), 0);
    fx_apply(&f);

    /* A restart: attempt 0's group goes, attempt 1's waits for its admission. */
    for (size_t i = 0; i < f.npods; i++)
        jsonx_set_str(jsonx_ensure_obj(f.pods[i], "status"), "phase", "Running");
    fx_run(&f, NOW + 5);
    fx_apply(&f);
    pod_terminated(pod_named(&f, "mnist-worker-1"), 1, "{\"error\":\"boom\"}");
    fx_run(&f, NOW + 10);
    fx_apply(&f);
    fx_run(&f, NOW + 40);
    assert_int_equal(count_prefix(&f, "create-pod "), 2);
    assert_int_equal(count_prefix(&f, "create-pod-group "), 0);
    assert_cond(new_status(&f), "GangScheduling", "True/PodGroupAfterAdmission");
    fx_apply(&f);
    assert_int_equal(f.ngroups, 0);
    gate_all(&f);
    fx_run(&f, NOW + 41);
    assert_int_equal(count_prefix(&f, "create-pod-group "), 0);
    fx_apply(&f);
    ungate(&f, "mnist-worker-0");
    ungate(&f, "mnist-worker-1");
    fx_run(&f, NOW + 42);
    assert_int_equal(count_lines(&f, "create-pod-group mnist-1"), 1);
    fx_apply(&f);
    assert_int_equal(f.ngroups, 1);
    assert_string_equal(f.groups[0], "mnist-1");
    fx_free(&f);
}

/* An elastic job's PodGroup (issue 46): minCount is the chief and minWorkers workers (the
 * C trainer runs no ps or evaluator), not every linked pod, so that the scheduler places the job at
 * its minimum when a worker's room is gone; the condition says so. An elastic job that
 * cannot resize in place (a user's program) keeps the whole gang. */
static void test_gang_elastic_min_count(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int linked, min;
        const char *msg;
    } cases[] = {
        {ESPEC3, 3, 2,
         "at least 2 of the 3 worker pods of attempt 0 are scheduled together, or none "
         "(spec.elastic.minWorkers) (PodGroup mnist-0, scheduling.k8s.io/v1beta1, minCount 2)"},
        {"{\"workers\":3,\"chief\":{},\"elastic\":{\"minWorkers\":1}}", 4, 2,
         "at least 2 of the 4 chief, worker and ps pods of attempt 0 are scheduled together, "
         "or none (spec.elastic.minWorkers) (PodGroup mnist-0, scheduling.k8s.io/v1beta1, "
         "minCount 2)"},
        {"{\"workers\":3,\"elastic\":{\"minWorkers\":3}}", 3, 3,
         "the 3 worker pods of attempt 0 are scheduled all together or not at all (PodGroup "
         "mnist-0, scheduling.k8s.io/v1beta1, minCount 3)"},
        {"{\"workers\":3,\"image\":\"tf:1\",\"command\":[\"p\"],\"elastic\":{\"minWorkers\":1}}", 3,
         3,
         "the 3 worker pods of attempt 0 are scheduled all together or not at all (PodGroup "
         "mnist-0, scheduling.k8s.io/v1beta1, minCount 3)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Fixture f = {.job = job_new(cases[i].spec, NULL), .gang_api = GANG_API_V1BETA1};
        fx_with_support(&f);
        fx_run(&f, NOW);
        assert_int_equal(count_lines(&f, "create-pod-group mnist-0"), 1);
        assert_int_equal(count_prefix(&f, "create-pod "), cases[i].linked);
        const cJSON *pg = find_action(&f, ACTION_CREATE_POD_GROUP, "mnist-0")->object;
        assert_int_equal(jsonx_int(pg, "spec.schedulingPolicy.gang.minCount", -1), cases[i].min);
        assert_string_equal(cond_message(new_status(&f), "GangScheduling"), cases[i].msg);
        fx_apply(&f);
        /* Nothing to follow while the spec stays. */
        fx_run(&f, NOW + 1);
        assert_int_equal(count_prefix(&f, "patch-pod-group "), 0);
        fx_free(&f);
    }
}

/* A running elastic job whose spec.elastic.minWorkers changes: in v1beta1 its group's
 * minCount follows (a merge patch before the status that records it; a pass stopped in
 * between patches again), and nothing else happens; kubectl scale, which leaves
 * minWorkers, patches nothing. In v1alpha2 the group keeps the minCount it was made with
 * (immutable there) and the condition says so; the next attempt's group takes the new
 * one. */
static void test_gang_min_count_follows_min_workers(void **state)
{
    (void)state;
    Fixture f = {.job = job_new(ESPEC3, NULL), .gang_api = GANG_API_V1BETA1};
    fx_with_support(&f);
    fx_run(&f, NOW);
    fx_apply(&f);
    for (size_t i = 0; i < f.npods; i++)
        pod_set_phase(f.pods[i], "Running");
    fx_run(&f, NOW + 1);
    fx_apply(&f);
    assert_int_equal(f.ngroups, 1);
    assert_int_equal(f.group_min[0], 2);

    jsonx_set_num(jsonx_ensure_obj(jsonx_ensure_obj(f.job, "spec"), "elastic"), "minWorkers", 1);
    fx_run(&f, NOW + 2);
    assert_string_equal(f.desc, "patch-pod-group mnist-0\n"
                                "update-status mnist\n");
    const cJSON *patch = find_action(&f, ACTION_PATCH_POD_GROUP, "mnist-0")->object;
    char *text = cJSON_PrintUnformatted(patch);
    assert_string_equal(text, "{\"spec\":{\"schedulingPolicy\":{\"gang\":{\"minCount\":1}}}}");
    free(text);
    const cJSON *st = new_status(&f);
    assert_cond(st, "GangScheduling", "True/PodGroupCreated");
    assert_string_equal(cond_message(st, "GangScheduling"),
                        "at least 1 of the 3 worker pods of attempt 0 are scheduled together, or "
                        "none (spec.elastic.minWorkers) (PodGroup mnist-0, "
                        "scheduling.k8s.io/v1beta1, minCount 1)");
    /* Stopped after the patch: the next pass patches again, then records it. */
    apply_prefix(&f, 1);
    assert_int_equal(f.group_min[0], 1);
    plan_free(&f.plan);
    free(f.desc);
    fx_run(&f, NOW + 3);
    assert_string_equal(f.desc, "patch-pod-group mnist-0\n"
                                "update-status mnist\n");
    fx_apply(&f);
    fx_run(&f, NOW + 4);
    assert_string_equal(f.desc, "");
    fx_apply(&f);

    /* Raised to every worker: the whole gang again. */
    jsonx_set_num(jsonx_ensure_obj(jsonx_ensure_obj(f.job, "spec"), "elastic"), "minWorkers", 3);
    fx_run(&f, NOW + 5);
    assert_string_equal(f.desc, "patch-pod-group mnist-0\n"
                                "update-status mnist\n");
    assert_string_equal(cond_message(new_status(&f), "GangScheduling"),
                        "the 3 worker pods of attempt 0 are scheduled all together or not at all "
                        "(PodGroup mnist-0, scheduling.k8s.io/v1beta1, minCount 3)");
    fx_apply(&f);
    assert_int_equal(f.group_min[0], 3);

    /* kubectl scale to 2, then back to 3 (minWorkers 2): worker 2 is made again and joins
     * the group; its minCount is minWorkers', not the size's. */
    jsonx_set_num(jsonx_ensure_obj(jsonx_ensure_obj(f.job, "spec"), "elastic"), "minWorkers", 2);
    fx_run(&f, NOW + 6);
    assert_int_equal(count_lines(&f, "patch-pod-group mnist-0"), 1);
    assert_int_equal(jsonx_int(find_action(&f, ACTION_PATCH_POD_GROUP, "mnist-0")->object,
                               "spec.schedulingPolicy.gang.minCount", -1),
                     2);
    fx_apply(&f);
    assert_int_equal(f.group_min[0], 2);
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 2);
    fx_run(&f, NOW + 7);
    assert_int_equal(count_lines(&f, "delete-pod mnist-worker-2"), 1);
    fx_apply(&f);
    fx_run(&f, NOW + 7.5);
    fx_apply(&f);
    assert_null(pod_named(&f, "mnist-worker-2"));
    jsonx_set_num(jsonx_ensure_obj(f.job, "spec"), "workers", 3);
    fx_run(&f, NOW + 8);
    assert_int_equal(count_lines(&f, "create-pod mnist-worker-2"), 1);
    assert_string_equal(group_of(find_action(&f, ACTION_CREATE_POD, "mnist-worker-2")->object),
                        "mnist-0");
    assert_int_equal(count_prefix(&f, "patch-pod-group "), 0);
    fx_apply(&f);
    assert_int_equal(f.group_min[0], 2);
    fx_free(&f);

    /* v1alpha2: the group keeps minCount 2, the condition says why, no write again. */
    Fixture a = {.job = job_new(ESPEC3, NULL), .gang_api = GANG_API_V1ALPHA2};
    fx_with_support(&a);
    fx_run(&a, NOW);
    fx_apply(&a);
    assert_int_equal(a.group_min[0], 2);
    for (size_t i = 0; i < a.npods; i++)
        pod_set_phase(a.pods[i], "Running");
    fx_run(&a, NOW + 1);
    fx_apply(&a);
    jsonx_set_num(jsonx_ensure_obj(jsonx_ensure_obj(a.job, "spec"), "elastic"), "minWorkers", 1);
    fx_run(&a, NOW + 2);
    assert_string_equal(a.desc, "update-status mnist\n");
    assert_string_equal(cond_message(new_status(&a), "GangScheduling"),
                        "at least 2 of the 3 worker pods of attempt 0 are scheduled together, or "
                        "none (spec.elastic.minWorkers) (PodGroup mnist-0, "
                        "scheduling.k8s.io/v1alpha2, minCount 2); minCount 1 from the spec takes "
                        "effect at the next attempt's group (minCount cannot change in "
                        "scheduling.k8s.io/v1alpha2)");
    fx_apply(&a);
    fx_run(&a, NOW + 3);
    assert_string_equal(a.desc, "");
    fx_apply(&a);
    /* Back to 2, the group's own: the condition stops saying it waits for a new one. */
    jsonx_set_num(jsonx_ensure_obj(jsonx_ensure_obj(a.job, "spec"), "elastic"), "minWorkers", 2);
    fx_run(&a, NOW + 4);
    assert_string_equal(a.desc, "update-status mnist\n");
    assert_string_equal(cond_message(new_status(&a), "GangScheduling"),
                        "at least 2 of the 3 worker pods of attempt 0 are scheduled together, or "
                        "none (spec.elastic.minWorkers) (PodGroup mnist-0, "
                        "scheduling.k8s.io/v1alpha2, minCount 2)");
    fx_apply(&a);
    jsonx_set_num(jsonx_ensure_obj(jsonx_ensure_obj(a.job, "spec"), "elastic"), "minWorkers", 1);
    /* A worker fails: attempt 1's group is made with minCount 1. */
    pod_terminated(pod_named(&a, "mnist-worker-1"), 1, "{\"error\":\"boom\"}");
    fx_run(&a, NOW + 10);
    fx_apply(&a);
    fx_run(&a, NOW + 40);
    assert_int_equal(jsonx_int(find_action(&a, ACTION_CREATE_POD_GROUP, "mnist-1")->object,
                               "spec.schedulingPolicy.gang.minCount", -1),
                     1);
    assert_non_null(strstr(cond_message(new_status(&a), "GangScheduling"),
                           "(PodGroup mnist-1, scheduling.k8s.io/v1alpha2, minCount 1)"));
    fx_free(&a);
}

/* Stopped after any prefix of any plan, the operator still ends with exactly the
 * current attempt's group, and every pod of the attempt in it. */
static void test_gang_crash_converges(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        uint64_t rng = seed * 0x9e3779b97f4a7c15ull;
        double now = NOW;
        Fixture f = {.job = job_new(SPEC2, NULL), .gang_api = GANG_API_V1BETA1};
        settle(&f, &now, &rng);
        assert_int_equal(f.ngroups, 1);
        assert_string_equal(f.groups[0], "mnist-0");
        for (size_t j = 0; j < f.npods; j++)
            jsonx_set_str(jsonx_ensure_obj(f.pods[j], "status"), "phase", "Running");
        settle(&f, &now, &rng);
        pod_terminated(pod_named(&f, "mnist-worker-1"), 1, NULL);
        settle(&f, &now, &rng);
        assert_int_equal(jsonx_int(f.job, "status.attempt", -1), 1);
        assert_int_equal(f.npods, 2);
        for (size_t j = 0; j < f.npods; j++)
            assert_string_equal(group_of(f.pods[j]), "mnist-1");
        /* A crash between the restart's status write and its deletions can leave
         * attempt 0's group only until attempt 1's is made: never both after that. */
        assert_int_equal(f.ngroups, 1);
        assert_string_equal(f.groups[0], "mnist-1");
        fx_free(&f);
    }
}

/* Live replacement with the operator stopping after any action: the lost pod is
 * replaced once, counted once, under its name in attempt 0 and its PodGroup, and the
 * others are never touched. */
static void test_live_replacement_crash_converges(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        uint64_t rng = seed * 0x9e3779b97f4a7c15ull;
        double now = NOW;
        Fixture f = {.job = job_new(SPEC3, NULL), .gang_api = GANG_API_V1BETA1};
        settle(&f, &now, &rng);
        assert_int_equal(f.npods, 3);
        for (size_t j = 0; j < f.npods; j++) {
            char uid[64];
            snprintf(uid, sizeof uid, "first-%s", jsonx_str(f.pods[j], "metadata.name"));
            jsonx_set_str(jsonx_ensure_obj(f.pods[j], "metadata"), "uid", uid);
            jsonx_set_str(jsonx_ensure_obj(f.pods[j], "status"), "phase", "Running");
        }
        settle(&f, &now, &rng);
        pod_terminated(pod_named(&f, "mnist-worker-1"), 137, NULL);
        settle(&f, &now, &rng);
        const cJSON *st = jsonx_obj(f.job, "status");
        assert_int_equal(jsonx_int(st, "attempt", 0), 0);
        assert_int_equal(jsonx_int(st, "restarts.replaced", -1), 1);
        assert_int_equal(jsonx_int(st, "restarts.application", -1), 1);
        assert_int_equal(jsonx_int(st, "restarts.disruption", -1), 0);
        assert_int_equal(f.npods, 3);
        cJSON *w1 = pod_named(&f, "mnist-worker-1");
        assert_non_null(w1);
        assert_string_equal(annotation(w1, "kubetrain.dev/replacement"), "1");
        assert_string_equal(group_of(w1), "mnist-0");
        assert_string_equal(jsonx_str(pod_named(&f, "mnist-worker-0"), "metadata.uid"),
                            "first-mnist-worker-0");
        assert_string_equal(jsonx_str(pod_named(&f, "mnist-worker-2"), "metadata.uid"),
                            "first-mnist-worker-2");
        assert_int_equal(f.ngroups, 1);
        fx_free(&f);
    }
}

static void test_gang_off_and_absent(void **state)
{
    (void)state;
    /* spec.gangScheduling: false on a cluster with PodGroups: none, pods as before. */
    Fixture f = {.job = job_new("{\"workers\":2,\"gangScheduling\":false}", NULL),
                 .gang_api = GANG_API_V1BETA1};
    fx_with_support(&f);
    fx_run(&f, NOW);
    assert_string_equal(f.desc, "create-pod mnist-worker-0\n"
                                "create-pod mnist-worker-1\n"
                                "event Normal CreatedWorkers\n"
                                "update-status mnist\n");
    assert_null(group_of(find_action(&f, ACTION_CREATE_POD, "mnist-worker-0")->object));
    assert_cond(new_status(&f), "GangScheduling", "absent");
    fx_free(&f);

    /* Turned off after an attempt had a group: the condition says so at the next one. */
    Fixture o = {.job = job_new("{\"workers\":1,\"gangScheduling\":false}",
                                "{\"attempt\":2,\"secretName\":\"" SECRET "\",\"conditions\":"
                                "[{\"type\":\"GangScheduling\",\"status\":\"True\","
                                "\"reason\":\"PodGroupCreated\",\"message\":\"m\"}]}"),
                 .gang_api = GANG_API_V1BETA1};
    fx_with_support(&o);
    fx_run(&o, NOW);
    assert_int_equal(count_lines(&o, "create-pod-group mnist-2"), 0);
    assert_cond(new_status(&o), "GangScheduling", "False/GangSchedulingDisabled");
    fx_free(&o);

    /* Not a boolean: Invalid, naming the field. */
    Fixture b = {.job = job_new("{\"workers\":2,\"gangScheduling\":\"yes\"}", NULL),
                 .gang_api = GANG_API_V1BETA1};
    fx_run(&b, NOW);
    assert_null(strstr(b.desc, "create-"));
    assert_cond(new_status(&b), "Invalid", "True/InvalidSpec");
    char *st = cJSON_PrintUnformatted(new_status(&b));
    assert_non_null(strstr(st, "spec.gangScheduling: expected a boolean"));
    free(st);
    fx_free(&b);

    /* A cluster without PodGroups: pods as before, said once (event and condition),
     * not again at the next attempt. */
    Fixture a = {.job = job_new(SPEC2, NULL), .gang_api = GANG_API_ABSENT};
    fx_with_support(&a);
    fx_run(&a, NOW);
    assert_string_equal(a.desc, "create-pod mnist-worker-0\n"
                                "create-pod mnist-worker-1\n"
                                "event Normal CreatedWorkers\n"
                                "event Warning GangSchedulingUnavailable\n"
                                "update-status mnist\n");
    assert_null(group_of(find_action(&a, ACTION_CREATE_POD, "mnist-worker-1")->object));
    assert_cond(new_status(&a), "GangScheduling", "False/GangSchedulingUnavailable");
    const Action *ev = find_action(&a, ACTION_EVENT, "mnist");
    for (size_t i = 0; i < a.plan.n; i++)
        if (strcmp(a.plan.actions[i].reason, "GangSchedulingUnavailable") == 0)
            ev = &a.plan.actions[i];
    assert_non_null(strstr(ev->message, "scheduling.k8s.io/v1beta1"));
    assert_non_null(strstr(ev->message, "scheduling.k8s.io/v1alpha2=true"));
    assert_non_null(strstr(ev->message, "GenericWorkload"));
    assert_non_null(strstr(ev->message, "GangScheduling"));
    fx_apply(&a);
    for (size_t i = 0; i < a.npods; i++)
        jsonx_set_str(jsonx_ensure_obj(a.pods[i], "status"), "phase", "Running");
    fx_run(&a, NOW + 1);
    fx_apply(&a);
    pod_terminated(pod_named(&a, "mnist-worker-1"), 1, NULL);
    fx_run(&a, NOW + 2);
    assert_null(strstr(a.desc, "pod-group")); /* nothing to delete on such a cluster */
    fx_apply(&a);
    fx_run(&a, NOW + 30);
    assert_int_equal(count_lines(&a, "create-pod mnist-worker-1"), 1);
    assert_null(strstr(a.desc, "GangSchedulingUnavailable"));
    assert_cond(new_status(&a), "GangScheduling", "False/GangSchedulingUnavailable");
    fx_free(&a);
}

static void test_scheduled_condition_says_why_a_job_waits(void **state)
{
    (void)state;
    const char *why = "0/1 nodes are available: 1 Insufficient cpu.";
    /* A gang of four (the evaluator apart) that does not fit. */
    Fixture f = {.job = job_new(SPEC_PS, NULL), .gang_api = GANG_API_V1BETA1};
    fx_with_support(&f);
    fx_run(&f, NOW);
    fx_apply(&f);
    for (size_t i = 0; i < f.npods; i++)
        pod_unschedulable(f.pods[i], why);
    fx_run(&f, NOW + 5);
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Pending");
    assert_cond(st, "Scheduled", "False/WaitingForGang");
    assert_string_equal(cond_message(st, "Scheduled"),
                        "0/4 pods schedulable as a group: 0/1 nodes are available: 1 "
                        "Insufficient cpu.");
    fx_apply(&f);
    fx_run(&f, NOW + 6);
    assert_string_equal(f.desc, ""); /* the same words: nothing to write */
    fx_apply(&f);
    /* Placed and running: True again. */
    for (size_t i = 0; i < f.npods; i++) {
        jsonx_set_str(jsonx_ensure_obj(f.pods[i], "status"), "phase", "Running");
        jsonx_set(jsonx_ensure_obj(f.pods[i], "status"), "conditions",
                  cJSON_Parse("[{\"type\":\"PodScheduled\",\"status\":\"True\"}]"));
    }
    fx_run(&f, NOW + 7);
    assert_cond(new_status(&f), "Scheduled", "True/AllPodsScheduled");
    fx_free(&f);

    /* Without a gang: one worker placed, the other not. */
    Fixture n = {.job = job_new(SPEC2, NULL), .gang_api = GANG_API_ABSENT};
    fx_with_support(&n);
    fx_run(&n, NOW);
    fx_apply(&n);
    jsonx_set_str(jsonx_ensure_obj(pod_named(&n, "mnist-worker-0"), "spec"), "nodeName", "node1");
    pod_unschedulable(pod_named(&n, "mnist-worker-1"), why);
    fx_run(&n, NOW + 5);
    st = new_status(&n);
    assert_cond(st, "Scheduled", "False/Unschedulable");
    assert_string_equal(cond_message(st, "Scheduled"),
                        "1/2 pods scheduled, the others unschedulable: 0/1 nodes are "
                        "available: 1 Insufficient cpu.");
    fx_free(&n);
}

/* Kubernetes v1.37's group cycle gives the cause only to the gang member it tried first
 * and the others a bare quorum count, in no fixed order: the job names the cause,
 * whichever pod has it, and falls back on the count when no pod has more. */
static void test_gang_cause_over_quorum_count(void **state)
{
    (void)state;
    const char *count = "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining";
    const char *why = "0/1 nodes are available: 1 Insufficient cpu.";
    Fixture f = {.job = job_new(SPEC2, NULL), .gang_api = GANG_API_V1BETA1};
    fx_with_support(&f);
    fx_run(&f, NOW);
    fx_apply(&f);
    pod_unschedulable(pod_named(&f, "mnist-worker-0"), count);
    pod_unschedulable(pod_named(&f, "mnist-worker-1"), why);
    fx_run(&f, NOW + 1);
    const cJSON *st = new_status(&f);
    assert_string_equal(cond_message(st, "Running"),
                        "pod mnist-worker-1 is unschedulable: 0/1 nodes are available: 1 "
                        "Insufficient cpu.");
    assert_string_equal(cond_message(st, "Scheduled"),
                        "0/2 pods schedulable as a group: 0/1 nodes are available: 1 "
                        "Insufficient cpu.");
    fx_apply(&f);
    /* Only counts: the first pod's words. */
    pod_unschedulable(pod_named(&f, "mnist-worker-1"), count);
    fx_run(&f, NOW + 2);
    st = new_status(&f);
    assert_string_equal(cond_message(st, "Running"),
                        "pod mnist-worker-0 is unschedulable: minCount (2) cannot be satisfied: "
                        "0 scheduled, 1 remaining");
    assert_string_equal(cond_message(st, "Scheduled"),
                        "0/2 pods schedulable as a group: minCount (2) cannot be satisfied: 0 "
                        "scheduled, 1 remaining");
    fx_free(&f);
}

/* Marks the pod's trainer container waiting for `reason` (an image pull that fails, say),
 * the pod Pending and created at `created`. */
static void pod_waiting(cJSON *pod, const char *reason, const char *message, double created)
{
    char buf[512], ts[40];
    snprintf(buf, sizeof buf,
             "[{\"name\":\"trainer\",\"state\":{\"waiting\":{\"reason\":\"%s\",\"message\":"
             "\"%s\"}}}]",
             reason, message);
    cJSON *st = jsonx_ensure_obj(pod, "status");
    jsonx_set_str(st, "phase", "Pending");
    jsonx_set(st, "containerStatuses", cJSON_Parse(buf));
    clock_format_rfc3339(created, ts, sizeof ts);
    jsonx_set_str(jsonx_ensure_obj(pod, "metadata"), "creationTimestamp", ts);
}

/* A pod that cannot start says why in Running=False/PodsWaiting, with one event per
 * blocked pod (not one per pass, nor when the kubelet's reason turns to BackOff); a pod
 * only starting (ContainerCreating) blocks nothing; spec.startupDeadlineSeconds fails the
 * job with the reason once a blocked pod is that old, and wakes the job up for it. */
static void test_waiting_pods_say_why_and_startup_deadline(void **state)
{
    (void)state;
    const char *pull = "failed to resolve reference \\\"example.invalid/nope:1\\\"";
    Fixture f = {.job = job_new("{\"workers\":2,\"startupDeadlineSeconds\":60,"
                                "\"checkpoint\":{\"claimName\":\"ckpt\"}}",
                                ST_LAUNCHED(""))};
    fx_with_support(&f);
    pod_waiting(fx_pod(&f, 0, 0, "Pending"), "ContainerCreating", "", NOW - 10);
    pod_waiting(fx_pod(&f, 1, 0, "Pending"), "ErrImagePull", pull, NOW - 10);
    fx_run(&f, NOW);
    const cJSON *st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Pending");
    assert_cond(st, "Running", "False/PodsWaiting");
    assert_string_equal(cond_message(st, "Running"),
                        "pod mnist-worker-1: container trainer: ErrImagePull: failed to resolve "
                        "reference \"example.invalid/nope:1\"");
    assert_int_equal(count_lines(&f, "event Warning PodsWaiting"), 1);
    /* Woken when worker 1 reaches its deadline, 60 s after it was created. */
    assert_true(f.plan.requeue_after > 49 && f.plan.requeue_after <= 50);
    fx_apply(&f);

    /* The kubelet backs off: the same pod, no second event. */
    pod_waiting(f.pods[1], "ImagePullBackOff", "Back-off pulling image", NOW - 10);
    fx_run(&f, NOW + 20);
    st = new_status(&f);
    assert_cond(st, "Running", "False/PodsWaiting");
    assert_string_equal(cond_message(st, "Running"),
                        "pod mnist-worker-1: container trainer: ImagePullBackOff: Back-off "
                        "pulling image");
    assert_int_equal(count_lines(&f, "event Warning PodsWaiting"), 0);
    fx_apply(&f);

    /* Past the deadline: Failed, naming the limit and the reason; pods cleaned up. */
    fx_run(&f, NOW + 51);
    st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Failed");
    assert_cond(st, "Failed", "True/StartupDeadlineExceeded");
    assert_string_equal(cond_message(st, "Failed"),
                        "not started within startupDeadlineSeconds=60: pod mnist-worker-1: "
                        "container trainer: ImagePullBackOff: Back-off pulling image");
    fx_free(&f);

    /* Without the deadline the job waits and says why, for as long as it takes. */
    f = (Fixture){.job = job_new(SPEC2, ST_LAUNCHED(""))};
    fx_with_support(&f);
    pod_waiting(fx_pod(&f, 0, 0, "Pending"), "CreateContainerConfigError",
                "secret \\\"creds\\\" not found", NOW - 3600);
    fx_pod(&f, 1, 0, "Running");
    fx_run(&f, NOW);
    st = new_status(&f);
    assert_string_equal(jsonx_str(st, "phase"), "Pending");
    assert_string_equal(cond_message(st, "Running"),
                        "pod mnist-worker-0: container trainer: CreateContainerConfigError: "
                        "secret \"creds\" not found");
    fx_apply(&f);

    /* Once it is unblocked (only starting now), the condition says so. */
    pod_waiting(f.pods[0], "ContainerCreating", "", NOW - 3600);
    fx_run(&f, NOW + 5);
    st = new_status(&f);
    assert_cond(st, "Running", "False/PodsStarting");
    assert_int_equal(count_lines(&f, "event Warning PodsWaiting"), 0);
    fx_free(&f);
}

/* Kubernetes v1.37.2's scheduler reports a gang member it cannot place for a missing
 * claim as PodScheduled False/SchedulerError, in its group cycle's words: the job still
 * says that its pods wait, and why, as the scheduler put it. */
static void test_scheduler_error_is_a_wait(void **state)
{
    (void)state;
    const char *why = "error in \"DynamicResources\" PodGroupPostFilter plugins: not found";
    Fixture f = {.job = job_new(SPEC2, NULL), .gang_api = GANG_API_V1BETA1};
    fx_with_support(&f);
    fx_run(&f, NOW);
    fx_apply(&f);
    for (size_t i = 0; i < f.npods; i++) {
        pod_unschedulable(f.pods[i], why);
        cJSON *c = cJSON_GetArrayItem(jsonx_arr(f.pods[i], "status.conditions"), 0);
        cJSON_ReplaceItemInObjectCaseSensitive(c, "reason", cJSON_CreateString("SchedulerError"));
    }
    fx_run(&f, NOW + 1);
    const cJSON *st = new_status(&f);
    assert_cond(st, "Running", "False/PodsWaiting");
    assert_string_equal(cond_message(st, "Running"),
                        "pod mnist-worker-0 is unschedulable: scheduler error: error in "
                        "\"DynamicResources\" PodGroupPostFilter plugins: not found");
    assert_cond(st, "Scheduled", "False/WaitingForGang");
    assert_string_equal(cond_message(st, "Scheduled"),
                        "0/2 pods schedulable as a group: scheduler error: error in "
                        "\"DynamicResources\" PodGroupPostFilter plugins: not found");
    assert_int_equal(count_lines(&f, "event Warning PodsWaiting"), 1);
    fx_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_job_creates_everything),
        cmocka_unit_test(test_steady_state_is_a_no_op),
        cmocka_unit_test(test_data_source_args),
        cmocka_unit_test(test_data_credentials_secret),
        cmocka_unit_test(test_export_arg),
        cmocka_unit_test(test_initial_weights_arg),
        cmocka_unit_test(test_elastic_spec),
        cmocka_unit_test(test_file_shards_spec),
        cmocka_unit_test(test_elastic_pod),
        cmocka_unit_test(test_elastic_global_batch_recorded),
        cmocka_unit_test(test_elastic_scale_down),
        cmocka_unit_test(test_elastic_members_nudge),
        cmocka_unit_test(test_elastic_scale_down_with_chief),
        cmocka_unit_test(test_elastic_scale_up),
        cmocka_unit_test(test_elastic_scale_down_then_past),
        cmocka_unit_test(test_elastic_scale_down_then_up),
        cmocka_unit_test(test_elastic_resize_restarts),
        cmocka_unit_test(test_elastic_shrink_when_replacement_unschedulable),
        cmocka_unit_test(test_elastic_shrink_after_replace_timeout),
        cmocka_unit_test(test_elastic_chief_lost_shrinks),
        cmocka_unit_test(test_elastic_chief_lost_below_min),
        cmocka_unit_test(test_elastic_chief_grows_back),
        cmocka_unit_test(test_elastic_chief_back_at_the_end),
        cmocka_unit_test(test_elastic_start_without_unschedulable),
        cmocka_unit_test(test_elastic_start_below_min),
        cmocka_unit_test(test_current_workers_follow_the_pods),
        cmocka_unit_test(test_all_running_sets_phase),
        cmocka_unit_test(test_chief_completed_succeeds_with_result),
        cmocka_unit_test(test_result_takes_only_the_schema),
        cmocka_unit_test(test_all_workers_policy_waits_for_everyone),
        cmocka_unit_test(test_never_policy_fails_job),
        cmocka_unit_test(test_on_failure_restarts_group_with_backoff),
        cmocka_unit_test(test_exit_code_policy),
        cmocka_unit_test(test_backoff_limit_exceeded),
        cmocka_unit_test(test_disruptions_never_fail),
        cmocka_unit_test(test_missing_pod_before_launch_is_created),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_ttl_and_clean_pod_policy),
        cmocka_unit_test(test_suspend_and_resume),
        cmocka_unit_test(test_workers_change_restarts_group),
        cmocka_unit_test(test_stale_and_foreign_pods),
        cmocka_unit_test(test_secret_is_never_adopted),
        cmocka_unit_test(test_keras_model_inline),
        cmocka_unit_test(test_invalid_spec),
        cmocka_unit_test(test_malformed_pods_do_not_crash),
        cmocka_unit_test(test_template_merge_gpus_domain),
        cmocka_unit_test(test_user_command),
        cmocka_unit_test(test_template_metrics_port),
        cmocka_unit_test(test_metrics_port_defaults),
        cmocka_unit_test(test_user_program_metrics_port),
        cmocka_unit_test(test_role_template_metrics_port),
        cmocka_unit_test(test_network_policy),
        cmocka_unit_test(test_crash_at_any_action_converges),
        cmocka_unit_test(test_wrong_types_anywhere_never_crash),
        cmocka_unit_test(test_force_delete_stuck_terminating),
        cmocka_unit_test(test_tf_config_oracle),
        cmocka_unit_test(test_roles_create_every_pod),
        cmocka_unit_test(test_roles_chief_completes),
        cmocka_unit_test(test_roles_failures),
        cmocka_unit_test(test_roles_cluster_change_restarts),
        cmocka_unit_test(test_roles_invalid),
        cmocka_unit_test(test_kueue_pod_group),
        cmocka_unit_test(test_template_reserved_keys),
        cmocka_unit_test(test_template_cluster_annotation_no_restart_loop),
        cmocka_unit_test(test_kueue_empty_queue_is_absent),
        cmocka_unit_test(test_init_container_failure_is_the_programs),
        cmocka_unit_test(test_disruption_restarts_back_off_and_stop),
        cmocka_unit_test(test_live_replacement_of_a_deleted_worker),
        cmocka_unit_test(test_live_replacement_in_a_kueue_group),
        cmocka_unit_test(test_elastic_in_a_queue_scale_restarts),
        cmocka_unit_test(test_elastic_in_a_queue_shrinks_in_place),
        cmocka_unit_test(test_live_replacement_of_a_missing_chief),
        cmocka_unit_test(test_live_replacement_falls_back),
        cmocka_unit_test(test_stranded_replacement),
        cmocka_unit_test(test_live_replacement_backoff_limit),
        cmocka_unit_test(test_recovery_timeout_flag),
        cmocka_unit_test(test_gang_pod_group_per_attempt),
        cmocka_unit_test(test_gang_pod_group_v1alpha2),
        cmocka_unit_test(test_gang_group_after_kueue_admission),
        cmocka_unit_test(test_gang_elastic_min_count),
        cmocka_unit_test(test_gang_min_count_follows_min_workers),
        cmocka_unit_test(test_gang_crash_converges),
        cmocka_unit_test(test_live_replacement_crash_converges),
        cmocka_unit_test(test_gang_off_and_absent),
        cmocka_unit_test(test_scheduled_condition_says_why_a_job_waits),
        cmocka_unit_test(test_waiting_pods_say_why_and_startup_deadline),
        cmocka_unit_test(test_scheduler_error_is_a_wait),
        cmocka_unit_test(test_gang_cause_over_quorum_count),
        cmocka_unit_test(test_failure_quote_from_log_tail),
    };
    return cmocka_run_group_tests_name("reconcile", tests, NULL, NULL);
}
