/* progress.c's decisions without a server: the trainer's /metrics text read, the
 * interval stretched by the write budget, the merge patch of status.progress,
 * status.checkpoint and the steps a restart lost, and the chief's exit step; and the
 * thread itself against the in-memory API server (fakeapi, merge patches of the status
 * subresource) and a stand-in for the chief's /metrics on loopback (a few lines of HTTP
 * serving the text prom.c writes: the real trainer is exercised with a real apiserver
 * in operator/tests/integration/test-progress.sh): it writes status.progress and
 * status.checkpoint, writes nothing while the numbers stay the same, and leaves alone a
 * job whose program serves nothing (spec.command). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clock.h"
#include "fakeapi.h"
#include "informer.h"
#include "jsonx.h"
#include "metrics.h"
#include "progress.h"
#include "../../trainer/tests/timescale.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* 2025-11-25T12:00:00Z */
#define NOW 1764072000.0

/* What the trainer's prom.c serves, HELP and TYPE lines included. */
static const char METRICS[] = "# HELP kubetrain_steps_total Training steps done.\n"
                              "# TYPE kubetrain_steps_total counter\n"
                              "kubetrain_steps_total 105\n"
                              "# TYPE kubetrain_epoch gauge\n"
                              "kubetrain_epoch 2\n"
                              "kubetrain_loss 0.4375\n"
                              "kubetrain_accuracy 0.8125\n"
                              "kubetrain_samples_per_second 2500.5\n"
                              "kubetrain_learning_rate 0.001\n"
                              "kubetrain_total_steps 210\n"
                              "kubetrain_start_step 70\n"
                              "kubetrain_checkpoint_step 100\n"
                              "kubetrain_checkpoint_timestamp_seconds 1764071990.000\n";

static void test_parse(void **state)
{
    (void)state;
    ProgressScrape s;
    assert_int_equal(progress_parse(METRICS, &s), 0);
    assert_int_equal(s.step, 105);
    assert_int_equal(s.epoch, 2);
    assert_int_equal(s.total_steps, 210);
    assert_int_equal(s.start_step, 70);
    assert_int_equal(s.checkpoint_step, 100);
    assert_true(s.loss == 0.4375 && s.accuracy == 0.8125 && s.samples_per_second == 2500.5);
    assert_true(s.checkpoint_time == 1764071990.0);
    /* Before any checkpoint: absent, not 0. */
    assert_int_equal(progress_parse("kubetrain_steps_total 3\nkubetrain_loss 2.25\n", &s), 0);
    assert_int_equal(s.checkpoint_step, -1);
    assert_true(isnan(s.checkpoint_time) && isnan(s.accuracy));
    /* Not the trainer's endpoint (a user's program, another exporter): nothing. */
    assert_int_equal(progress_parse("# HELP x\nprocess_cpu_seconds_total 4\n", &s), -ENODATA);
    assert_int_equal(progress_parse("", &s), -ENODATA);
    /* A name that only starts like one of ours is another metric. */
    assert_int_equal(progress_parse("kubetrain_steps_total_x 9\n", &s), -ENODATA);
}

static void test_interval(void **state)
{
    (void)state;
    ProgressConfig cfg = {.interval_s = 10, .write_qps = 10};
    assert_true(progress_interval(&cfg, 0) == 10);
    assert_true(progress_interval(&cfg, 100) == 10);
    /* 1,000 running jobs at 10 writes/s: each one every 100 s. */
    assert_true(progress_interval(&cfg, 1000) == 100);
    cfg.write_qps = 5;
    assert_true(progress_interval(&cfg, 1000) == 200);
}

static cJSON *job(const char *status)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
             "\"metadata\":{\"name\":\"mnist\",\"namespace\":\"default\",\"uid\":\"uid-1\"},"
             "\"spec\":{},\"status\":%s}",
             status);
    cJSON *j = cJSON_Parse(buf);
    assert_non_null(j);
    return j;
}

/* The first scrape of a job: everything written, no estimate yet (one point is no
 * rate), no steps lost (there was no earlier attempt). */
/* The first scrapes of 100 jobs seen at once are spread over the interval: each tenth of
 * it holds a few, none most of them. */
static void test_phase(void **state)
{
    (void)state;
    int bins[10] = {0};
    for (int i = 0; i < 100; i++) {
        char key[64];
        snprintf(key, sizeof key, "kt-progress/p%03d", i);
        double ph = progress_phase(key, 10);
        assert_true(ph >= 0 && ph < 10);
        assert_true(progress_phase(key, 10) == ph); /* the same every time */
        bins[(int)ph]++;
    }
    for (int b = 0; b < 10; b++)
        if (bins[b] < 2 || bins[b] > 25)
            fail_msg("%d of 100 jobs first scraped in second %d of 10", bins[b], b);
}

static void test_patch_first(void **state)
{
    (void)state;
    ProgressScrape s;
    assert_int_equal(progress_parse(METRICS, &s), 0);
    cJSON *j = job("{\"phase\":\"Running\",\"attempt\":0}"), *p = NULL;
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_non_null(p);
    assert_string_equal(jsonx_str(p, "metadata.uid"), "uid-1");
    const cJSON *pr = jsonx_obj(p, "status.progress");
    assert_int_equal(jsonx_int(pr, "step", -1), 105);
    assert_int_equal(jsonx_int(pr, "totalSteps", -1), 210);
    assert_string_equal(jsonx_str(pr, "percent"), "50%");
    assert_int_equal(jsonx_int(pr, "epoch", -1), 2);
    assert_int_equal(jsonx_int(pr, "attempt", -1), 0);
    assert_true(jsonx_num(pr, "loss", -1) == 0.4375);
    assert_true(jsonx_num(pr, "accuracy", -1) == 0.8125);
    assert_true(jsonx_num(pr, "samplesPerSecond", -1) == 2500.5);
    assert_string_equal(jsonx_str(pr, "updateTime"), "2025-11-25T12:00:00Z");
    assert_null(jsonx_at(pr, "estimatedCompletionTime"));
    assert_int_equal(jsonx_int(p, "status.checkpoint.step", -1), 100);
    assert_string_equal(jsonx_str(p, "status.checkpoint.time"), "2025-11-25T11:59:50Z");
    assert_null(jsonx_at(p, "status.restarts"));
    cJSON_Delete(p);
    cJSON_Delete(j);
}

/* A later scrape of the same attempt: the rate between the two scrapes gives the
 * estimate; the same numbers again are no write at all. */
