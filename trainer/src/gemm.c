#include "gemm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "pool.h"

/* ----------------------------------------------------------------------------
 * Backends: one single-threaded product of the library chosen at build time */

#if defined(GEMM_BLIS)

#include <blis.h>
#include <string.h>

#define GEMM_THREADS_ENV "BLIS_NUM_THREADS"

/* BLIS's typed API takes plain pointers for operands it only reads. */
static float *unconst(const float *p)
{
    float *q;
    memcpy(&q, &p, sizeof q);
    return q;
}

static void backend_gemm(GemmTrans ta, GemmTrans tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc)
{
    /* Row-major storage is a row stride of ld and a column stride of 1; BLIS applies the
     * transposes to the stored matrices itself. */
    bli_sgemm(ta == GEMM_T ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
              tb == GEMM_T ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n, k, &alpha, unconst(a), lda,
              1, unconst(b), ldb, 1, &beta, c, ldc, 1);
}

static void backend_single_thread(void)
{
    bli_thread_set_num_threads(1);
}

const char *gemm_backend(void)
{
    return "blis";
}

/* BLIS picks its kernels by the CPU's features itself (its configuration registry). */
static void backend_kernels(GemmKernels *k, char **argv)
{
    (void)argv;
    snprintf(k->library, sizeof k->library, "BLIS");
    snprintf(k->kernels, sizeof k->kernels, "%s", cpu_width_name(cpu_width(k->info.flags)));
    snprintf(k->origin, sizeof k->origin, "chosen by BLIS from the CPU's features");
}

#elif defined(GEMM_DNNL)

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#define GEMM_THREADS_ENV "OMP_NUM_THREADS"

static void backend_gemm(GemmTrans ta, GemmTrans tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc)
{
    dnnl_status_t st = dnnl_sgemm(ta == GEMM_T ? 'T' : 'N', tb == GEMM_T ? 'T' : 'N', m, n, k,
                                  alpha, a, lda, b, ldb, beta, c, ldc);
    /* Only bad arguments fail, and the layers derive theirs from checked shapes: a bug. */
    if (st != dnnl_success) {
        fprintf(stderr, "gemm: dnnl_sgemm(m=%d, n=%d, k=%d) failed: status %d\n", m, n, k, (int)st);
        abort();
    }
}

static void backend_single_thread(void)
{
    omp_set_num_threads(1); /* oneDNN's CPU runtime here is OpenMP */
}

const char *gemm_backend(void)
{
    return "dnnl";
}

/* oneDNN dispatches on the CPU's features at run time (its ISA detection). */
static void backend_kernels(GemmKernels *k, char **argv)
{
    (void)argv;
    snprintf(k->library, sizeof k->library, "oneDNN");
    snprintf(k->kernels, sizeof k->kernels, "%s", cpu_width_name(cpu_width(k->info.flags)));
    snprintf(k->origin, sizeof k->origin, "chosen by oneDNN from the CPU's features");
}

#else /* OpenBLAS */

#include <cblas.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define GEMM_THREADS_ENV "OPENBLAS_NUM_THREADS"

