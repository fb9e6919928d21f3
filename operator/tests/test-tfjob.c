/* convert-tfjob (tfjob.h) and the YAML it reads and writes (yamljson.h): each TFJob case
 * becomes the expected TrainingJob with the expected warnings, and the output, read back
 * as kubectl reads it, is a job jobspec_parse accepts; each bad input is refused naming
 * the document and the field; the committed examples/tfjob/tf-ps-trainingjob.yaml is what
 * the converter prints now. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "jobspec.h"
#include "tfjob.h"
#include "yamljson.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXAMPLE_IN "examples/tfjob/tf-ps-tfjob.yaml"
#define EXAMPLE_OUT "examples/tfjob/tf-ps-trainingjob.yaml"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (run from the repository root)", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strdup(buf);
}

/* A TFJob's worker (or any role's) replica spec with the tensorflow container. */
#define REPLICA(n, extra)                                                                          \
    "      replicas: " #n "\n"                                                                     \
    "      template:\n"                                                                            \
    "        spec:\n"                                                                              \
    "          containers:\n"                                                                      \
    "          - name: tensorflow\n"                                                               \
    "            image: tf:1\n"                                                                    \
    "            command: [python3, train.py]\n" extra
#define HEAD(name)                                                                                 \
    "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: " name ", namespace: ml}\n"

/* Converts yaml; returns the rc, the documents read back (typed, as kubectl reads them)
 * in *docs, and the warnings joined by newlines in wbuf. */
static int run(const char *yaml, cJSON **docs, char *wbuf, size_t wlen, char *err, size_t errlen)
{
    cJSON *w = cJSON_CreateArray();
    char *out = NULL, perr[512];
    *docs = NULL;
    err[0] = 0;
    int rc = tfjob_convert_stream(yaml, strlen(yaml), "in.yaml", &out, w, err, errlen);
    wbuf[0] = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, w)
    {
        strncat(wbuf, it->valuestring, wlen - strlen(wbuf) - 2);
        strcat(wbuf, "\n");
    }
    cJSON_Delete(w);
    if (rc == 0) {
        if (yamljson_parse_manifests(out, strlen(out), docs, perr, sizeof perr) != 0)
            fail_msg("the output does not read back: %s\n%s", perr, out);
        const cJSON *d;
        cJSON_ArrayForEach(d, *docs)
        {
            cJSON *copy = cJSON_Duplicate(d, 1);
            cJSON *md = cJSON_GetObjectItemCaseSensitive(copy, "metadata");
            cJSON_AddStringToObject(md, "uid", "u");
            const cJSON *gen = cJSON_GetObjectItemCaseSensitive(md, "generateName");
            if (!cJSON_GetObjectItemCaseSensitive(md, "name") && cJSON_IsString(gen)) {
                char name[300]; /* what the API server would make of generateName */
                snprintf(name, sizeof name, "%sabcde", gen->valuestring);
                cJSON_AddStringToObject(md, "name", name);
            }
            if (!cJSON_GetObjectItemCaseSensitive(md, "namespace"))
                cJSON_AddStringToObject(md, "namespace", "default");
            JobSpec js;
            if (jobspec_parse(copy, &js, perr, sizeof perr) != 0)
                fail_msg("jobspec_parse refuses the output: %s\n%s", perr, out);
            cJSON_Delete(copy);
        }
    }
    free(out);
    return rc;
}

/* The one converted document of yaml equals the JSON `want`; each of the NULL-terminated
 * `warns` is in some warning, and there are `nwarn` warnings. */
