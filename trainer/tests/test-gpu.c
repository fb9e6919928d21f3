/* The GPU path against the CPU path (make GPU=1 builds, on a machine with a CUDA
 * device): every layer's forward output and every gradient slice of small models that
 * use each layer, activation and loss; the step's CUDA graphs; each optimizer's update;
 * evaluation; a short training run whose losses follow the CPU run; a one-rank NCCL
 * all-reduce; and two ranks (two devices) where one dies mid-run and the other's
 * all-reduce fails within seconds instead of hanging. "Equal" means max|gpu - cpu| <=
 * 1e-4 * max|cpu| per array (cuDNN and cuBLAS sum in other orders than OpenBLAS).
 *
 * Without a device every test says skipped; a build without CUDA has the one test
 * that says so. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "assert_close.h"
#include "collective.h"
#include "model.h"
#include "optim.h"
#include "util.h"

#ifdef KT_GPU
#include <cuda_runtime_api.h>

#include "gpu/coll_nccl.h"
#include "gpu/gpu.h"

#define REL_TOL 1e-4

/* Skips the calling test unless a device is there. */
static void need_devices(int n)
{
    char why[256] = "";
    int have = gpu_device_count(why, sizeof why);
    if (have < n) {
        print_message("# skipped: %d CUDA device(s) needed, %d here%s%s\n", n, have,
                      why[0] ? ": " : "", why);
        skip();
    }
}

/* max|a-b| / max|b| over n floats (0 when both are all zero); *at (if not NULL): the
 * index of the largest |a-b|. */
static double rel_diff(const float *a, const float *b, size_t n, size_t *at)
{
    double d = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double di = fabs((double)a[i] - b[i]);
        if (at && (i == 0 || di > d)) *at = i;
        d = fmax(d, di);
        s = fmax(s, fabs((double)b[i]));
    }
    return s > 0.0 ? d / s : d;
}

static void check_close(const char *what, const float *gpu, const float *cpu, size_t n)
{
    size_t at = 0;
    double r = rel_diff(gpu, cpu, n, &at);
    if (r > REL_TOL)
        print_message("# %s: relative difference %.3g over %zu floats, the largest at [%zu]: "
                      "gpu %.9g, cpu %.9g\n",
                      what, r, n, at, (double)gpu[at], (double)cpu[at]);
    assert_true(r <= REL_TOL);
}

static void fill_batch(float *x, int32_t *y, size_t pixels, int b, int classes, uint64_t seed)
{
    for (size_t i = 0; i < (size_t)b * pixels; i++) x[i] = util_rand_float(&seed);
    for (int i = 0; i < b; i++) y[i] = (int32_t)util_rand_below(&seed, (uint64_t)classes);
}