static void backend_gemm(GemmTrans ta, GemmTrans tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc)
{
    cblas_sgemm(CblasRowMajor, ta == GEMM_T ? CblasTrans : CblasNoTrans,
                tb == GEMM_T ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
}

static void backend_single_thread(void)
{
    openblas_set_num_threads(1);
}

const char *gemm_backend(void)
{
    return "openblas";
}

/* Set beside OPENBLAS_CORETYPE when the trainer chose it, so that the program run again
 * (and the workers that launch starts, which inherit both) tell its choice from a
 * user's. */
#define GEMM_CORETYPE_MARK "KUBETRAIN_OPENBLAS_CORETYPE"

/* Whether this OpenBLAS has the kernels of a core type: a DYNAMIC_ARCH build exports one
 * table, gotoblas_<CORE>, per core type it holds (a build for one CPU has none, and
 * ignores OPENBLAS_CORETYPE). Asking for a core type it lacks would not keep its own
 * choice: it would fall back to another. */
static int openblas_has_core(const char *core)
{
    char sym[64];
    int n = snprintf(sym, sizeof sym, "gotoblas_%s", core);
    for (int i = 9; i < n && i < (int)sizeof sym - 1; i++)
        sym[i] = (char)toupper((unsigned char)sym[i]);
    return dlsym(RTLD_DEFAULT, sym) != NULL;
}

/* OpenBLAS settled its core type when it was loaded: from its table of CPU models, or
 * from OPENBLAS_CORETYPE. When the features call for a wider one that it has, and the
 * user did not choose, the only way to change it is to load it again with the variable
 * set: run this program again (argv non-NULL) with it. */
static void backend_kernels(GemmKernels *k, char **argv)
{
    const char *cfg = openblas_get_config(), *core = openblas_get_corename();
    const char *sp = strchr(cfg, ' '), *end = sp ? strchr(sp + 1, ' ') : NULL;
    snprintf(k->library, sizeof k->library, "%.*s", end ? (int)(end - cfg) : 63, cfg);
    snprintf(k->kernels, sizeof k->kernels, "%s", core);
    const unsigned flags = k->info.flags;
    const CpuWidth cpu = cpu_width(flags), got = cpu_openblas_core_width(core);
    const char *user = getenv("OPENBLAS_CORETYPE"), *mark = getenv(GEMM_CORETYPE_MARK);
    const char *const *cores = cpu_openblas_cores(flags);
    if (user && *user && mark && !strcmp(mark, user)) {
        snprintf(k->origin, sizeof k->origin, "chosen by the trainer from the CPU's features");
        if (strcasecmp(core, user))
            snprintf(k->warning, sizeof k->warning,
                     "%s did not take OPENBLAS_CORETYPE=%s: it runs %s kernels", k->library, user,
                     core);
        return;
    }
    if (user && *user) {
        snprintf(k->origin, sizeof k->origin, "OPENBLAS_CORETYPE=%s from the environment", user);
        const char *widest = cpu_openblas_pick(flags, "", openblas_has_core);
        if (got < cpu)
            snprintf(k->warning, sizeof k->warning,
                     "OPENBLAS_CORETYPE=%s runs %s kernels on a CPU with %s: unset it (the "
                     "trainer then picks the widest kernels the CPU has) or set it to %s",
                     user, cpu_width_name(got), cpu_width_name(cpu), widest ? widest : cores[0]);
        else if (got > cpu)
            snprintf(k->warning, sizeof k->warning,
                     "OPENBLAS_CORETYPE=%s runs %s kernels on a CPU with %s only: expect "
                     "SIGILL (exit 132); unset it (the trainer then picks the widest kernels "
                     "the CPU has)",
                     user, cpu_width_name(got), cpu_width_name(cpu));
        return;
    }
    snprintf(k->origin, sizeof k->origin, "chosen by OpenBLAS from the CPU model");
    const char *pick = cpu_openblas_pick(flags, core, openblas_has_core);
    if (pick && argv) {
        setenv("OPENBLAS_CORETYPE", pick, 1);
        setenv(GEMM_CORETYPE_MARK, pick, 1);
        /* The path /proc/self/exe names, not the link itself: under valgrind the link
         * is the tool, the path the program. */
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = '\0';
            execv(exe, argv);
        }
        int e = errno;
        unsetenv("OPENBLAS_CORETYPE");
        unsetenv(GEMM_CORETYPE_MARK);
        snprintf(k->warning, sizeof k->warning,
                 "could not run the trainer again with OPENBLAS_CORETYPE=%s (%.200s: %s), so it "
                 "runs %s kernels on a CPU with %s: set OPENBLAS_CORETYPE=%s",
                 pick, n > 0 ? exe : "/proc/self/exe", strerror(e), core, cpu_width_name(cpu),
                 pick);
    } else if (pick) {
        snprintf(k->warning, sizeof k->warning,
                 "%s kernels on a CPU with %s: OPENBLAS_CORETYPE=%s runs wider ones", core,
                 cpu_width_name(cpu), pick);
    } else if (got < cpu) {
        snprintf(k->warning, sizeof k->warning,
                 "%s runs %s kernels on a CPU with %s and has none wider for it: install an "
                 "OpenBLAS built with DYNAMIC_ARCH that has %s kernels (Debian's "
                 "libopenblas0-pthread), or build with GEMM=dnnl",
                 k->library, core, cpu_width_name(cpu), cores[0]);
    }
}