static void expect(const char *yaml, const char *want, int nwarn, ...)
{
    cJSON *docs;
    char w[8192], err[1024];
    int rc = run(yaml, &docs, w, sizeof w, err, sizeof err);
    if (rc != 0) fail_msg("rc %d: %s", rc, err);
    cJSON *exp = cJSON_Parse(want);
    if (!exp) fail_msg("bad expected JSON: %s", want);
    if (cJSON_GetArraySize(docs) != 1 || !cJSON_Compare(docs->child, exp, 1)) {
        char *got = cJSON_Print(docs), *wp = cJSON_Print(exp);
        fail_msg("got\n%s\nwant\n%s", got, wp);
    }
    va_list ap;
    va_start(ap, nwarn);
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(w, s)) fail_msg("no warning contains \"%s\"; warnings:\n%s", s, w);
    va_end(ap);
    int n = 0;
    for (const char *p = w; (p = strchr(p, '\n')); p++)
        n++;
    if (n != nwarn) fail_msg("%d warnings, want %d:\n%s", n, nwarn, w);
    cJSON_Delete(exp);
    cJSON_Delete(docs);
}

/* yaml is refused with an error that contains each NULL-terminated string. */
static void refused(const char *yaml, ...)
{
    cJSON *docs;
    char w[8192], err[1024];
    int rc = run(yaml, &docs, w, sizeof w, err, sizeof err);
    if (rc != -EINVAL) fail_msg("rc %d, want -EINVAL (err \"%s\")", rc, err);
    va_list ap;
    va_start(ap, yaml);
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(err, s)) fail_msg("error \"%s\" does not contain \"%s\"", err, s);
    va_end(ap);
    printf("# refused: %s\n", err);
    assert_null(docs);
}

static void test_example_is_current(void **state)
{
    (void)state;
    char *in = slurp(EXAMPLE_IN), *committed = slurp(EXAMPLE_OUT), *out = NULL, err[1024];
    cJSON *w = cJSON_CreateArray();
    assert_int_equal(tfjob_convert_stream(in, strlen(in), EXAMPLE_IN, &out, w, err, sizeof err), 0);
    if (strcmp(out, committed) != 0)
        fail_msg(EXAMPLE_OUT " is not what convert-tfjob prints now; regenerate it with\n"
                             "  build/bin/kubetrain-operator convert-tfjob " EXAMPLE_IN
                             " > " EXAMPLE_OUT "\nnow:\n%s",
                 out);
    free(out);
    free(in);
    free(committed);
    cJSON_Delete(w);
}

static void test_example(void **state)
{
    (void)state;
    char *in = slurp(EXAMPLE_IN);
    const char *res = "{\"requests\":{\"cpu\":\"1\",\"memory\":\"2Gi\"}}";
    char want[4096];
    snprintf(
        want, sizeof want,
        "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
        "\"metadata\":{\"name\":\"tf-ps\",\"labels\":{\"team\":\"vision\"}},"
        "\"spec\":{\"workers\":2,\"image\":\"kubetrain/tensorflow:0.1.0\","
        "\"command\":[\"python3\",\"ps.py\"],\"args\":[\"--epochs\",\"3\",\"--steps-per-epoch\","
        "\"70\",\"--checkpoint-dir\",\"/checkpoints/tf-ps\"],\"chief\":{\"replicas\":1},"
        "\"ps\":{\"replicas\":1,\"template\":{\"spec\":{\"containers\":[{\"name\":\"trainer\","
        "\"resources\":{\"requests\":{\"cpu\":\"500m\",\"memory\":\"1Gi\"}},"
        "\"volumeMounts\":[{\"name\":\"ckpt\",\"mountPath\":\"/checkpoints\"}]}]}}},"
        "\"restartPolicy\":\"OnFailure\",\"backoffLimit\":3,\"activeDeadlineSeconds\":3600,"
        "\"ttlSecondsAfterFinished\":600,\"cleanPodPolicy\":\"Running\","
        "\"template\":{\"spec\":{\"containers\":[{\"name\":\"trainer\",\"resources\":%s,"
        "\"volumeMounts\":[{\"name\":\"ckpt\",\"mountPath\":\"/checkpoints\"}]}],"
        "\"volumes\":[{\"name\":\"ckpt\",\"persistentVolumeClaim\":{\"claimName\":\"ckpt\"}}]}}}}",
        res);
    expect(in, want, 4, "tfReplicaSpecs.*.restartPolicy: the replicas differ (Chief OnFailure",
           "most permissive: OnFailure", "schedulingPolicy.minAvailable: not carried over",
           "uid 65532", "spec.checkpoint: {claimName: ckpt, path: /checkpoints}", NULL);
    free(in);
}

