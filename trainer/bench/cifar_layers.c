/* cifar_layers — a per-layer profile of the CIFAR-shaped model's training step (issue 44,
 * trainer/bench/cifar_keras.py): each of its layers' forward and backward, the same
 * layers.c calls on the same shapes that model.c makes, run the way the trainer runs them:
 * Conv2D and MaxPooling2D cut into gemm_batch_shards() shards of examples, one
 * parallel_for task each with single-threaded products; BatchNormalization (its ReLU
 * fused, its statistics from the Conv2D's moments) on the whole batch over the pool's
 * threads. Rescaling, GlobalAveragePooling2D, Dropout, Dense and the optimizer are left
 * out (under 1 % of the step in bench-cifar's perf profile). Each pass is timed alone,
 * the median of `rounds` steps, wall and process CPU time; prints one JSON object:
 *   {"threads":2,"batch":64,"shards":2,"rounds":9,"kernels":"...","step_ms":...,
 *    "step_cpu_ms":...,"rows":[{"layer":"conv2d_1","pass":"forward","ms":...,
 *    "cpu_ms":...,"share":...},...]}
 * share: of the step's summed wall medians.
 *
 *   cifar_layers [rounds] [threads]        (9, 0: the backend's default) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm.h"
#include "layers.h"
#include "pool.h"

enum { BATCH = 64, NCONV = 5, MAX_ROUNDS = 101 };

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *must(void *p)
{
    if (!p) {
        fprintf(stderr, "cifar_layers: out of memory\n");
        exit(1);
    }
    return p;
}

static float *buf(size_t n, float scale)
{
    float *p = must(malloc(n * sizeof *p));
    for (size_t i = 0; i < n; i++)
        p[i] = ((float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f) * scale;
    return p;
}

/* One Conv2D -> BatchNormalization -> ReLU block, and the MaxPooling2D after it if any. */
typedef struct {
    const char *name;
    ConvGeom g;
    int pool;
    PoolGeom pg;
    float *in, *w, *dw, *conv, *y, *pooled, *dy, *dconv, *din, *gamma, *beta, *dgamma, *dbeta;
    float *mean, *var, *invstd, *dpooled, *scratch[GEMM_MAX_SHARDS], *sdw[GEMM_MAX_SHARDS];
    double *moments;
    int32_t *argmax;
} Block;

typedef struct {
    Block *b;
    int shards;
} Job;

static int lo(int s, int shards)
{
    return (int)((long)BATCH * s / shards);
}

static void conv_fwd_task(void *ctx, int s)
{
    const Job *j = ctx;
    Block *b = j->b;
    const int n0 = lo(s, j->shards), nb = lo(s + 1, j->shards) - n0;
    const size_t in = (size_t)b->g.h * b->g.w * b->g.c, out = (size_t)b->g.oh * b->g.ow * b->g.f;
    conv2d_forward_moments(b->conv + n0 * out, b->moments + (size_t)n0 * 2 * b->g.f, b->scratch[s],
                           b->in + n0 * in, b->w, NULL, &b->g, nb, 0);
}

static void conv_bwd_task(void *ctx, int s)
{
    const Job *j = ctx;
    Block *b = j->b;
    const int n0 = lo(s, j->shards), nb = lo(s + 1, j->shards) - n0;
    const size_t in = (size_t)b->g.h * b->g.w * b->g.c, out = (size_t)b->g.oh * b->g.ow * b->g.f;
    conv2d_backward(b->g.no_dinput ? NULL : b->din + n0 * in, s ? b->sdw[s] : b->dw, NULL,
                    b->scratch[s], b->dconv + n0 * out, b->in + n0 * in, b->w, &b->g, nb);
}

static void pool_fwd_task(void *ctx, int s)
{
    const Job *j = ctx;
    Block *b = j->b;
    const int n0 = lo(s, j->shards), nb = lo(s + 1, j->shards) - n0;
    const size_t in = (size_t)b->pg.h * b->pg.w * b->pg.c,
                 out = (size_t)b->pg.oh * b->pg.ow * b->pg.c;
    maxpool_forward(b->pooled + n0 * out, b->argmax + n0 * out, b->y + n0 * in, &b->pg, nb);
}