#endif

/* ----------------------------------------------------------------------------
 * Kernels: the widest the CPU has */

static GemmKernels kernels;
static char **kernels_argv; /* gemm_select_kernels' argv until settled */
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;

static void kernels_settle(void)
{
    cpu_detect(&kernels.info);
    cpu_flags_string(kernels.info.flags, kernels.cpu, sizeof kernels.cpu);
    backend_kernels(&kernels, kernels_argv);
    kernels_argv = NULL;
}

void gemm_select_kernels(char **argv)
{
    kernels_argv = argv;
    pthread_once(&kernels_once, kernels_settle);
}

const GemmKernels *gemm_kernels(void)
{
    pthread_once(&kernels_once, kernels_settle);
    return &kernels;
}

void gemm_describe(char *buf, size_t len)
{
    const GemmKernels *k = gemm_kernels();
    const CpuInfo *c = &k->info;
    snprintf(buf, len, "%s, %s kernels, %s (cpu: %s, family %d model %d; %s)", k->library,
             k->kernels, k->origin,
             c->name[0]     ? c->name
             : c->vendor[0] ? c->vendor
                            : "unknown",
             c->family, c->model, k->cpu);
}

/* ----------------------------------------------------------------------------
 * Blocks of one product shared by the caller and the workers */

/* Below this many flops a product runs on the caller alone: the hand-off would cost
 * more than the second core gives. */
#define GEMM_PARALLEL_FLOPS 4e6
/* A product whose inner dimension is this many times longer than both sides of C is cut
 * along it (a Dense layer's forward on a small batch): cut along C, every block would
 * pack the whole of the operand it shares, which there is as large as the product's
 * work. The blocks' sums are added in block order. */
#define GEMM_SPLIT_K_RATIO 32
/* Blocks are multiples of this many rows/columns (a whole number of register tiles). */
#define GEMM_BLOCK_ALIGN 16

typedef struct {
    GemmTrans ta, tb;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int split_rows; /* 1: blocks of C's rows, 0: of its columns */
    int split_k;    /* 1: blocks of the inner dimension, summed afterwards */
    float *partial; /* split_k: C-sized sums of blocks 1.. (m*n floats each) */
    int block, nblocks;
} Job;

/* Block i of the product j (a ParallelFn). */
static void job_run_block(void *ctx, int i)
{
    const Job *j = ctx;
    int lo = i * j->block, len = j->split_k ? j->k : j->split_rows ? j->m : j->n;
    int cnt = lo + j->block < len ? j->block : len - lo;
    if (j->split_k) {
        /* columns lo.. of op(A) and rows lo.. of op(B); block 0 into C (with beta), the
         * others into their own partial sums */
        const float *a = j->ta == GEMM_N ? j->a + lo : j->a + (size_t)lo * j->lda;
        const float *b = j->tb == GEMM_N ? j->b + (size_t)lo * j->ldb : j->b + lo;
        if (i == 0)
            backend_gemm(j->ta, j->tb, j->m, j->n, cnt, j->alpha, a, j->lda, b, j->ldb, j->beta,
                         j->c, j->ldc);
        else
            backend_gemm(j->ta, j->tb, j->m, j->n, cnt, j->alpha, a, j->lda, b, j->ldb, 0.0f,
                         j->partial + (size_t)(i - 1) * j->m * j->n, j->n);
    } else if (j->split_rows) {
        /* rows lo.. of op(A): rows of A, or columns of A when transposed */
        const float *a = j->ta == GEMM_N ? j->a + (size_t)lo * j->lda : j->a + lo;
        backend_gemm(j->ta, j->tb, cnt, j->n, j->k, j->alpha, a, j->lda, j->b, j->ldb, j->beta,
                     j->c + (size_t)lo * j->ldc, j->ldc);
    } else {
        /* columns lo.. of op(B): columns of B, or rows of B when transposed */
        const float *b = j->tb == GEMM_N ? j->b + lo : j->b + (size_t)lo * j->ldb;
        backend_gemm(j->ta, j->tb, j->m, cnt, j->k, j->alpha, j->a, j->lda, b, j->ldb, j->beta,
                     j->c + lo, j->ldc);
    }
}