/* Workers only (MWMS): the run policy, the port, the success policy, a template kept. */
static void test_workers(void **state)
{
    (void)state;
    expect(HEAD("mwms") "spec:\n"
                        "  successPolicy: AllWorkers\n"
                        "  runPolicy: {suspend: true, cleanPodPolicy: All}\n"
                        "  tfReplicaSpecs:\n"
                        "    worker:\n"
                        "      restartPolicy: ExitCode\n" REPLICA(
                            3, "            args: [--epochs, '2', '--verbose=yes']\n"
                               "            ports: [{name: tfjob-port, containerPort: 3333},"
                               " {name: metrics, containerPort: 9090}]\n"
                               "            env: [{name: MODE, value: 'on'}]\n"
                               "          nodeSelector: {pool: cpu}\n"
                               "          securityContext: {runAsUser: 0}\n"
                               "        metadata:\n"
                               "          creationTimestamp: null\n"
                               "          annotations: {a: b}\n"),
           "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
           "\"metadata\":{\"name\":\"mwms\",\"namespace\":\"ml\"},"
           "\"spec\":{\"workers\":3,\"image\":\"tf:1\",\"command\":[\"python3\",\"train.py\"],"
           "\"args\":[\"--epochs\",\"2\",\"--verbose=yes\"],\"port\":3333,"
           "\"restartPolicy\":\"ExitCode\",\"cleanPodPolicy\":\"All\",\"suspend\":true,"
           "\"successPolicy\":\"AllWorkers\",\"template\":{\"metadata\":{\"annotations\":"
           "{\"a\":\"b\"}},\"spec\":{\"containers\":[{\"name\":\"trainer\",\"ports\":[{\"name\":"
           "\"metrics\",\"containerPort\":9090}],\"env\":[{\"name\":\"MODE\",\"value\":\"on\"}]}],"
           "\"nodeSelector\":{\"pool\":\"cpu\"},\"securityContext\":{\"runAsUser\":0}}}}}",
           2, "runPolicy.backoffLimit: not set", "spec.checkpoint: none", NULL);
}

/* A lone Chief (old name Master) is the one worker; Always becomes OnFailure; the
 * default cleanPodPolicy is the training operator's None. */
static void test_chief_alone(void **state)
{
    (void)state;
    expect(HEAD("solo") "spec:\n"
                        "  runPolicy: {backoffLimit: 2}\n"
                        "  tfReplicaSpecs:\n"
                        "    Master:\n"
                        "      restartPolicy: Always\n" REPLICA(1, ""),
           "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
           "\"metadata\":{\"name\":\"solo\",\"namespace\":\"ml\"},"
           "\"spec\":{\"workers\":1,\"image\":\"tf:1\",\"command\":[\"python3\",\"train.py\"],"
           "\"restartPolicy\":\"OnFailure\",\"backoffLimit\":2,\"cleanPodPolicy\":\"None\"}}",
           4, "tfReplicaSpecs.Master: a Chief without Workers becomes the TrainingJob's one worker",
           "Master.restartPolicy: Always becomes OnFailure", "uid 65532", "spec.checkpoint", NULL);
    /* Worker replicas 0 beside a Chief: the same, with the Worker spec's own template gone */
    expect(HEAD("solo") "spec:\n"
                        "  runPolicy: {backoffLimit: 2}\n"
                        "  tfReplicaSpecs:\n"
                        "    Worker:\n" REPLICA(0, "") "    Chief:\n"
                                                       "      restartPolicy: OnFailure\n" REPLICA(
                                                           1, ""),
           "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
           "\"metadata\":{\"name\":\"solo\",\"namespace\":\"ml\"},"
           "\"spec\":{\"workers\":1,\"image\":\"tf:1\",\"command\":[\"python3\",\"train.py\"],"
           "\"restartPolicy\":\"OnFailure\",\"backoffLimit\":2,\"cleanPodPolicy\":\"None\"}}",
           3, "tfReplicaSpecs.Chief: a Chief without Workers", "uid 65532", "spec.checkpoint",
           NULL);
}