static void test_patch_eta_and_unchanged(void **state)
{
    (void)state;
    ProgressScrape s;
    assert_int_equal(progress_parse(METRICS, &s), 0);
    /* 10 s ago at step 95: 1 step/s, 105 steps left. */
    cJSON *j = job("{\"phase\":\"Running\",\"attempt\":0,\"progress\":{\"attempt\":0,"
                   "\"step\":95,\"epoch\":2,\"loss\":0.5,\"accuracy\":0.8,"
                   "\"updateTime\":\"2025-11-25T11:59:50Z\"},\"checkpoint\":{\"step\":100}}"),
          *p = NULL;
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_non_null(p);
    assert_string_equal(jsonx_str(p, "status.progress.estimatedCompletionTime"),
                        "2025-11-25T12:01:45Z");
    cJSON_Delete(p);
    cJSON_Delete(j);

    j = job("{\"phase\":\"Running\",\"attempt\":0,\"progress\":{\"attempt\":0,\"step\":105,"
            "\"epoch\":2,\"loss\":0.4375,\"accuracy\":0.8125,\"updateTime\":"
            "\"2025-11-25T11:59:50Z\",\"estimatedCompletionTime\":\"2025-11-25T12:01:45Z\"},"
            "\"checkpoint\":{\"step\":100}}");
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_null(p);
    /* Only the checkpoint moved: that is worth a write. */
    s.checkpoint_step = 105;
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_non_null(p);
    assert_int_equal(jsonx_int(p, "status.checkpoint.step", -1), 105);
    /* Step unchanged, so no rate: the stale estimate is removed (null in a merge patch). */
    assert_true(cJSON_IsNull(jsonx_at(p, "status.progress.estimatedCompletionTime")));
    cJSON_Delete(p);
    cJSON_Delete(j);
}

/* The estimate is from two scrapes at one size: after a resize (status.currentWorkers
 * other than the last scrape's workers) the next scrape records the new size and no
 * estimate (null removes the old one); the one after at the same size has it again. */
static void test_patch_eta_same_size(void **state)
{
    (void)state;
    ProgressScrape s;
    assert_int_equal(progress_parse(METRICS, &s), 0);
    /* 10 s ago at step 95 with 2 workers; 3 train now. */
    cJSON *j =
              job("{\"phase\":\"Running\",\"attempt\":0,\"currentWorkers\":3,\"progress\":{"
                  "\"attempt\":0,\"step\":95,\"workers\":2,\"updateTime\":\"2025-11-25T11:59:50Z\","
                  "\"estimatedCompletionTime\":\"2025-11-25T12:03:00Z\"}}"),
          *p = NULL;
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_non_null(p);
    assert_int_equal(jsonx_int(p, "status.progress.workers", -1), 3);
    assert_true(cJSON_IsNull(jsonx_at(p, "status.progress.estimatedCompletionTime")));
    cJSON_Delete(p);
    cJSON_Delete(j);
    /* The same, the last scrape at 3 too: 1 step/s, 105 steps left. */
    j = job("{\"phase\":\"Running\",\"attempt\":0,\"currentWorkers\":3,\"progress\":{"
            "\"attempt\":0,\"step\":95,\"workers\":3,\"updateTime\":\"2025-11-25T11:59:50Z\"}}");
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_string_equal(jsonx_str(p, "status.progress.estimatedCompletionTime"),
                        "2025-11-25T12:01:45Z");
    cJSON_Delete(p);
    /* Only the size changed since: that is worth a write. */
    cJSON_Delete(j);
    j = job(
        "{\"phase\":\"Running\",\"attempt\":0,\"currentWorkers\":2,\"progress\":{"
        "\"attempt\":0,\"step\":105,\"epoch\":2,\"loss\":0.4375,\"accuracy\":0.8125,"
        "\"workers\":3,\"updateTime\":\"2025-11-25T11:59:50Z\"},\"checkpoint\":{\"step\":100}}");
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_non_null(p);
    assert_int_equal(jsonx_int(p, "status.progress.workers", -1), 2);
    cJSON_Delete(p);
    cJSON_Delete(j);
}

/* The first scrape of a new attempt: the steps the previous attempt trained past the
 * checkpoint the new one resumed from are lost, counted from the furthest of the last
 * scrape and the old chief's exit message, added to the total once. */
static void test_patch_steps_lost(void **state)
{
    (void)state;
    ProgressScrape s;
    assert_int_equal(progress_parse(METRICS, &s), 0); /* resumed at 70 */
    const char *st = "{\"phase\":\"Running\",\"attempt\":1,\"restarts\":{\"disruption\":1,"
                     "\"stepsLost\":4},\"progress\":{\"attempt\":0,\"step\":70,"
                     "\"updateTime\":\"2025-11-25T11:59:00Z\"}}";
    cJSON *j = job(st), *p = NULL;
    /* Saved on SIGTERM: the old chief stopped after step 70, the checkpoint's. */
    assert_int_equal(progress_patch(j, &s, 1, 70, NOW, &p), 0);
    assert_non_null(p);
    assert_int_equal(jsonx_int(p, "status.restarts.lastStepsLost", -1), 0);
    assert_int_equal(jsonx_int(p, "status.restarts.stepsLost", -1), 4);
    assert_int_equal(jsonx_int(p, "status.progress.attempt", -1), 1);
    /* No rate across attempts. */
    assert_null(jsonx_at(p, "status.progress.estimatedCompletionTime"));
    cJSON_Delete(p);
    /* Killed at step 83 without a save: 13 steps lost. */
    assert_int_equal(progress_patch(j, &s, 1, 83, NOW, &p), 0);
    assert_int_equal(jsonx_int(p, "status.restarts.lastStepsLost", -1), 13);
    assert_int_equal(jsonx_int(p, "status.restarts.stepsLost", -1), 17);
    cJSON_Delete(p);
    /* No exit message seen (operator restarted, pod gone): the last scrape bounds it. */
    cJSON_Delete(j);
    j = job("{\"phase\":\"Running\",\"attempt\":1,\"progress\":{\"attempt\":0,\"step\":80}}");
    assert_int_equal(progress_patch(j, &s, 1, -1, NOW, &p), 0);
    assert_int_equal(jsonx_int(p, "status.restarts.lastStepsLost", -1), 10);
    assert_int_equal(jsonx_int(p, "status.restarts.stepsLost", -1), 10);
    cJSON_Delete(p);
    cJSON_Delete(j);
    /* A job never scraped before its restart: nothing to compare with... */
    j = job("{\"phase\":\"Running\",\"attempt\":1}");
    assert_int_equal(progress_patch(j, &s, 1, -1, NOW, &p), 0);
    assert_null(jsonx_at(p, "status.restarts"));
    cJSON_Delete(p);
    /* ...unless its chief's exit message was seen (preempted before the first scrape,
     * saved on SIGTERM at step 70): the message alone says what was lost. */
    assert_int_equal(progress_patch(j, &s, 1, 70, NOW, &p), 0);
    assert_int_equal(jsonx_int(p, "status.restarts.lastStepsLost", -1), 0);
    assert_int_equal(jsonx_int(p, "status.restarts.stepsLost", -1), 0);
    cJSON_Delete(p);
    /* The first scrape of attempt 0 has no earlier attempt, whatever it is passed. */
    cJSON_Delete(j);
    j = job("{\"phase\":\"Running\",\"attempt\":0}");
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_null(jsonx_at(p, "status.restarts"));
    cJSON_Delete(p);
    cJSON_Delete(j);
}