/* Whether gemm_set_threads was called, and whether gemm_start ran; under the caller
 * rule of gemm(). */
static int threads_set, started;

/* Before the first product or thread count: the library made single-threaded (the
 * pool's threads share the work), and the pool sized by the library's usual variable
 * unless gemm_set_threads came first. */
static void gemm_start(void)
{
    if (started) return;
    started = 1;
    backend_single_thread();
    const char *env = getenv(GEMM_THREADS_ENV);
    if (!threads_set && env && atoi(env) > 0) pool_set_threads(atoi(env));
}

void gemm_set_threads(int n)
{
    threads_set = 1;
    pool_set_threads(n);
    backend_single_thread();
}

int gemm_threads(void)
{
    gemm_start();
    return pool_threads();
}

int gemm_batch_shards(int b)
{
    int s = gemm_threads();
    if (s > b / GEMM_SHARD_MIN_EXAMPLES) s = b / GEMM_SHARD_MIN_EXAMPLES;
    if (s > GEMM_MAX_SHARDS) s = GEMM_MAX_SHARDS;
    return s < 1 ? 1 : s;
}

/* The partial sums of a product cut along k, grown as needed. */
static struct {
    float *buf;
    size_t cap;
} partial;

/* Makes room for n floats of partial sums; 0 when there is no memory for them (the
 * product is then cut along C instead). */
static int partial_reserve(size_t n)
{
    if (n <= partial.cap) return 1;
    float *p = realloc(partial.buf, n * sizeof *p);
    if (!p) return 0;
    partial.buf = p;
    partial.cap = n;
    return 1;
}

void gemm(GemmTrans ta, GemmTrans tb, int m, int n, int k, float alpha, const float *a, int lda,
          const float *b, int ldb, float beta, float *c, int ldc)
{
    if (pool_in_task()) {
        backend_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    int threads = gemm_threads();
    /* One block per thread along the longer side of C, or along k (each block repacks the
     * operand it shares with the others, so more blocks cost more). Blocks are claimed
     * when a thread gets to run: a worker that is not scheduled in time leaves its block
     * to the caller. */
    int split_k =
        k >= GEMM_SPLIT_K_RATIO * (m > n ? m : n) && partial_reserve((size_t)(threads - 1) * m * n);
    int split_rows = m >= n, len = split_k ? k : split_rows ? m : n;
    int block = (len + threads - 1) / threads;
    block = (block + GEMM_BLOCK_ALIGN - 1) / GEMM_BLOCK_ALIGN * GEMM_BLOCK_ALIGN;
    if (threads == 1 || 2.0 * m * n * k < GEMM_PARALLEL_FLOPS || block >= len) {
        backend_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    Job j = {.ta = ta,
             .tb = tb,
             .m = m,
             .n = n,
             .k = k,
             .lda = lda,
             .ldb = ldb,
             .ldc = ldc,
             .alpha = alpha,
             .beta = beta,
             .a = a,
             .b = b,
             .c = c,
             .split_rows = split_rows,
             .split_k = split_k,
             .partial = split_k ? partial.buf : NULL,
             .block = block,
             .nblocks = (len + block - 1) / block};
    parallel_for(j.nblocks, job_run_block, &j);
    if (j.split_k)
        for (int i = 1; i < j.nblocks; i++) {
            const float *p = j.partial + (size_t)(i - 1) * m * n;
            for (int r = 0; r < m; r++)
                for (int q = 0; q < n; q++) c[(size_t)r * ldc + q] += p[(size_t)r * n + q];
        }
}
