/* The built-in models against TensorFlow/Keras: starting from the same weights
 * (model_init_params, recomputed bit for bit by gen_reference.py), on the first 64
 * Fashion-MNIST training examples, the losses of the first optimizer steps must equal
 * the ones Keras computed (reference.json) within 1e-4 relative. mlp runs with dropout
 * off on both sides: its masks come from different RNGs, so only the deterministic
 * part can be compared (the Dropout layer itself is gradient-checked in test-layers).
 * KT_TEST_REFERENCE_MODELS="mlp shapes" runs only the tests named (among tutorial-cnn,
 * tutorial-cnn-l2, cnn2, mlp, shapes) and skips the others, saying so: `make valgrind`
 * sets it, a step of a CNN taking some 30 s under memcheck. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "model.h"
#include "optim.h"
#include "source.h"

#define REFERENCE "trainer/tests/reference/reference.json"
#define DATA_DIR "/usr/share/datasets/fashion-mnist"

static cJSON *reference;
static Source ds;
static const char *const test_names[] = {"tutorial-cnn", "tutorial-cnn-l2", "cnn2",
                                         "mlp",          "shapes",          NULL};
static unsigned selected = ~0u; /* bit i: test_names[i] runs (KT_TEST_REFERENCE_MODELS) */

static int setup(void **state)
{
    (void)state;
    FILE *f = fopen(REFERENCE, "rb");
    if (!f) return -1;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    reference = cJSON_Parse(buf);
    const char *only = getenv("KT_TEST_REFERENCE_MODELS");
    if (only) {
        selected = 0;
        for (const char *p = only + strspn(only, " ,"); *p; p += strspn(p, " ,")) {
            size_t w = strcspn(p, " ,");
            int i = 0;
            while (test_names[i] && !(strlen(test_names[i]) == w && !strncmp(p, test_names[i], w)))
                i++;
            if (!test_names[i]) {
                print_message("# KT_TEST_REFERENCE_MODELS: \"%.*s\" is not one of tutorial-cnn, "
                              "tutorial-cnn-l2, cnn2, mlp, shapes\n",
                              (int)w, p);
                return -1;
            }
            selected |= 1u << i;
            p += w;
        }
    }
    char err[256];
    if (source_open(&ds, "idx:" DATA_DIR, SOURCE_TRAIN, 10, NULL, err, sizeof err) != 0) {
        print_message("# %s\n", err);
        ds.count = 0;
    }
    return reference ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    cJSON_Delete(reference);
    source_free(&ds);
    return 0;
}

/* Runs the reference runs of the test `test` (one of test_names): of the built-in model
 * of that name, or of the model in spec when spec is not NULL. */
static void check_run(const char *test, const char *spec)
{
    const char *model_name = spec ? spec : test;
    for (int i = 0; test_names[i]; i++)
        if (strcmp(test_names[i], test) == 0 && !(selected >> i & 1)) {
            print_message("# %s: not in KT_TEST_REFERENCE_MODELS\n", test);
            skip();
        }
    if (ds.count == 0) skip();
    int runs = 0;
    const cJSON *run;
    cJSON_ArrayForEach(run, cJSON_GetObjectItem(reference, "runs"))
    {
        if (strcmp(cJSON_GetObjectItem(run, "model")->valuestring, model_name) != 0) continue;
        const char *opt_name = cJSON_GetObjectItem(run, "optimizer")->valuestring;
        const cJSON *mom = cJSON_GetObjectItem(run, "momentum");
        const cJSON *nest = cJSON_GetObjectItem(run, "nesterov");
        uint64_t seed = (uint64_t)cJSON_GetObjectItem(run, "seed")->valuedouble;
        char err[256];
        Model *m = NULL;
        assert_int_equal(model_create(&m, model_name, seed, err, sizeof err), 0);
        m->dropout_enabled = 0;
        model_reserve(m, 64);
        OptimizerKind kind;
        assert_int_equal(optim_parse_kind(opt_name, &kind), 0);
        OptimizerConfig oc =
            optim_defaults(kind, (float)cJSON_GetObjectItem(run, "lr")->valuedouble);
        oc.momentum = mom ? (float)mom->valuedouble : 0.0f;
        oc.nesterov = cJSON_IsTrue(nest);
        Optimizer *o = optim_create(&oc, m->num_params);
        float *x = malloc(64 * 784 * sizeof *x);
        int32_t y[64];
        size_t idx[64];
        for (int i = 0; i < 64; i++) idx[i] = (size_t)i;
        source_examples(&ds, idx, 64, PIXEL_UNIT, x, y);
        int step = 0;
        const cJSON *want;
        cJSON_ArrayForEach(want, cJSON_GetObjectItem(run, "losses"))
        {
            StepStats st;
            /* the trainer's path on one worker: plain SGD folded into the backward */
            if (optim_plain_sgd(o)) {
                model_step_sgd(m, x, y, 64, 0, oc.lr, &st);
                o->iterations++;
            } else {
                model_step(m, x, y, 64, 64, 1, 0, NULL, NULL, &st);
                optim_step(o, m->params, m->grads);
            }
            double rel = fabs(st.loss - want->valuedouble) / fabs(want->valuedouble);
            print_message("# %s %s step %d: kubetrain %.7f keras %.7f rel %.2e\n", model_name,
                          opt_name, step, st.loss, want->valuedouble, rel);
            if (rel > 1e-4)
                fail_msg("%s/%s step %d: loss %.7f, Keras %.7f (rel %.2e > 1e-4)", model_name,
                         opt_name, step, st.loss, want->valuedouble, rel);
            step++;
        }
        assert_true(step >= 3);
        double abs_sum = 0.0;
        for (size_t i = 0; i < m->num_params; i++) abs_sum += fabs(m->params[i]);
        double want_sum = cJSON_GetObjectItem(run, "final_abs_sum")->valuedouble;
        print_message("# %s %s final sum|w|: kubetrain %.4f keras %.4f\n", model_name, opt_name,
                      abs_sum, want_sum);
        assert_true(fabs(abs_sum - want_sum) / want_sum < 1e-4);
        free(x);
        optim_free(o);
        model_free(m);
        runs++;
    }
    assert_true(runs >= 2);
}

static void test_tutorial_cnn(void **state)
{
    (void)state;
    check_run("tutorial-cnn", NULL);
}
static void test_tutorial_cnn_l2(void **state)
{
    (void)state;
    check_run("tutorial-cnn-l2", NULL);
}
static void test_cnn2(void **state)
{
    (void)state;
    check_run("cnn2", NULL);
}
static void test_mlp(void **state)
{
    (void)state;
    check_run("mlp", NULL);
}
/* gen_reference.py's SHAPES_SPEC, the same text: a non-square "same" MaxPooling2D with
 * unequal strides and a Dense on a rank-3 input. */
static void test_spec_shapes(void **state)
{
    (void)state;
    check_run(
        "shapes",
        "{\"input_shape\":[28,28],\"layers\":[{\"type\":\"Reshape\",\"target_shape\":[28,28,1]},"
        "{\"type\":\"MaxPooling2D\",\"pool_size\":[3,2],\"strides\":[2,1],\"padding\":\"same\"},"
        "{\"type\":\"Dense\",\"units\":8,\"activation\":\"relu\"},{\"type\":\"Flatten\"},"
        "{\"type\":\"Dense\",\"units\":10}]}");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tutorial_cnn), cmocka_unit_test(test_tutorial_cnn_l2),
        cmocka_unit_test(test_cnn2),         cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_spec_shapes),
    };
    return cmocka_run_group_tests_name("reference", tests, setup, teardown);
}