/* Within one attempt status.checkpoint never moves back: a survivor that became the
 * chief of an elastic job serves the checkpoint of its last state sync (70 here) until
 * it saves its own, while its predecessor had written 100. A new attempt resumed from an
 * older one (the newest found damaged) does move it back. */
static void test_patch_checkpoint_forward(void **state)
{
    (void)state;
    ProgressScrape s;
    assert_int_equal(progress_parse(METRICS, &s), 0);
    s.checkpoint_step = 70;
    cJSON *j = job("{\"phase\":\"Running\",\"attempt\":0,\"progress\":{\"attempt\":0,"
                   "\"step\":100,\"updateTime\":\"2025-11-25T11:59:50Z\"},"
                   "\"checkpoint\":{\"step\":100}}"),
          *p = NULL;
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_non_null(p); /* the step moved */
    assert_int_equal(jsonx_int(p, "status.progress.step", -1), 105);
    assert_null(jsonx_at(p, "status.checkpoint"));
    cJSON_Delete(p);
    /* Nothing but the older checkpoint differs: no write at all. */
    cJSON_Delete(j);
    j = job("{\"phase\":\"Running\",\"attempt\":0,\"progress\":{\"attempt\":0,\"step\":105,"
            "\"epoch\":2,\"loss\":0.4375,\"accuracy\":0.8125,\"updateTime\":"
            "\"2025-11-25T11:59:50Z\"},\"checkpoint\":{\"step\":100}}");
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_null(p);
    /* The new chief saves 105: forward again. */
    s.checkpoint_step = 105;
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_int_equal(jsonx_int(p, "status.checkpoint.step", -1), 105);
    cJSON_Delete(p);
    /* Attempt 1 resumed from 70: written. */
    s.checkpoint_step = 70;
    assert_int_equal(progress_patch(j, &s, 1, -1, NOW, &p), 0);
    assert_int_equal(jsonx_int(p, "status.checkpoint.step", -1), 70);
    cJSON_Delete(p);
    cJSON_Delete(j);
}

static cJSON *pod(const char *labels, const char *annots, const char *message)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"labels\":{%s},"
             "\"annotations\":{%s}},\"status\":{\"phase\":\"Failed\",\"containerStatuses\":"
             "[{\"name\":\"trainer\",\"state\":{\"terminated\":{\"exitCode\":75,"
             "\"message\":%s}}}]}}",
             labels, annots, message);
    cJSON *p = cJSON_Parse(buf);
    assert_non_null(p);
    return p;
}

/* The chief's exit message: worker 0 without a chief, the chief with one; nobody else. */
static void test_chief_final_step(void **state)
{
    (void)state;
    const char *msg = "\"{\\\"error\\\":\\\"stopped\\\",\\\"step\\\":83,"
                      "\\\"checkpoint_step\\\":80}\"";
    const char *w0 = "\"kubetrain.dev/job-name\":\"mnist\",\"kubetrain.dev/role\":\"worker\","
                     "\"kubetrain.dev/replica-index\":\"0\"";
    const char *w1 = "\"kubetrain.dev/job-name\":\"mnist\",\"kubetrain.dev/role\":\"worker\","
                     "\"kubetrain.dev/replica-index\":\"1\"";
    const char *ch = "\"kubetrain.dev/job-name\":\"mnist\",\"kubetrain.dev/role\":\"chief\","
                     "\"kubetrain.dev/replica-index\":\"0\"";
    char key[512];
    long long attempt;
    long step;
    cJSON *p = pod(w0, "\"kubetrain.dev/attempt\":\"3\"", msg);
    assert_int_equal(progress_chief_final_step(p, key, sizeof key, &attempt, &step), 0);
    assert_string_equal(key, "ns/mnist");
    assert_int_equal(attempt, 3);
    assert_int_equal(step, 83);
    cJSON_Delete(p);
    p = pod(w1, "\"kubetrain.dev/attempt\":\"3\"", msg);
    assert_int_equal(progress_chief_final_step(p, key, sizeof key, &attempt, &step), -ENOENT);
    cJSON_Delete(p);
    /* With a chief, worker 0 is not it. */
    p = pod(w0, "\"kubetrain.dev/attempt\":\"3\",\"kubetrain.dev/cluster\":\"chief=1,worker=2\"",
            msg);
    assert_int_equal(progress_chief_final_step(p, key, sizeof key, &attempt, &step), -ENOENT);
    cJSON_Delete(p);
    p = pod(ch, "\"kubetrain.dev/attempt\":\"2\",\"kubetrain.dev/cluster\":\"chief=1,worker=2\"",
            msg);
    assert_int_equal(progress_chief_final_step(p, key, sizeof key, &attempt, &step), 0);
    assert_int_equal(attempt, 2);
    cJSON_Delete(p);
    /* A message without a step (a failure before training, a user's log tail). */
    p = pod(w0, "\"kubetrain.dev/attempt\":\"3\"", "\"Traceback (most recent call last)\"");
    assert_int_equal(progress_chief_final_step(p, key, sizeof key, &attempt, &step), -ENOENT);
    cJSON_Delete(p);
}

/* A TensorFlow job (spec.command) with the kubetrain package counts the steps a restart
 * lost as the C trainer's does. MWMS, 70 steps an epoch: attempt 0's chief reached step
 * 105 (mid-epoch 2), or its last scrape said 100 when the SIGTERMed program wrote no
 * message (the log's tail, FallbackToLogsOnError); attempt 1's fit() resumed from the
 * BackupAndRestore save of epoch 1, which the package serves as kubetrain_start_step 70.
 * The series and the messages are the package's own (prometheus_client's floats). */