/* Roles whose program and template differ from the workers': the role gets its own
 * command, args [] (not the workers'), image, and an overlay that takes the workers'
 * nodeSelector and tolerations back out; what it cannot take out is a warning. */
static void test_roles_differ(void **state)
{
    (void)state;
    expect(
        HEAD("roles") "spec:\n"
                      "  enableDynamicWorker: true\n"
                      "  runPolicy:\n"
                      "    schedulingPolicy: {queue: team-a, priorityClass: high}\n"
                      "  tfReplicaSpecs:\n"
                      "    Worker:\n" REPLICA(
                          2,
                          "            args: [--epochs, '3']\n"
                          "          - name: sidecar\n"
                          "            image: busybox\n"
                          "          nodeSelector: {gpu: 'true'}\n"
                          "          tolerations: [{key: gpu, operator: Exists}]\n"
                          "          terminationGracePeriodSeconds: 60\n"
                          "        metadata: {labels: {tier: train}}\n") "    Chief:\n"
                                                                         "      replicas: 1\n"
                                                                         "      template:\n"
                                                                         "        spec:\n"
                                                                         "          containers:\n"
                                                                         "          - name: "
                                                                         "tensorflow\n"
                                                                         "            image: tf:1\n"
                                                                         "            command: "
                                                                         "[python3, train.py]\n"
                                                                         "            args: "
                                                                         "[--epochs, '3']\n"
                                                                         "          - name: "
                                                                         "sidecar\n"
                                                                         "            image: "
                                                                         "busybox\n"
                                                                         "          nodeSelector: "
                                                                         "{gpu: 'true'}\n"
                                                                         "          tolerations: "
                                                                         "[{key: gpu, operator: "
                                                                         "Exists}]\n"
                                                                         "          "
                                                                         "terminationGracePeriodSec"
                                                                         "onds: 60\n"
                                                                         "        metadata: "
                                                                         "{labels: {tier: train}}\n"
                                                                         "    Evaluator:\n"
                                                                         "      restartPolicy: "
                                                                         "OnFailure\n"
                                                                         "      template:\n"
                                                                         "        spec:\n"
                                                                         "          containers:\n"
                                                                         "          - name: "
                                                                         "tensorflow\n"
                                                                         "            image: tf:2\n"
                                                                         "            command: "
                                                                         "[python3, eval.py]\n"
                                                                         "            resources: "
                                                                         "{limits: {cpu: 2}}\n"
                                                                         "          "
                                                                         "priorityClassName: low\n",
        "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
        "\"metadata\":{\"name\":\"roles\",\"namespace\":\"ml\"},"
        "\"spec\":{\"workers\":2,\"image\":\"tf:1\",\"command\":[\"python3\",\"train.py\"],"
        "\"args\":[\"--epochs\",\"3\"],\"chief\":{\"replicas\":1},"
        "\"evaluator\":{\"replicas\":1,\"image\":\"tf:2\",\"command\":[\"python3\","
        "\"eval.py\"],\"args\":[],\"template\":{\"spec\":{\"containers\":[{\"name\":"
        "\"trainer\",\"resources\":{\"limits\":{\"cpu\":2}}}],\"priorityClassName\":\"low\","
        "\"nodeSelector\":{},\"tolerations\":[]}}},"
        "\"restartPolicy\":\"Never\",\"cleanPodPolicy\":\"None\","
        "\"template\":{\"metadata\":{\"labels\":{\"tier\":\"train\"}},\"spec\":{\"containers\":"
        "[{\"name\":\"trainer\"},{\"name\":\"sidecar\",\"image\":\"busybox\"}],"
        "\"nodeSelector\":{\"gpu\":\"true\"},\"tolerations\":[{\"key\":\"gpu\",\"operator\":"
        "\"Exists\"}],\"terminationGracePeriodSeconds\":60}}}}",
        9, "schedulingPolicy.queue: \"team-a\" not carried over",
        "kueue.x-k8s.io/queue-name: team-a", "spec.template.spec.priorityClassName: high",
        "spec.enableDynamicWorker: not carried",
        "Evaluator.template.metadata.labels: the Evaluator pods also get the Worker's label "
        "\"tier\"",
        "Evaluator.template.spec.containers: the Evaluator pods also get the Worker's "
        "container \"sidecar\"",
        "the Evaluator pods also get the Worker's terminationGracePeriodSeconds",
        "Evaluator.restartPolicy: OnFailure not carried over", NULL);
}