/* One forward/backward of spec on CPU and GPU from the same weights and batch. */
static void compare_step(const char *spec)
{
    enum { B = 8 };
    char err[512];
    Model *m;
    assert_int_equal(model_create_from_text(&m, spec, "test spec", 5, err, sizeof err), 0);
    print_message("# %s\n", m->signature);
    const size_t np = m->num_params, pixels = m->input_size;
    float *x = xmalloc(B * pixels * sizeof *x);
    int32_t y[B];
    fill_batch(x, y, pixels, B, (int)m->num_classes, 42);
    model_reserve(m, B);
    StepStats st;
    const uint64_t dseed = 0x1234;
    model_step(m, x, y, B, 2 * B, 2, dseed, NULL, NULL, &st);

    OptimizerConfig oc = optim_defaults(OPT_SGD, 0.01f);
    GpuModel *g;
    assert_int_equal(gpu_model_create(&g, m, &oc, 0, B, err, sizeof err), 0);
    assert_int_equal(gpu_model_upload(g, m->params, NULL, err, sizeof err), 0);
    assert_int_equal(gpu_model_load_batch(g, x, y, B, err, sizeof err), 0);
    if (gpu_model_step(g, 2 * B, 2, dseed, 0.0f, err, sizeof err)) fail_msg("%s", err);

    for (int i = 0; i < m->num_layers; i++) {
        if (!m->acts[i]) continue;
        size_t n = (size_t)B * m->layers[i].out_size;
        float *a = xmalloc(n * sizeof *a);
        assert_int_equal(gpu_model_read_activation(g, i, a, err, sizeof err), 0);
        char what[64];
        snprintf(what, sizeof what, "layers[%d] forward", i);
        check_close(what, a, m->acts[i], n);
        free(a);
    }
    float *gr = xmalloc((np + MODEL_STATS_FLOATS) * sizeof *gr);
    assert_int_equal(gpu_model_grads_to_host(g, gr, np + MODEL_STATS_FLOATS, err, sizeof err), 0);
    for (int i = 0; i < m->num_layers; i++) {
        const Layer *l = &m->layers[i];
        if (!l->w_count) continue;
        char what[64];
        snprintf(what, sizeof what, "layers[%d] kernel gradient", i);
        check_close(what, gr + l->w_off, m->grads + l->w_off, l->w_count);
        snprintf(what, sizeof what, "layers[%d] bias gradient", i);
        check_close(what, gr + l->b_off, m->grads + l->b_off, l->b_count);
    }
    float want_loss = (float)st.loss;
    check_close("loss share", gr + np + STAT_LOSS, &want_loss, 1);
    assert_close(gr[np + STAT_CORRECT], (float)st.correct, 0);
    assert_close(gr[np + STAT_COUNT], (float)B, 0);

    /* evaluation (dropout off) on the same batch */
    StepStats ce, ge;
    model_evaluate(m, x, y, B, &ce);
    assert_int_equal(gpu_model_load_batch(g, x, y, B, err, sizeof err), 0);
    assert_int_equal(gpu_model_evaluate(g, &ge, err, sizeof err), 0);
    float a = (float)ge.loss, b = (float)ce.loss;
    check_close("evaluation loss", &a, &b, 1);
    assert_close(ge.correct, ce.correct, 0);
    assert_close(ge.count, ce.count, 0);

    free(gr);
    gpu_model_free(g);
    free(x);
    model_free(m);
}

static void test_conv_valid_dense(void **s)
{
    (void)s;
    need_devices(1);
    compare_step(
        "{\"input_shape\":[10,10],\"layers\":[{\"type\":\"Reshape\",\"target_shape\":[10,10,1]},"
        "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":3,\"activation\":\"relu\"},"
        "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":16,\"activation\":\"relu\"},"
        "{\"type\":\"Dense\",\"units\":5}]}");
}

static void test_conv_same_strided_odd_padding(void **s)
{
    (void)s;
    need_devices(1);
    /* 8x8, kernel 3, stride 2, SAME: one row/column of padding, at the end (explicit pad) */
    compare_step("{\"input_shape\":[8,8,2],\"layers\":["
                 "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"strides\":2,"
                 "\"padding\":\"same\",\"activation\":\"relu\"},"
                 "{\"type\":\"Conv2D\",\"filters\":5,\"kernel_size\":[3,2],\"strides\":[1,2],"
                 "\"padding\":\"same\"},"
                 "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":4}]}");
}

static void test_conv_maxpool_softmax(void **s)
{
    (void)s;
    need_devices(1);
    compare_step("{\"input_shape\":[12,12,1],\"layers\":["
                 "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":3,\"activation\":\"relu\"},"
                 "{\"type\":\"Conv2D\",\"filters\":6,\"kernel_size\":3,\"activation\":\"relu\"},"
                 "{\"type\":\"MaxPooling2D\",\"pool_size\":2},{\"type\":\"Flatten\"},"
                 "{\"type\":\"Dense\",\"units\":8,\"activation\":\"relu\"},"
                 "{\"type\":\"Dense\",\"units\":10,\"activation\":\"softmax\"}]}");
}

static void test_same_pool_rank3_dense(void **s)
{
    (void)s;
    need_devices(1);
    /* a non-square "same" MaxPooling2D with unequal strides; Dense layers on a rank-3
     * input (the last axis), one of them a softmax over each row */
    compare_step("{\"input_shape\":[9,8,2],\"layers\":["
                 "{\"type\":\"MaxPooling2D\",\"pool_size\":[3,2],\"strides\":[2,1],"
                 "\"padding\":\"same\"},"
                 "{\"type\":\"Dense\",\"units\":4,\"activation\":\"relu\"},"
                 "{\"type\":\"Dense\",\"units\":3,\"activation\":\"softmax\"},"
                 "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":5}]}");
}