static void test_patch_steps_lost_tf(void **state)
{
    (void)state;
    static const char tf_metrics[] = "# HELP kubetrain_steps_total Training steps done.\n"
                                     "# TYPE kubetrain_steps_total counter\n"
                                     "kubetrain_steps_total 71.0\n"
                                     "kubetrain_step_seconds_total 0.52\n"
                                     "# TYPE kubetrain_epoch gauge\n"
                                     "kubetrain_epoch 2.0\n"
                                     "kubetrain_total_steps 210.0\n"
                                     "kubetrain_start_step 70.0\n"
                                     "kubetrain_checkpoint_step 70.0\n"
                                     "kubetrain_checkpoint_timestamp_seconds 1.76407199e+09\n";
    const char *chief = "\"kubetrain.dev/job-name\":\"tf\",\"kubetrain.dev/role\":\"chief\","
                        "\"kubetrain.dev/replica-index\":\"0\"";
    const char *annots = "\"kubetrain.dev/attempt\":\"0\","
                         "\"kubetrain.dev/cluster\":\"chief=1,worker=2\"";
    ProgressScrape s;
    assert_int_equal(progress_parse(tf_metrics, &s), 0);
    assert_int_equal(s.start_step, 70);
    /* The package's message on an exception: the step it reached. */
    char key[512];
    long long attempt;
    long final = -1;
    cJSON *p = pod(chief, annots,
                   "\"{\\\"error\\\": \\\"RuntimeError: Collective ops is aborted\\\", "
                   "\\\"step\\\": 105, \\\"checkpoint_step\\\": 70}\"");
    assert_int_equal(progress_chief_final_step(p, key, sizeof key, &attempt, &final), 0);
    assert_int_equal(final, 105);
    cJSON_Delete(p);
    /* Killed by SIGTERM: the log's tail is no message with a step. */
    p = pod(chief, annots, "\"Epoch 2/3\\n35/70 - loss: 0.61\"");
    long none = -1;
    assert_int_equal(progress_chief_final_step(p, key, sizeof key, &attempt, &none), -ENOENT);
    cJSON_Delete(p);

    cJSON *j = job("{\"phase\":\"Running\",\"attempt\":1,\"restarts\":{\"disruption\":1},"
                   "\"progress\":{\"attempt\":0,\"step\":100}}");
    assert_non_null(jsonx_set(j, "spec", cJSON_Parse("{\"command\":[\"python3\",\"mwms.py\"]}")));
    cJSON *patch = NULL;
    assert_int_equal(progress_patch(j, &s, 1, final, NOW, &patch), 0);
    assert_int_equal(jsonx_int(patch, "status.restarts.lastStepsLost", -1), 35);
    assert_int_equal(jsonx_int(patch, "status.restarts.stepsLost", -1), 35);
    assert_int_equal(jsonx_int(patch, "status.progress.step", -1), 71);
    assert_int_equal(jsonx_int(patch, "status.checkpoint.step", -1), 70);
    cJSON_Delete(patch);
    assert_int_equal(progress_patch(j, &s, 1, none, NOW, &patch), 0);
    assert_int_equal(jsonx_int(patch, "status.restarts.lastStepsLost", -1), 30);
    cJSON_Delete(patch);
    cJSON_Delete(j);
}

/* Which jobs the thread scrapes: Running ones of the C trainer, and of a user's program
 * only when the chief's template declares the port `metrics` (the kubetrain package's):
 * spec.chief's laid over spec.template, or spec.template alone. */
static void test_job_scrapable(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *phase;
        int want;
    } cases[] = {
        {"{\"workers\":2}", "Running", 1},
        {"{\"workers\":2}", "Pending", 0},
        {"{\"command\":[\"python3\",\"mwms.py\"]}", "Running", 0},
        {"{\"command\":[\"python3\",\"mwms.py\"],\"template\":{\"spec\":{\"containers\":"
         "[{\"name\":\"trainer\",\"ports\":[{\"name\":\"metrics\",\"containerPort\":9090}]}]}}}",
         "Running", 1},
        {"{\"command\":[\"python3\",\"mwms.py\"],\"template\":{\"spec\":{\"containers\":"
         "[{\"name\":\"trainer\",\"ports\":[{\"name\":\"metrics\",\"containerPort\":9090}]}]}}}",
         "Succeeded", 0},
        /* Another name, or no number a port can have: not declared. */
        {"{\"command\":[\"python3\",\"mwms.py\"],\"template\":{\"spec\":{\"containers\":"
         "[{\"name\":\"trainer\",\"ports\":[{\"name\":\"http\",\"containerPort\":9090}]}]}}}",
         "Running", 0},
        {"{\"command\":[\"python3\",\"mwms.py\"],\"template\":{\"spec\":{\"containers\":"
         "[{\"name\":\"trainer\",\"ports\":[{\"name\":\"metrics\",\"containerPort\":0}]}]}}}",
         "Running", 0},
        /* The chief's own template declares it: its pod serves it. */
        {"{\"command\":[\"python3\",\"ps.py\"],\"chief\":{\"template\":{\"spec\":{\"containers\":"
         "[{\"name\":\"trainer\",\"ports\":[{\"name\":\"metrics\",\"containerPort\":9090}]}]}}}}",
         "Running", 1},
        /* The chief's trainer container replaces the job's, which declared it. */
        {"{\"command\":[\"python3\",\"ps.py\"],\"template\":{\"spec\":{\"containers\":"
         "[{\"name\":\"trainer\",\"ports\":[{\"name\":\"metrics\",\"containerPort\":9090}]}]}},"
         "\"chief\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"trainer\"}]}}}}",
         "Running", 0},
        /* Only the evaluator's template declares it: not the chief. */
        {"{\"command\":[\"python3\",\"ps.py\"],\"chief\":{},\"evaluator\":{\"template\":"
         "{\"spec\":{\"containers\":[{\"name\":\"trainer\",\"ports\":[{\"name\":\"metrics\","
         "\"containerPort\":9090}]}]}}}}",
         "Running", 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char st[128];
        snprintf(st, sizeof st, "{\"phase\":\"%s\"}", cases[k].phase);
        cJSON *j = job(st);
        assert_non_null(jsonx_set(j, "spec", cJSON_Parse(cases[k].spec)));
        if (progress_job_scrapable(j) != cases[k].want)
            fail_msg("case %zu (%s, %s): scrapable %d, want %d", k, cases[k].spec, cases[k].phase,
                     progress_job_scrapable(j), cases[k].want);
        cJSON_Delete(j);
    }
}

/* Hostile or broken numbers (issue 41, item 6): a NaN loss removes status.progress.loss
 * rather than leave the last finite one; an epoch past the schema's int32 and times past
 * year 9999 are dropped, not written into a patch the API server refuses whole. */