/* Two TFJobs in one stream: two TrainingJobs, in order, each warning naming its document. */
static void test_stream(void **state)
{
    (void)state;
    const char *yaml = "---\n" HEAD("one") "spec:\n  tfReplicaSpecs:\n    Worker:\n" REPLICA(
        1, "") "---\n---\n" HEAD("two") "spec:\n  tfReplicaSpecs:\n    Worker:\n" REPLICA(2, "");
    cJSON *docs;
    char w[8192], err[1024];
    assert_int_equal(run(yaml, &docs, w, sizeof w, err, sizeof err), 0);
    assert_int_equal(cJSON_GetArraySize(docs), 2);
    assert_string_equal(cJSON_GetObjectItem(docs->child, "metadata")->child->valuestring, "one");
    assert_int_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(docs->child->next, "spec"), "workers")->valueint,
        2);
    assert_non_null(strstr(w, "in.yaml: document 1 (TFJob one): spec.checkpoint"));
    assert_non_null(strstr(w, "in.yaml: document 2 (TFJob two): spec.checkpoint"));
    cJSON_Delete(docs);
}

static void test_refused(void **state)
{
    (void)state;
    refused(HEAD("one") "spec:\n  tfReplicaSpecs:\n    Worker:\n" REPLICA(1, "") "---\n"
                                                                                 "apiVersion: "
                                                                                 "apps/v1\nkind:"
                                                                                 " Deployment\n"
                                                                                 "metadata: "
                                                                                 "{name: web}\n",
            "in.yaml: document 2 (Deployment web): kind: \"Deployment\" is not a TFJob", NULL);
    refused("apiVersion: kubeflow.org/v1beta2\nkind: TFJob\nmetadata: {name: old}\nspec: {}\n",
            "document 1 (TFJob old): apiVersion: expected kubeflow.org/v1", NULL);
    refused(HEAD("x") "spec:\n  tfReplicaSpecs:\n    Worker:\n      template:\n        spec:\n"
                      "          containers: [{name: main, image: tf:1, command: [p]}]\n",
            "spec.tfReplicaSpecs.Worker.template.spec.containers: no container named tensorflow",
            NULL);
    refused(HEAD("x") "spec:\n  tfReplicaSpecs:\n    Worker:\n      template:\n        spec:\n"
                      "          containers: [{name: tensorflow, image: tf:1}]\n",
            "containers[tensorflow].command: not set", NULL);
    refused(HEAD("x") "spec:\n  tfReplicaSpecs:\n    Worker:\n" REPLICA(2, "") "    PS:\n" REPLICA(
                1, ""),
            "spec.tfReplicaSpecs.PS: parameter servers without a Chief", NULL);
    refused(HEAD("x") "spec:\n  tfReplicaSpecs:\n    Worker:\n" REPLICA(two, ""),
            "spec.tfReplicaSpecs.Worker.replicas: expected an integer", NULL);
    /* beyond long long: refused before any cast (found by fuzzing, UBSan) */
    refused(HEAD("x") "spec:\n  tfReplicaSpecs:\n    Worker:\n" REPLICA(1e90, ""),
            "spec.tfReplicaSpecs.Worker.replicas: expected an integer", NULL);
    refused(HEAD("x") "spec:\n  tfReplicaSpecs:\n    Worker:\n" REPLICA(
                1, "") "    Evaluator:\n" REPLICA(2, ""),
            "spec.tfReplicaSpecs.Evaluator.replicas: expected an integer in [0, 1]", NULL);
    refused(HEAD("x") "spec:\n  tfReplicaSpecs:\n    Worker:\n" REPLICA(
                1, "") "    Launcher:\n" REPLICA(1, ""),
            "spec.tfReplicaSpecs.Launcher: unknown replica type", NULL);
    refused(
        HEAD("x") "spec:\n  tfReplicaSpecs:\n    Worker:\n      restartPolicy: Sometimes\n" REPLICA(
            1, ""),
        "spec.tfReplicaSpecs.Worker.restartPolicy: expected one of Never, OnFailure", NULL);
    refused(HEAD("x") "spec:\n  runPolicy: {cleanPodPolicy: Some}\n  tfReplicaSpecs:\n    "
                      "Worker:\n" REPLICA(1, ""),
            "spec.runPolicy.cleanPodPolicy: expected one of None, Running, All", NULL);
    refused("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: "
            "a-name-long-enough-that-its-pod-hostnames-exceed-the-dns-limit}\n"
            "spec:\n  tfReplicaSpecs:\n    Worker:\n" REPLICA(1, ""),
            "would be refused by the operator: metadata.name", NULL);
    refused("a: [1, 2\n", "in.yaml: document 1, line", NULL);
    refused("", "in.yaml: no document", NULL);
}