static void test_dropout_l2_softmax_middle_relu_last(void **s)
{
    (void)s;
    need_devices(1);
    /* dropout with the CPU's masks; L2; a softmax in the middle; a relu output layer,
     * whose loss is taken from probabilities (loss_sce_probs) */
    compare_step("{\"input_shape\":[6,6],\"layers\":[{\"type\":\"Flatten\"},"
                 "{\"type\":\"Dense\",\"units\":32,\"activation\":\"relu\","
                 "\"kernel_regularizer\":{\"l2\":0.01}},"
                 "{\"type\":\"Dropout\",\"rate\":0.3},"
                 "{\"type\":\"Dense\",\"units\":12,\"activation\":\"softmax\"},"
                 "{\"type\":\"Dense\",\"units\":6,\"activation\":\"relu\","
                 "\"kernel_regularizer\":{\"l2\":0.001}}]}");
}

/* Steps with CUDA graphs (on) and without (off) against the CPU from the same weights:
 * each step a new batch, a new dropout seed and, from step 5, the stop flag, one
 * partial batch (a new graph key) and an evaluation of another size between steps (it
 * re-plans cuDNN for that size). A graph that kept a captured seed, batch or flag would
 * drift from the CPU here; the graphs must have been replayed when on and never when
 * off. */