static void test_patch_hostile_numbers(void **state)
{
    (void)state;
    ProgressScrape s;
    assert_int_equal(progress_parse("kubetrain_steps_total 120\nkubetrain_loss NaN\n"
                                    "kubetrain_accuracy +Inf\nkubetrain_epoch 2147483648\n"
                                    "kubetrain_total_steps 1000000000000\n"
                                    "kubetrain_checkpoint_step 100\n"
                                    "kubetrain_checkpoint_timestamp_seconds 1e300\n",
                                    &s),
                     0);
    assert_int_equal(s.loss_nonfinite, 1);
    assert_int_equal(s.accuracy_nonfinite, 1);
    assert_int_equal(s.epoch, -1);
    /* 2^31 - 1 is still an epoch. */
    ProgressScrape s2;
    assert_int_equal(progress_parse("kubetrain_steps_total 1\nkubetrain_epoch 2147483647\n", &s2),
                     0);
    assert_int_equal(s2.epoch, 2147483647);
    assert_int_equal(s2.loss_nonfinite, 0);
    /* 10 s ago at step 110: 1 step/s, so the end is 31,700 years away. */
    cJSON *j = job("{\"phase\":\"Running\",\"attempt\":0,\"progress\":{\"attempt\":0,"
                   "\"step\":110,\"epoch\":2,\"loss\":0.5,\"accuracy\":0.8,"
                   "\"updateTime\":\"2025-11-25T11:59:50Z\"}}"),
          *p = NULL;
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_non_null(p);
    char *got = cJSON_PrintUnformatted(jsonx_obj(p, "status"));
    assert_string_equal(got, "{\"progress\":{\"attempt\":0,\"step\":120,\"updateTime\":"
                             "\"2025-11-25T12:00:00Z\",\"loss\":null,\"accuracy\":null,"
                             "\"totalSteps\":1000000000000,\"percent\":\"0%\"},"
                             "\"checkpoint\":{\"step\":100}}");
    free(got);
    cJSON_Delete(p);
    cJSON_Delete(j);
    /* Once removed, a loss still NaN is no change. */
    j = job("{\"phase\":\"Running\",\"attempt\":0,\"progress\":{\"attempt\":0,\"step\":120,"
            "\"updateTime\":\"2025-11-25T11:59:50Z\"},\"checkpoint\":{\"step\":100}}");
    assert_int_equal(progress_patch(j, &s, 0, -1, NOW, &p), 0);
    assert_null(p);
    cJSON_Delete(j);

    char ts[40];
    const double bad[] = {1e300, -1e300, -1, NAN, INFINITY, 253402300800.0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(ts, "junk", 5);
        assert_int_equal(clock_format_rfc3339(bad[i], ts, sizeof ts), -ERANGE);
        assert_string_equal(ts, "");
    }
    assert_int_equal(clock_format_rfc3339(253402300799.0, ts, sizeof ts), 0);
    assert_string_equal(ts, "9999-12-31T23:59:59Z");
    assert_int_equal(clock_format_rfc3339(NOW, ts, sizeof ts), 0);
    assert_string_equal(ts, "2025-11-25T12:00:00Z");
}

/* A pod of job "mnist" with these labels and annotations, Running at `ip`. */
static cJSON *chief_pod(const char *role, const char *index, const char *annots, const char *ip)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"labels\":{"
             "\"kubetrain.dev/job-name\":\"mnist\",\"kubetrain.dev/role\":\"%s\","
             "\"kubetrain.dev/replica-index\":\"%s\"},\"annotations\":{"
             "\"kubetrain.dev/attempt\":\"2\"%s}},\"status\":{\"phase\":\"Running\","
             "\"podIP\":\"%s\"}}",
             role, index, annots, ip);
    cJSON *p = cJSON_Parse(buf);
    assert_non_null(p);
    return p;
}

/* The chief's URL: only a decimal port 1-65535 and the pod's IP address (issue 41, item
 * 2: "1@127.0.0.1:PORT/internal/admin?" made the operator GET its own loopback); the
 * chief known by its labels and its newest object (item 7: a chief replaced in a Kueue
 * group carries its replacement number under a name of its own). */
static void test_chief_url(void **state)
{
    (void)state;
    static const struct {
        const char *port, *ip, *url;
    } cases[] = {
        {"9090", "10.0.0.5", "http://10.0.0.5:9090/metrics"},
        {"65535", "fd00::5", "http://[fd00::5]:65535/metrics"},
        {"1", "10.0.0.5", "http://10.0.0.5:1/metrics"},
        {"1@127.0.0.1:8080/internal/admin?", "10.0.0.5", ""},
        {"8080/x", "10.0.0.5", ""},
        {"0", "10.0.0.5", ""},
        {"65536", "10.0.0.5", ""},
        {"123456", "10.0.0.5", ""},
        {"+80", "10.0.0.5", ""},
        {" 80", "10.0.0.5", ""},
        {"", "10.0.0.5", ""},
        {"9090", "127.0.0.1@evil", ""},
        {"9090", "evil.example", ""},
        {"9090", "10.0.0.5:8080", ""},
        {"9090", "", ""},
    };
    char url[128], annots[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(annots, sizeof annots, ",\"kubetrain.dev/metrics-port\":\"%s\"", cases[i].port);
        cJSON *p = chief_pod("worker", "0", annots, cases[i].ip);
        memcpy(url, "junk", 5);
        assert_int_equal(progress_chief_url(p, "mnist", -1, 2, 0, url, sizeof url), 0);
        if (strcmp(url, cases[i].url) != 0)
            fail_msg("port \"%s\" ip \"%s\": got \"%s\", want \"%s\"", cases[i].port, cases[i].ip,
                     url, cases[i].url);
        cJSON_Delete(p);
    }
    const char *port = ",\"kubetrain.dev/metrics-port\":\"9090\"";
    /* Not the chief: another job's, another attempt's, worker 1, worker 0 beside a chief. */
    cJSON *p = chief_pod("worker", "0", port, "10.0.0.5");
    assert_int_equal(progress_chief_url(p, "other", -1, 2, 0, url, sizeof url), -ENOENT);
    assert_int_equal(progress_chief_url(p, "mnist", -1, 3, 0, url, sizeof url), -ENOENT);
    cJSON_Delete(p);
    p = chief_pod("worker", "1", port, "10.0.0.5");
    assert_int_equal(progress_chief_url(p, "mnist", -1, 2, 0, url, sizeof url), -ENOENT);
    cJSON_Delete(p);
    p = chief_pod("worker", "0",
                  ",\"kubetrain.dev/metrics-port\":\"9090\",\"kubetrain.dev/cluster\":"
                  "\"chief=1,worker=2,ps=0\"",
                  "10.0.0.5");
    assert_int_equal(progress_chief_url(p, "mnist", -1, 2, 0, url, sizeof url), -ENOENT);
    cJSON_Delete(p);
    /* Replaced once: the new object (replacement 1) is the chief, the old one is not. */
    p = chief_pod("worker", "0",
                  ",\"kubetrain.dev/metrics-port\":\"9090\",\"kubetrain.dev/replacement\":\"1\"",
                  "10.0.0.6");
    assert_int_equal(progress_chief_url(p, "mnist", -1, 2, 1, url, sizeof url), 0);
    assert_string_equal(url, "http://10.0.0.6:9090/metrics");
    assert_int_equal(progress_chief_url(p, "mnist", -1, 2, 0, url, sizeof url), -ENOENT);
    cJSON_Delete(p);
    p = chief_pod("worker", "0", port, "10.0.0.5");
    assert_int_equal(progress_chief_url(p, "mnist", -1, 2, 1, url, sizeof url), -ENOENT);
    cJSON_Delete(p);
}