/* What `kubectl get -o yaml` adds goes silently; the first v1 TFJobs' run policy directly
 * under spec is read; fields kubetrain has no place for are warnings. */
static void test_exported(void **state)
{
    (void)state;
    expect("apiVersion: kubeflow.org/v1\nkind: TFJob\n"
           "metadata:\n"
           "  generateName: exp-\n"
           "  uid: 1234\n"
           "  resourceVersion: '99'\n"
           "  creationTimestamp: 2026-01-01T00:00:00Z\n"
           "  finalizers: [x]\n"
           "  annotations:\n"
           "    kubectl.kubernetes.io/last-applied-configuration: '{}'\n"
           "spec:\n"
           "  backoffLimit: 4\n"
           "  cleanPodPolicy: All\n"
           "  runPolicy: {managedBy: kubeflow.org/training-operator}\n"
           "  tfReplicaSpecs:\n"
           "    Chief:\n" REPLICA(1, "") "    Worker:\n" REPLICA(1, "") "    PS:\n" REPLICA(
               1, "            ports: [{name: tfjob-port, "
                  "containerPort: 2223}]\n") "status: {conditions: []}\n",
           "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
           "\"metadata\":{\"generateName\":\"exp-\"},"
           "\"spec\":{\"workers\":1,\"image\":\"tf:1\",\"command\":[\"python3\",\"train.py\"],"
           "\"chief\":{\"replicas\":1},\"ps\":{\"replicas\":1},"
           "\"restartPolicy\":\"Never\",\"backoffLimit\":4,\"cleanPodPolicy\":\"All\"}}",
           5, "metadata.finalizers: not carried over", "spec.runPolicy.managedBy: not carried",
           "spec.tfReplicaSpecs.PS: tfjob-port 2223 differs from the Worker's 2222", "uid 65532",
           "spec.checkpoint", NULL);
    refused(HEAD("x") "spec:\n  tfReplicaSpecs:\n    Chief:\n" REPLICA(1, "") "    PS:\n" REPLICA(
                1, ""),
            "spec.tfReplicaSpecs: no Worker replicas beside the Chief and PS", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_is_current),
        cmocka_unit_test(test_example),
        cmocka_unit_test(test_workers),
        cmocka_unit_test(test_chief_alone),
        cmocka_unit_test(test_roles_differ),
        cmocka_unit_test(test_exported),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