static void graphs_follow_cpu(int on)
{
    enum { B = 8, STEPS = 9 };
    char err[512];
    Model *m;
    assert_int_equal(model_create_from_text(
                         &m,
                         "{\"input_shape\":[9,9,1],\"layers\":["
                         "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":3,\"strides\":2,"
                         "\"padding\":\"same\",\"activation\":\"relu\"},"
                         "{\"type\":\"MaxPooling2D\",\"pool_size\":2},{\"type\":\"Flatten\"},"
                         "{\"type\":\"Dense\",\"units\":16,\"activation\":\"relu\","
                         "\"kernel_regularizer\":{\"l2\":0.01}},"
                         "{\"type\":\"Dropout\",\"rate\":0.4},{\"type\":\"Dense\",\"units\":5}]}",
                         "graphs spec", 7, err, sizeof err),
                     0);
    const size_t np = m->num_params, pixels = m->input_size;
    model_reserve(m, B);
    OptimizerConfig oc = optim_defaults(OPT_SGD, 0.01f);
    GpuModel *g;
    assert_int_equal(gpu_model_create(&g, m, &oc, 0, B, err, sizeof err), 0);
    gpu_model_use_graphs(g, on);
    assert_int_equal(gpu_model_upload(g, m->params, NULL, err, sizeof err), 0);
    float *x = xmalloc(B * pixels * sizeof *x);
    float *gr = xmalloc((np + MODEL_STATS_FLOATS) * sizeof *gr);
    int32_t y[B];
    for (int step = 0; step < STEPS; step++) {
        const int b = step == 5 ? 5 : B;
        const float stop = step >= 4 ? 1.0f : 0.0f;
        const uint64_t dseed = 0xD00D + 31 * (uint64_t)step;
        fill_batch(x, y, pixels, b, 5, 500 + (uint64_t)step);
        StepStats st;
        model_step(m, x, y, b, 2 * B, 2, dseed, NULL, NULL, &st);
        assert_int_equal(gpu_model_load_batch(g, x, y, b, err, sizeof err), 0);
        if (gpu_model_step(g, 2 * B, 2, dseed, stop, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(gpu_model_grads_to_host(g, gr, np + MODEL_STATS_FLOATS, err, sizeof err),
                         0);
        char what[64];
        snprintf(what, sizeof what, "graphs %s, step %d: gradients", on ? "on" : "off", step + 1);
        check_close(what, gr, m->grads, np);
        float want_loss = (float)st.loss;
        check_close("loss share", gr + np + STAT_LOSS, &want_loss, 1);
        assert_close(gr[np + STAT_COUNT], (float)b, 0);
        assert_close(gr[np + STAT_STOP], stop, 0);
        if (step == 6) { /* an evaluation of 3 examples between two steps */
            StepStats ge;
            assert_int_equal(gpu_model_load_batch(g, x, y, 3, err, sizeof err), 0);
            assert_int_equal(gpu_model_evaluate(g, &ge, err, sizeof err), 0);
            assert_close(ge.count, 3, 0);
        }
    }
    long replays = gpu_model_graph_launches(g);
    print_message("# graphs %s: %ld of %d steps replayed a graph\n", on ? "on" : "off", replays,
                  STEPS);
    if (on) assert_true(replays >= 3);
    else assert_true(replays == 0);
    free(gr);
    free(x);
    gpu_model_free(g);
    model_free(m);
}

static void test_graphs_follow_cpu(void **s)
{
    (void)s;
    need_devices(1);
    graphs_follow_cpu(1);
    graphs_follow_cpu(0);
}

static void test_optimizers(void **s)
{
    (void)s;
    need_devices(1);
    struct {
        OptimizerKind kind;
        float mom;
        int nesterov;
    } cases[] = {
        {OPT_SGD, 0.0f, 0},          {OPT_SGD, 0.9f, 0},     {OPT_SGD, 0.9f, 1},
        {OPT_RMSPROP, 0.0f, 0},      {OPT_RMSPROP, 0.5f, 0}, {OPT_ADAM, 0.0f, 0},
        {OPT_ADAM_AMSGRAD, 0.0f, 0},
    };
    char err[512];
    Model *m;
    assert_int_equal(model_create(&m, "mlp", 3, err, sizeof err), 0);
    const size_t np = m->num_params;
    float *grads = xmalloc((np + MODEL_STATS_FLOATS) * sizeof *grads);
    float *params = xmalloc(np * sizeof *params);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        OptimizerConfig oc = optim_defaults(cases[c].kind, 0.01f);
        oc.momentum = cases[c].mom;
        oc.nesterov = cases[c].nesterov;
        Optimizer *cpu = optim_create(&oc, np), *dev = optim_create(&oc, np);
        float *state = xcalloc(cpu->state_floats + 1, sizeof *state);
        GpuModel *g;
        model_init_params(m, 3);
        memcpy(params, m->params, np * sizeof *params);
        assert_int_equal(gpu_model_create(&g, m, &oc, 0, 1, err, sizeof err), 0);
        assert_int_equal(gpu_model_upload(g, m->params, cpu->state, err, sizeof err), 0);
        uint64_t seed = 99 + c;
        for (int step = 0; step < 3; step++) {
            for (size_t i = 0; i < np; i++) grads[i] = util_rand_float(&seed) - 0.5f;
            optim_step(cpu, params, grads);
            assert_int_equal(gpu_model_grads_from_host(g, grads, np, err, sizeof err), 0);
            assert_int_equal(gpu_model_optim_step(g, dev, err, sizeof err), 0);
        }
        assert_int_equal(gpu_model_download(g, m->params, state, err, sizeof err), 0);
        print_message("# %s momentum %g%s\n", optim_kind_name(oc.kind), (double)oc.momentum,
                      oc.nesterov ? " nesterov" : "");
        check_close("parameters", m->params, params, np);
        if (cpu->state_floats) check_close("optimizer state", state, cpu->state, cpu->state_floats);
        assert_int_equal(dev->iterations, cpu->iterations);
        gpu_model_free(g);
        free(state);
        optim_free(cpu);
        optim_free(dev);
    }
    free(params);
    free(grads);
    model_free(m);
}

/* tutorial-cnn with Adam for 15 steps on synthetic batches, CPU and GPU from the same
 * start: the GPU's losses follow the CPU's (1e-3 relative: the differences of the
 * summation orders grow over the steps). */
static void test_training_follows_cpu(void **s)
{
    (void)s;
    need_devices(1);
    enum { B = 32, STEPS = 15 };
    char err[512];
    Model *m;
    assert_int_equal(model_create(&m, "tutorial-cnn", 11, err, sizeof err), 0);
    const size_t np = m->num_params, pixels = m->input_size;
    model_reserve(m, B);
    OptimizerConfig oc = optim_defaults(OPT_ADAM, 0.001f);
    Optimizer *cpu = optim_create(&oc, np), *dev = optim_create(&oc, np);
    GpuModel *g;
    assert_int_equal(gpu_model_create(&g, m, &oc, 0, B, err, sizeof err), 0);
    assert_int_equal(gpu_model_upload(g, m->params, cpu->state, err, sizeof err), 0);
    float *x = xmalloc(B * pixels * sizeof *x);
    int32_t y[B];
    float stats[MODEL_STATS_FLOATS];
    double first = 0.0, last = 0.0;
    for (int step = 0; step < STEPS; step++) {
        fill_batch(x, y, pixels, B, 10, 1000 + (uint64_t)(step % 3)); /* 3 batches, repeated */
        StepStats st;
        model_step(m, x, y, B, B, 1, (uint64_t)step, NULL, NULL, &st);
        optim_step(cpu, m->params, m->grads);
        assert_int_equal(gpu_model_load_batch(g, x, y, B, err, sizeof err), 0);
        /* as the trainer does it: the statistics copied and the update queued, one wait */
        assert_int_equal(gpu_model_step(g, B, 1, (uint64_t)step, 0.0f, err, sizeof err), 0);
        void *copied;
        assert_int_equal(gpu_model_finish_step(g, dev, &copied, err, sizeof err), 0);
        assert_int_equal(gpu_model_sync_event(copied, err, sizeof err), 0);
        gpu_model_copied_stats(g, stats);
        double rel = fabs(stats[STAT_LOSS] - st.loss) / fabs(st.loss);
        print_message("# step %d: cpu loss %.6f, gpu loss %.6f (rel %.2g)\n", step + 1, st.loss,
                      (double)stats[STAT_LOSS], rel);
        assert_true(rel <= 1e-3);
        if (step == 0) first = st.loss;
        last = st.loss;
    }
    assert_true(last < first); /* it trained */
    float *p = xmalloc(np * sizeof *p);
    assert_int_equal(gpu_model_download(g, p, NULL, err, sizeof err), 0);
    /* Adam moves a weight by about lr whatever its gradient's size, so a weight whose
     * gradient sums to nearly zero (the summation orders then disagree on its sign) may
     * move apart by a few lr over the steps: the whole vector is compared, in norm */
    double dd = 0.0, pp = 0.0;
    for (size_t i = 0; i < np; i++) {
        dd += ((double)p[i] - m->params[i]) * ((double)p[i] - m->params[i]);
        pp += (double)m->params[i] * m->params[i];
    }
    const double r = sqrt(dd / pp);
    print_message("# parameters after %d steps: relative difference %.3g in norm, %.3g largest\n",
                  STEPS, r, rel_diff(p, m->params, np, NULL));
    assert_true(r <= 1e-3);
    free(p);
    free(x);
    gpu_model_free(g);
    optim_free(cpu);
    optim_free(dev);
    model_free(m);
}

static void test_nccl_one_rank(void **s)
{
    (void)s;
    need_devices(1);
    char err[512];
    Collective *c = coll_nccl_create(coll_local_create(), 0, 20.0, err, sizeof err);
    if (!c) fail_msg("%s", err);
    assert_string_equal(c->name, "nccl");
    assert_int_equal(c->world, 1);
    assert_int_equal(c->device_buffers, 1);
    enum { N = 100003 };
    float *h = xmalloc(N * sizeof *h), *back = xmalloc(N * sizeof *back);
    for (size_t i = 0; i < N; i++) h[i] = (float)i * 0.5f - 7.0f;
    float *d;
    assert_int_equal(cudaMalloc((void **)&d, N * sizeof *d), cudaSuccess);
    assert_int_equal(cudaMemcpy(d, h, N * sizeof *d, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(coll_allreduce_sum(c, d, N, err, sizeof err), 0); /* device buffer */
    assert_int_equal(cudaMemcpy(back, d, N * sizeof *d, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, h, N * sizeof *h);
    memcpy(back, h, N * sizeof *h);
    assert_int_equal(coll_allreduce_sum(c, back, N, err, sizeof err), 0); /* host, staged */
    assert_memory_equal(back, h, N * sizeof *h);
    /* started after an event, in two slices, then waited for (the trainer's overlap) */
    cudaEvent_t ev;
    assert_int_equal(cudaEventCreate(&ev), cudaSuccess);
    assert_int_equal(cudaMemcpy(d, h, N * sizeof *d, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaEventRecord(ev, 0), cudaSuccess);
    assert_int_equal(coll_nccl_allreduce_start(c, d + 1000, N - 1000, ev, err, sizeof err), 0);
    assert_int_equal(coll_nccl_allreduce_start(c, d, 1000, NULL, err, sizeof err), 0);
    void *slices;
    assert_int_equal(coll_nccl_allreduce_event(c, &slices, err, sizeof err), 0);
    assert_int_equal(coll_nccl_wait_event(c, slices, ev, err, sizeof err), 0);
    assert_int_equal(cudaMemcpy(back, d, N * sizeof *d, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, h, N * sizeof *h);
    /* the trainer's join: another stream waits for the all-reduce's event and copies
     * the sum to pinned memory; the host waits, watched, for that stream's event */
    cudaStream_t other;
    cudaEvent_t copied;
    void *reduced;
    float *hp;
    assert_int_equal(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaEventCreate(&copied), cudaSuccess);
    assert_int_equal(cudaMallocHost((void **)&hp, N * sizeof *hp), cudaSuccess);
    assert_int_equal(coll_nccl_allreduce_start(c, d, N, NULL, err, sizeof err), 0);
    assert_int_equal(coll_nccl_allreduce_event(c, &reduced, err, sizeof err), 0);
    assert_int_equal(cudaStreamWaitEvent(other, (cudaEvent_t)reduced, 0), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(hp, d, N * sizeof *d, cudaMemcpyDeviceToHost, other),
                     cudaSuccess);
    assert_int_equal(cudaEventRecord(copied, other), cudaSuccess);
    assert_int_equal(coll_nccl_wait_event(c, copied, NULL, err, sizeof err), 0);
    assert_memory_equal(hp, h, N * sizeof *h);
    cudaFreeHost(hp);
    cudaEventDestroy(copied);
    cudaStreamDestroy(other);
    cudaEventDestroy(ev);
    cudaFree(d);
    free(h);
    free(back);
    coll_destroy(c);
}

/* ---- two ranks, one killed: each rank is this program re-executed (a forked child
 * cannot use CUDA once the parent has initialised it), bootstrapped over a pipe that
 * carries the NCCL id. */

typedef struct {
    Collective base;
    int fd; /* rank 0 writes, rank 1 reads */
} PipeBoot;

static int pipe_broadcast(Collective *c, void *buf, size_t n, int root, char *err, size_t errlen)
{
    PipeBoot *p = (PipeBoot *)c;
    ssize_t k = root != 0 ? -1 : c->rank == 0 ? write(p->fd, buf, n) : read(p->fd, buf, n);
    if (k != (ssize_t)n) {
        snprintf(err, errlen, "pipe bootstrap: %zd of %zu bytes", k, n);
        return -EIO;
    }
    return 0;
}
static int pipe_allreduce(Collective *c, float *buf, size_t n, char *err, size_t errlen)
{
    (void)c, (void)buf, (void)n;
    snprintf(err, errlen, "pipe bootstrap: no all-reduce");
    return -ENOSYS;
}
static int pipe_barrier(Collective *c, char *err, size_t errlen)
{
    (void)c;
    snprintf(err, errlen, "pipe bootstrap: no barrier");
    return -ENOSYS;
}
static void pipe_destroy(Collective *c)
{
    close(((PipeBoot *)c)->fd);
    free(c);
}

/* The body of one rank: two all-reduces; rank 1 then dies, and rank 0's third must
 * fail: it exits 75 as the trainer would, 1 on a wrong sum, 0 if nothing failed. */
static int peer_main(int rank, int fd)
{
    PipeBoot *p = xcalloc(1, sizeof *p);
    p->base = (Collective){.rank = rank,
                           .world = 2,
                           .name = "pipe",
                           .allreduce_sum = pipe_allreduce,
                           .broadcast = pipe_broadcast,
                           .barrier = pipe_barrier,
                           .destroy = pipe_destroy};
    p->fd = fd;
    char err[512];
    Collective *c = coll_nccl_create(&p->base, rank, 10.0, err, sizeof err);
    if (!c) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 2;
    }
    enum { N = 1 << 20 };
    float *h = xmalloc(N * sizeof *h);
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < N; i++) h[i] = (float)(rank + 1);
        int bad = 0;
        if (coll_allreduce_sum(c, h, N, err, sizeof err)) {
            fprintf(stderr, "rank %d round %d: %s\n", rank, round, err);
            bad = 2;
        }
        for (size_t i = 0; !bad && i < N; i++)
            if (h[i] != 3.0f) bad = 1;
        if (bad) {
            free(h);
            coll_destroy(c);
            return bad;
        }
    }
    if (rank == 1) _exit(0); /* gone, without a word to the communicator */
    double t0 = util_now();
    int rc = coll_allreduce_sum(c, h, N, err, sizeof err);
    fprintf(stderr, "rank 0 after the peer died: rc %d in %.1fs: %s\n", rc, util_now() - t0,
            rc ? err : "(no error)");
    free(h);
    coll_destroy(c);
    return rc ? KT_EXIT_RETRY : 0;
}

static const char *self_path;

static void test_nccl_peer_lost(void **s)
{
    (void)s;
    need_devices(2);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        assert_true(pid[r] >= 0);
        if (pid[r] == 0) {
            char role[32], fd[16];
            snprintf(role, sizeof role, "%d", r);
            snprintf(fd, sizeof fd, "%d", fds[r == 0 ? 1 : 0]);
            close(fds[r == 0 ? 0 : 1]);
            setenv("KT_TEST_GPU_PEER", role, 1);
            setenv("KT_TEST_GPU_FD", fd, 1);
            execl(self_path, self_path, (char *)NULL);
            _exit(127);
        }
    }
    close(fds[0]);
    close(fds[1]);
    /* rank 0 must be done within 10 s (its NCCL timeout) plus start-up; never a hang */
    int status[2] = {-1, -1};
    double t0 = util_now();
    while ((status[0] == -1 || status[1] == -1) && util_now() - t0 < 90.0) {
        for (int r = 0; r < 2; r++)
            if (status[r] == -1 && waitpid(pid[r], &status[r], WNOHANG) == 0) status[r] = -1;
        usleep(100 * 1000);
    }
    for (int r = 0; r < 2; r++)
        if (status[r] == -1) {
            kill(pid[r], SIGKILL);
            waitpid(pid[r], NULL, 0);
            fail_msg("rank %d still running after 90 s: a hang", r);
        }
    assert_true(WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 0);
    assert_true(WIFEXITED(status[0]));
    assert_int_equal(WEXITSTATUS(status[0]), KT_EXIT_RETRY);
}

#else /* no CUDA in this build */

/* One skip stands for all: the GPU build's own test-gpu (run by test-gpu-build.sh)
 * reports each test. */
static void test_gpu_build_only(void **s)
{
    (void)s;
    print_message("# skipped: this build has no CUDA; trainer/tests/test-gpu-build.sh builds "
                  "and runs the GPU build's test-gpu\n");
    skip();
}
#endif

int main(int argc, char **argv)
{
    (void)argc;
#ifdef KT_GPU
    const char *role = getenv("KT_TEST_GPU_PEER"), *fd = getenv("KT_TEST_GPU_FD");
    if (role && fd) return peer_main(atoi(role), atoi(fd));
    self_path = argv[0];
#else
    (void)argv;
#endif
    const struct CMUnitTest tests[] = {
#ifdef KT_GPU
        cmocka_unit_test(test_nccl_peer_lost),
        cmocka_unit_test(test_conv_valid_dense),
        cmocka_unit_test(test_conv_same_strided_odd_padding),
        cmocka_unit_test(test_conv_maxpool_softmax),
        cmocka_unit_test(test_same_pool_rank3_dense),
        cmocka_unit_test(test_dropout_l2_softmax_middle_relu_last),
        cmocka_unit_test(test_graphs_follow_cpu),
        cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_training_follows_cpu),
        cmocka_unit_test(test_nccl_one_rank),
#else
        cmocka_unit_test(test_gpu_build_only),
#endif
    };
#ifdef KT_CUDA_EMUL
    return cmocka_run_group_tests_name("gpu path on the CPU emulation of CUDA (not a GPU)", tests,
                                       NULL, NULL);
#else
    return cmocka_run_group_tests_name("gpu", tests, NULL, NULL);
#endif
}