/* The pod scraped while an elastic job's status.members leaves the chief's slot out:
 * the lowest member's worker (TF_CONFIG index i is worker i, or worker i - 1 beside a
 * chief task at 0); the chief's slot (-1) when it is a member, when there is no list, and
 * for a list that is not one. */
static void test_scraped_worker(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *members;
        int want;
    } cases[] = {
        {"{}", NULL, -1},
        {"{}", "0,1,2", -1},
        {"{}", "0", -1},
        {"{}", "1,2", 1},
        {"{}", "2", 2},
        {"{\"chief\":{}}", "1,2,3", 0},
        {"{\"chief\":{\"replicas\":1}}", "2,3", 1},
        {"{\"chief\":{\"replicas\":1}}", "0,2,3", -1},
        {"{\"chief\":{\"replicas\":0}}", "1,2", 1},
        {"{}", "x,1", -1},
        {"{}", "1x", -1},
        {"{}", "-1,2", -1},
        {"{}", "99999,2", -1},
        {"{}", "", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[512];
        if (cases[i].members)
            snprintf(buf, sizeof buf, "{\"spec\":%s,\"status\":{\"members\":\"%s\"}}",
                     cases[i].spec, cases[i].members);
        else
            snprintf(buf, sizeof buf, "{\"spec\":%s,\"status\":{}}", cases[i].spec);
        cJSON *j = cJSON_Parse(buf);
        assert_non_null(j);
        int got = progress_scraped_worker(j);
        if (got != cases[i].want)
            fail_msg("spec %s members %s: worker %d, want %d", cases[i].spec,
                     cases[i].members ? cases[i].members : "(none)", got, cases[i].want);
        cJSON_Delete(j);
    }
    /* The lowest member's pod is the one scraped, no other. */
    const char *port = ",\"kubetrain.dev/metrics-port\":\"9090\"";
    char url[128];
    cJSON *p = chief_pod("worker", "1", port, "10.0.0.7");
    assert_int_equal(progress_chief_url(p, "mnist", 1, 2, 0, url, sizeof url), 0);
    assert_string_equal(url, "http://10.0.0.7:9090/metrics");
    assert_int_equal(progress_chief_url(p, "mnist", 2, 2, 0, url, sizeof url), -ENOENT);
    assert_int_equal(progress_chief_url(p, "mnist", -1, 2, 0, url, sizeof url), -ENOENT);
    cJSON_Delete(p);
    p = chief_pod("chief", "0", port, "10.0.0.7");
    assert_int_equal(progress_chief_url(p, "mnist", 0, 2, 0, url, sizeof url), -ENOENT);
    cJSON_Delete(p);
    /* worker 0 beside a chief task that is left out */
    p = chief_pod("worker", "0",
                  ",\"kubetrain.dev/metrics-port\":\"9090\",\"kubetrain.dev/cluster\":"
                  "\"chief=1,worker=2,ps=0\"",
                  "10.0.0.8");
    assert_int_equal(progress_chief_url(p, "mnist", 0, 2, 0, url, sizeof url), 0);
    assert_string_equal(url, "http://10.0.0.8:9090/metrics");
    cJSON_Delete(p);
}

/* ------------------------------------------------------------------------------------
 * The thread */

/* The chief's /metrics: answers every connection with `text` (swapped under mu). */
typedef struct Chief {
    int fd, port;
    int stop;
    pthread_t thread;
    pthread_mutex_t mu;
    char text[2048];
    int served;
} Chief;

static void *chief_main(void *arg)
{
    Chief *c = arg;
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept(c->fd, NULL, NULL);
        if (fd < 0) continue;
        char req[4096];
        size_t len = 0;
        while (len < sizeof req - 1) { /* up to the end of the request's head */
            ssize_t n = recv(fd, req + len, sizeof req - 1 - len, 0);
            if (n <= 0) break;
            len += (size_t)n;
            req[len] = '\0';
            if (strstr(req, "\r\n\r\n")) break;
        }
        char out[4096];
        pthread_mutex_lock(&c->mu);
        int n = snprintf(out, sizeof out,
                         "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         strlen(c->text), c->text);
        c->served++;
        pthread_mutex_unlock(&c->mu);
        if (send(fd, out, (size_t)n, MSG_NOSIGNAL) < 0) { /* the scraper gave up */
        }
        close(fd);
    }
    return NULL;
}

static int chief_served(Chief *c)
{
    pthread_mutex_lock(&c->mu);
    int n = c->served;
    pthread_mutex_unlock(&c->mu);
    return n;
}

static void nap(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

#define WAIT_FOR(timeout, what, expr)                                                              \
    do {                                                                                           \
        double t0_ = clock_mono(), limit_ = scaled(timeout);                                       \
        while (!(expr)) {                                                                          \
            if (clock_mono() - t0_ > limit_)                                                       \
                fail_msg("timed out waiting %g s for %s", limit_, what);                           \
            nap(0.02);                                                                             \
        }                                                                                          \
    } while (0)

#define JOBS "/apis/kubetrain.dev/v1alpha1/namespaces/default/trainingjobs"
#define PODS "/api/v1/namespaces/default/pods"

/* Pod NAME of job JOB, attempt 0, Running on 127.0.0.1 in role ROLE, replica index
 * `index`, naming `port` as its metrics port; `cluster`: its kubetrain.dev/cluster
 * annotation, or NULL. */
static void make_pod_at(FakeApi *api, const char *name, const char *job, const char *role,
                        int index, const char *cluster, int port)
{
    char buf[2048], extra[256] = "";
    if (cluster) snprintf(extra, sizeof extra, ",\"kubetrain.dev/cluster\":\"%s\"", cluster);
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\","
             "\"labels\":{\"kubetrain.dev/job-name\":\"%s\",\"kubetrain.dev/role\":\"%s\","
             "\"kubetrain.dev/replica-index\":\"%d\"},"
             "\"annotations\":{\"kubetrain.dev/attempt\":\"0\",\"kubetrain.dev/metrics-port\":"
             "\"%d\"%s}},\"status\":{\"phase\":\"Running\",\"podIP\":\"127.0.0.1\"}}",
             name, job, role, index, port, extra);
    cJSON_Delete(fakeapi_create(api, PODS, buf));
}