static void pool_bwd_task(void *ctx, int s)
{
    const Job *j = ctx;
    Block *b = j->b;
    const int n0 = lo(s, j->shards), nb = lo(s + 1, j->shards) - n0;
    const size_t in = (size_t)b->pg.h * b->pg.w * b->pg.c,
                 out = (size_t)b->pg.oh * b->pg.ow * b->pg.c;
    maxpool_backward(b->dy + n0 * in, b->dpooled + n0 * out, b->argmax + n0 * out, &b->pg, nb);
}

enum { P_CONV_F, P_BN_F, P_POOL_F, P_POOL_B, P_BN_B, P_CONV_B, NPASS };
static const char *const pass_layer[NPASS] = {
    "conv2d",        "batch_normalization+relu", "max_pooling2d",
    "max_pooling2d", "batch_normalization+relu", "conv2d"};

static void run_pass(Block *b, int pass, int shards)
{
    Job j = {.b = b, .shards = shards};
    const size_t rows = (size_t)BATCH * b->g.oh * b->g.ow;
    switch (pass) {
    case P_CONV_F: parallel_for(shards, conv_fwd_task, &j); break;
    case P_BN_F: {
        const BnMoments mom = {.v = b->moments, .examples = BATCH};
        batchnorm_forward_train_sync(b->y, b->mean, b->var, b->invstd, b->conv, b->gamma, b->beta,
                                     rows, b->g.f, 1e-3f, 1, NULL, &mom);
        break;
    }
    case P_POOL_F: parallel_for(shards, pool_fwd_task, &j); break;
    case P_POOL_B: parallel_for(shards, pool_bwd_task, &j); break;
    case P_BN_B:
        batchnorm_backward_relu_sync(b->dconv, b->dgamma, b->dbeta, b->dy, b->conv, b->mean,
                                     b->invstd, b->gamma, b->beta, rows, b->g.f, NULL);
        break;
    case P_CONV_B: parallel_for(shards, conv_bwd_task, &j); break;
    }
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi(argv[1]) : 9, threads = argc > 2 ? atoi(argv[2]) : 0;
    if (rounds < 1 || rounds > MAX_ROUNDS || threads < 0) {
        fprintf(stderr, "usage: cifar_layers [rounds 1..%d] [threads]\n", MAX_ROUNDS);
        return 2;
    }
    gemm_select_kernels(argv);
    if (threads) gemm_set_threads(threads);
    const int shards = gemm_batch_shards(BATCH);
    /* Conv2D(f, 3, same, no bias) on (h, w, c): 32, 32 at 32x32, pool, 64, 64 at 16x16,
     * pool, 128 at 8x8 */
    static const struct {
        int hw, c, f, pool;
    } shape[NCONV] = {
        {32, 3, 32, 0}, {32, 32, 32, 1}, {16, 32, 64, 0}, {16, 64, 64, 1}, {8, 64, 128, 0}};
    static const char *const names[NCONV] = {"1", "2", "3", "4", "5"};
    Block blocks[NCONV];
    for (int i = 0; i < NCONV; i++) {
        Block *b = &blocks[i];
        memset(b, 0, sizeof *b);
        b->name = names[i];
        conv_geom_init(&b->g, shape[i].hw, shape[i].hw, shape[i].c, 3, 3, shape[i].f, 1, 1, 1);
        b->g.no_dinput = i == 0; /* the model's first layer with parameters */
        const size_t in = (size_t)BATCH * b->g.h * b->g.w * b->g.c;
        const size_t out = (size_t)BATCH * b->g.oh * b->g.ow * b->g.f, k = 9 * b->g.c * b->g.f;
        b->in = buf(in, 1.0f), b->din = buf(in, 0), b->w = buf(k, 0.1f), b->dw = buf(k, 0);
        b->conv = buf(out, 0), b->y = buf(out, 0), b->dy = buf(out, 0.01f), b->dconv = buf(out, 0);
        b->gamma = buf(b->g.f, 1.0f), b->beta = buf(b->g.f, 0.1f), b->dgamma = buf(b->g.f, 0);
        b->dbeta = buf(b->g.f, 0), b->mean = buf(b->g.f, 0), b->var = buf(b->g.f, 0);
        b->invstd = buf(b->g.f, 0);
        b->moments = must(malloc((size_t)BATCH * 2 * b->g.f * sizeof *b->moments));
        for (int s = 0; s < shards; s++) {
            b->scratch[s] = buf(conv_scratch_size(&b->g, lo(s + 1, shards) - lo(s, shards)), 0);
            b->sdw[s] = buf(k, 0);
        }
        b->pool = shape[i].pool;
        if (b->pool) {
            pool_geom_init(&b->pg, b->g.oh, b->g.ow, b->g.f, 2, 2, 2, 2, 0);
            const size_t po = (size_t)BATCH * b->pg.oh * b->pg.ow * b->g.f;
            b->pooled = buf(po, 0), b->dpooled = buf(po, 0.01f);
            b->argmax = must(malloc(po * sizeof *b->argmax));
        }
    }
    static double wall[NCONV][NPASS][MAX_ROUNDS], cpu[NCONV][NPASS][MAX_ROUNDS];
    for (int r = -1; r < rounds; r++) /* round -1 warms up: first touch, the pool's start */
        for (int order = 0; order < 2 * NCONV; order++) {
            /* the step's order: every forward from the first block, then every backward
             * from the last */
            const int fwd = order < NCONV, i = fwd ? order : 2 * NCONV - 1 - order;
            for (int q = 0; q < NPASS / 2; q++) {
                const int pass = fwd ? q : NPASS / 2 + q;
                if ((pass == P_POOL_F || pass == P_POOL_B) && !blocks[i].pool) continue;
                const double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
                run_pass(&blocks[i], pass, shards);
                if (r < 0) continue;
                wall[i][pass][r] = clock_s(CLOCK_MONOTONIC) - t0;
                cpu[i][pass][r] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
            }
        }
    double mw[NCONV][NPASS] = {{0}}, mc[NCONV][NPASS] = {{0}}, step = 0, step_cpu = 0;
    for (int i = 0; i < NCONV; i++)
        for (int pass = 0; pass < NPASS; pass++) {
            if ((pass == P_POOL_F || pass == P_POOL_B) && !blocks[i].pool) continue;
            mw[i][pass] = median(wall[i][pass], rounds) * 1e3;
            mc[i][pass] = median(cpu[i][pass], rounds) * 1e3;
            step += mw[i][pass], step_cpu += mc[i][pass];
        }
    printf("{\"threads\":%d,\"batch\":%d,\"shards\":%d,\"rounds\":%d,\"kernels\":\"%s, %s\","
           "\"step_ms\":%.4f,\"step_cpu_ms\":%.4f,\"rows\":[",
           gemm_threads(), BATCH, shards, rounds, gemm_kernels()->library, gemm_kernels()->kernels,
           step, step_cpu);
    int first = 1;
    for (int pass = 0; pass < NPASS; pass++)
        for (int i = 0; i < NCONV; i++) {
            if ((pass == P_POOL_F || pass == P_POOL_B) && !blocks[i].pool) continue;
            printf("%s{\"layer\":\"%s_%s\",\"pass\":\"%s\",\"ms\":%.4f,\"cpu_ms\":%.4f,"
                   "\"share\":%.4f}",
                   first ? "" : ",", pass_layer[pass], blocks[i].name,
                   pass < NPASS / 2 ? "forward" : "backward", mw[i][pass], mc[i][pass],
                   mw[i][pass] / step);
            first = 0;
        }
    printf("]}\n");
    return 0;
}
