/* The template policy (podpolicy.h) over operator/tests/podpolicy-cases.json, the cases
 * the chart's ValidatingAdmissionPolicy is tested against too (charts/tests/test-chart.sh):
 * each refused template names its field first, each allowed one passes, and "none" lets
 * everything through. Then reconcile: a refused template makes the job Invalid with
 * reason TemplateNotAllowed, a Warning event naming the field, and nothing created. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "jsonx.h"
#include "podpolicy.h"
#include "reconcile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CASES "operator/tests/podpolicy-cases.json"

static cJSON *load_cases(void)
{
    FILE *f = fopen(CASES, "rb");
    if (!f) fail_msg("cannot open %s (run from the repository root)", CASES);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *doc = cJSON_Parse(buf);
    if (!doc || !cJSON_IsArray(jsonx_at(doc, "cases"))) fail_msg("%s: no \"cases\" array", CASES);
    return doc;
}

static void test_cases(void **state)
{
    (void)state;
    cJSON *doc = load_cases();
    const cJSON *c;
    int refused = 0, allowed = 0;
    cJSON_ArrayForEach(c, jsonx_at(doc, "cases"))
    {
        const char *name = jsonx_str(c, "name");
        const cJSON *t = jsonx_at(c, "template");
        const char *field = jsonx_str(c, "field");
        char err[512] = "";
        int rc = podpolicy_check(PODPOLICY_BASELINE, t, err, sizeof err);
        if (field) {
            size_t n = strlen(field);
            if (rc != -EPERM || strncmp(err, field, n) != 0 || err[n] != ':')
                fail_msg("%s: rc %d, \"%s\"; want -EPERM naming %s first", name, rc, err, field);
            refused++;
        } else {
            if (rc != 0) fail_msg("%s: refused (\"%s\"), want allowed", name, err);
            allowed++;
        }
        err[0] = 0;
        if (podpolicy_check(PODPOLICY_NONE, t, err, sizeof err) != 0)
            fail_msg("%s: refused under \"none\": %s", name, err);
    }
    printf("# %d refused, %d allowed\n", refused, allowed);
    assert_true(refused >= 19 && allowed >= 1);
    cJSON_Delete(doc);
    assert_int_equal(podpolicy_check(PODPOLICY_BASELINE, NULL, NULL, 0), 0);
}

static void test_levels(void **state)
{
    (void)state;
    PodPolicyLevel l = PODPOLICY_NONE;
    assert_int_equal(podpolicy_parse_level("baseline", &l), 0);
    assert_int_equal(l, PODPOLICY_BASELINE);
    assert_int_equal(podpolicy_parse_level("none", &l), 0);
    assert_int_equal(l, PODPOLICY_NONE);
    assert_int_equal(podpolicy_parse_level("restricted", &l), -EINVAL);
    /* A zeroed configuration is the safe one. */
    ReconcileConfig zero = {0};
    assert_int_equal(zero.template_policy, PODPOLICY_BASELINE);
}

static void test_reconcile_refuses(void **state)
{
    (void)state;
    cJSON *job = cJSON_Parse(
        "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{"
        "\"name\":\"mnist\",\"namespace\":\"default\",\"uid\":\"uid-1\",\"generation\":2},"
        "\"spec\":{\"workers\":2,\"template\":{\"spec\":{\"containers\":[{\"name\":\"trainer\","
        "\"securityContext\":{\"privileged\":true}}]}}}}");
    assert_non_null(job);
    ReconcileConfig cfg = {
        .desired = {.trainer_image = "t"}, .backoff_base_s = 1, .backoff_max_s = 1};
    Observed o = {.job = job, .now = 1800000000.0};
    Plan plan;
    char err[256];
    assert_int_equal(reconcile(&cfg, &o, &plan, err, sizeof err), 0);
    char *desc = plan_describe(&plan);
    assert_string_equal(desc, "event Warning TemplateNotAllowed\nupdate-status mnist\n");
    const char *field = "spec.template.spec.containers[0].securityContext.privileged: ";
    for (size_t i = 0; i < plan.n; i++) {
        const Action *a = &plan.actions[i];
        if (a->kind == ACTION_EVENT) assert_non_null(strstr(a->message, field));
        if (a->kind != ACTION_UPDATE_STATUS) continue;
        const cJSON *cond = cJSON_GetArrayItem(jsonx_at(a->object, "status.conditions"), 0);
        assert_string_equal(jsonx_str(cond, "type"), "Invalid");
        assert_string_equal(jsonx_str(cond, "status"), "True");
        assert_string_equal(jsonx_str(cond, "reason"), "TemplateNotAllowed");
        assert_non_null(strstr(jsonx_str(cond, "message"), field));
        assert_non_null(strstr(jsonx_str(cond, "message"), "--template-policy none"));
    }
    free(desc);
    plan_free(&plan);

    /* Under "none" the same job is run. */
    cfg.template_policy = PODPOLICY_NONE;
    assert_int_equal(reconcile(&cfg, &o, &plan, err, sizeof err), 0);
    desc = plan_describe(&plan);
    if (!strstr(desc, "create-secret")) fail_msg("not run under \"none\":\n%s", desc);
    free(desc);
    plan_free(&plan);
    cJSON_Delete(job);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_reconcile_refuses),
    };
    return cmocka_run_group_tests_name("podpolicy", tests, NULL, NULL);
}