/* make_pod_at of replica index 0. */
static void make_pod(FakeApi *api, const char *name, const char *job, const char *role,
                     const char *cluster, int port)
{
    make_pod_at(api, name, job, role, 0, cluster, port);
}

/* A Running job NAME of attempt 0 and its Running chief (worker 0) on 127.0.0.1, naming
 * `port` as its metrics port: the C trainer (COMMAND 0), a user's program (spec.command,
 * 1) or one whose template declares the port `metrics` (2). */
static void make_job(FakeApi *api, const char *name, int command, int port)
{
    char buf[2048], path[256];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"kubetrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
             "\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\"},\"spec\":{%s%s}}",
             name, command ? "\"command\":[\"python\",\"train.py\"]" : "",
             command == 2 ? ",\"template\":{\"spec\":{\"containers\":[{\"name\":\"trainer\","
                            "\"ports\":[{\"name\":\"metrics\",\"containerPort\":9090}]}]}}"
                          : "");
    cJSON *j = fakeapi_create(api, JOBS, buf);
    assert_non_null(j);
    jsonx_set(j, "status", cJSON_Parse("{\"phase\":\"Running\",\"attempt\":0}"));
    snprintf(path, sizeof path, JOBS "/%s", name);
    assert_int_equal(fakeapi_put(api, path, j), 0);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s-worker-0", name);
    make_pod(api, path, name, "worker", NULL, port);
}

/* Worker 0 NAME of job JOB, attempt 0, Running on 127.0.0.1 with the annotations
 * `annots` (JSON members after kubetrain.dev/attempt). */
static void make_worker0(FakeApi *api, const char *name, const char *job, const char *annots)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\","
             "\"labels\":{\"kubetrain.dev/job-name\":\"%s\",\"kubetrain.dev/role\":\"worker\","
             "\"kubetrain.dev/replica-index\":\"0\"},"
             "\"annotations\":{\"kubetrain.dev/attempt\":\"0\"%s}},"
             "\"status\":{\"phase\":\"Running\",\"podIP\":\"127.0.0.1\"}}",
             name, job, annots);
    cJSON_Delete(fakeapi_create(api, PODS, buf));
}

/* Whether the informer's copy of job `name` is in phase `phase`. */
static int job_phase_cached(Informer *jobs, const char *name, const char *phase)
{
    cJSON *j = informer_get(jobs, "default", name);
    const char *ph = jsonx_str(j, "status.phase");
    int is = ph && strcmp(ph, phase) == 0;
    cJSON_Delete(j);
    return is;
}

static long job_step(FakeApi *api, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, JOBS "/%s", name);
    cJSON *j = fakeapi_get(api, path);
    long v = (long)jsonx_int(j, "status.progress.step", -1);
    cJSON_Delete(j);
    return v;
}

static void test_thread(void **state)
{
    (void)state;
    metrics_init();
    Chief chief = {.fd = socket(AF_INET, SOCK_STREAM, 0)};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    assert_true(chief.fd >= 0);
    assert_int_equal(bind(chief.fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(chief.fd, 16), 0);
    assert_int_equal(getsockname(chief.fd, (struct sockaddr *)&a, &alen), 0);
    chief.port = ntohs(a.sin_port);
    pthread_mutex_init(&chief.mu, NULL);
    snprintf(chief.text, sizeof chief.text, "%s", METRICS);
    assert_int_equal(pthread_create(&chief.thread, NULL, chief_main, &chief), 0);

    FakeApi *api = fakeapi_start();
    assert_non_null(api);
    char server[64], err[256];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", fakeapi_port(api));
    KubeConfig kc = {.server = server};
    snprintf(kc.source, sizeof kc.source, "fakeapi");
    KubeClient *client = kclient_new(&kc, 0, 0, err, sizeof err);
    assert_non_null(client);
    make_job(api, "mnist", 0, chief.port);
    make_job(api, "user", 1, chief.port); /* a user's program: never scraped... */
    make_job(api, "tf", 2, chief.port);   /* ...unless its job declares the metrics port */
    /* A job with a chief role: its chief is lead-chief-0, and worker 0 (which names no
     * port anything listens on) is not scraped. A pod named like a job's chief but
     * labelled with another job is not taken for it. */
    make_job(api, "lead", 0, 1);
    assert_int_equal(fakeapi_delete(api, PODS "/lead-worker-0"), 0);
    make_pod(api, "lead-worker-0", "lead", "worker", "chief=lead-chief-0:2222", 1);
    make_pod(api, "lead-chief-0", "lead", "chief", NULL, chief.port);
    make_job(api, "other", 0, 1);
    assert_int_equal(fakeapi_delete(api, PODS "/other-worker-0"), 0);
    make_pod(api, "other-worker-0", "lead", "worker", NULL, chief.port);
    /* A port annotation that smuggles in a path (issue 41, item 2): never scraped. */
    char annots[256];
    make_job(api, "ssrf", 0, 1);
    assert_int_equal(fakeapi_delete(api, PODS "/ssrf-worker-0"), 0);
    snprintf(annots, sizeof annots, ",\"kubetrain.dev/metrics-port\":\"%d/x?\"", chief.port);
    make_worker0(api, "ssrf-worker-0", "ssrf", annots);
    /* A chief replaced live in a Kueue group (item 7): its new object is kq-worker-0-r1
     * (replacement 1, as status.replacedPods says), the old one failed and still there. */
    make_job(api, "kq", 0, 1);
    cJSON *kq = fakeapi_get(api, JOBS "/kq");
    jsonx_set(jsonx_ensure_obj(kq, "status"), "replacedPods",
              cJSON_Parse("[{\"name\":\"kq-worker-0\",\"replacement\":1,\"launched\":true}]"));
    assert_int_equal(fakeapi_put(api, JOBS "/kq", kq), 0);
    cJSON_Delete(kq);
    snprintf(annots, sizeof annots,
             ",\"kubetrain.dev/metrics-port\":\"%d\",\"kubetrain.dev/replacement\":\"1\"",
             chief.port);
    make_worker0(api, "kq-worker-0-r1", "kq", annots);
    /* An elastic job that left worker 0 out (status.members 1,2): its worker 0, still
     * Pending in the cluster, here names a port nothing listens on; worker 1, the lowest
     * member and its trainers' rank 0, serves /metrics. */
    make_job(api, "el", 0, 1);
    cJSON *el = fakeapi_get(api, JOBS "/el");
    assert_non_null(jsonx_set_str(jsonx_ensure_obj(el, "status"), "members", "1,2"));
    assert_int_equal(fakeapi_put(api, JOBS "/el", el), 0);
    cJSON_Delete(el);
    make_pod_at(api, "el-worker-1", "el", "worker", 1, NULL, chief.port);

    /* The jobs informer as the operator sets it up: the progress paths kept apart. */
    InformerOptions jo = {.group_version = "kubetrain.dev/v1alpha1",
                          .plural = "trainingjobs",
                          .watch_timeout_s = 5,
                          .quiet_paths = progress_quiet_paths};
    InformerOptions po = {.group_version = "v1", .plural = "pods", .watch_timeout_s = 5};
    Informer *jobs = informer_new(client, &jo), *pods = informer_new(client, &po);
    assert_int_equal(informer_start(jobs), 0);
    assert_int_equal(informer_start(pods), 0);
    WAIT_FOR(5, "the informers' first lists", informer_synced(jobs) && informer_synced(pods));

    ProgressConfig cfg = {.interval_s = 0.5, .write_qps = 10, .timeout_s = 2};
    Progress *p = progress_new(client, jobs, pods, &cfg, err, sizeof err);
    assert_non_null(p);
    assert_int_equal(progress_start(p), 0);

    /* The first scrape: status.progress and status.checkpoint in one merge patch. */
    WAIT_FOR(10, "status.progress.step 105", job_step(api, "mnist") == 105);
    WAIT_FOR(10, "lead's status.progress.step 105, from lead-chief-0",
             job_step(api, "lead") == 105);
    WAIT_FOR(10, "kq's status.progress.step 105, from kq-worker-0-r1", job_step(api, "kq") == 105);
    WAIT_FOR(10, "tf's status.progress.step 105", job_step(api, "tf") == 105);
    WAIT_FOR(10, "el's status.progress.step 105, from el-worker-1", job_step(api, "el") == 105);
    cJSON *j = fakeapi_get(api, JOBS "/mnist");
    assert_int_equal(jsonx_int(j, "status.progress.totalSteps", -1), 210);
    assert_string_equal(jsonx_str(j, "status.progress.percent"), "50%");
    assert_int_equal(jsonx_int(j, "status.checkpoint.step", -1), 100);
    assert_string_equal(jsonx_str(j, "status.phase"), "Running"); /* merged, not replaced */
    cJSON_Delete(j);
    unsigned long patches = fakeapi_requests(api, "PATCH");
    assert_int_equal(patches, 5); /* mnist's, lead's, kq's, tf's and el's */

    /* Same numbers: scraped again, nothing written. */
    int served = chief_served(&chief);
    WAIT_FOR(10, "two more scrapes", chief_served(&chief) >= served + 2);
    assert_int_equal(fakeapi_requests(api, "PATCH"), patches);

    /* The chief moves on: the next scrape writes the new step. */
    pthread_mutex_lock(&chief.mu);
    snprintf(chief.text, sizeof chief.text,
             "kubetrain_steps_total 140\nkubetrain_total_steps 210\n"
             "kubetrain_epoch 2\nkubetrain_start_step 70\n");
    pthread_mutex_unlock(&chief.mu);
    WAIT_FOR(10, "status.progress.step 140", job_step(api, "mnist") == 140);
    WAIT_FOR(10, "lead's status.progress.step 140", job_step(api, "lead") == 140);
    WAIT_FOR(10, "kq's status.progress.step 140", job_step(api, "kq") == 140);
    WAIT_FOR(10, "tf's status.progress.step 140", job_step(api, "tf") == 140);
    WAIT_FOR(10, "el's status.progress.step 140", job_step(api, "el") == 140);
    assert_int_equal(fakeapi_requests(api, "PATCH"), patches + 5);
    assert_int_equal(job_step(api, "user"), -1);
    assert_int_equal(job_step(api, "other"), -1);
    assert_int_equal(job_step(api, "ssrf"), -1);

    /* The job finishes: the survey, which reads a job again only when its cached version
     * changed, sees the new phase and the scrapes stop. */
    for (int i = 0; i < 5; i++) {
        const char *name = i == 4 ? "el" : i == 3 ? "tf" : i == 2 ? "kq" : i ? "lead" : "mnist";
        char path[256];
        snprintf(path, sizeof path, JOBS "/%s", name);
        j = fakeapi_get(api, path);
        assert_non_null(jsonx_set_str(jsonx_ensure_obj(j, "status"), "phase", "Succeeded"));
        assert_int_equal(fakeapi_put(api, path, j), 0);
        cJSON_Delete(j);
        WAIT_FOR(5, "the cache to see Succeeded", job_phase_cached(jobs, name, "Succeeded"));
    }
    nap(scaled(1.5)); /* a tick surveyed before the change may still scrape */
    served = chief_served(&chief);
    nap(scaled(2.5)); /* two ticks, five intervals */
    if (chief_served(&chief) != served)
        fail_msg("%d scrapes of a Succeeded job", chief_served(&chief) - served);

    progress_stop(p);
    progress_free(p);
    informer_stop(jobs);
    informer_stop(pods);
    informer_free(jobs);
    informer_free(pods);
    kclient_free(client);
    fakeapi_stop(api);
    __atomic_store_n(&chief.stop, 1, __ATOMIC_RELEASE);
    pthread_join(chief.thread, NULL);
    close(chief.fd);
    pthread_mutex_destroy(&chief.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_interval),
        cmocka_unit_test(test_phase),
        cmocka_unit_test(test_patch_first),
        cmocka_unit_test(test_patch_eta_and_unchanged),
        cmocka_unit_test(test_patch_eta_same_size),
        cmocka_unit_test(test_patch_steps_lost),
        cmocka_unit_test(test_patch_steps_lost_tf),
        cmocka_unit_test(test_patch_checkpoint_forward),
        cmocka_unit_test(test_scraped_worker),
        cmocka_unit_test(test_job_scrapable),
        cmocka_unit_test(test_chief_final_step),
        cmocka_unit_test(test_patch_hostile_numbers),
        cmocka_unit_test(test_chief_url),
        cmocka_unit_test(test_thread),
    };
    return cmocka_run_group_tests_name("progress", tests, NULL, NULL);
}
