#include "gemm.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

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

#else /* OpenBLAS */

#include <cblas.h>

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

#endif

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
    ParallelFn fn; /* set: a parallel_for job, block i is fn(ctx, i) */
    void *ctx;
} Job;

/* Set while this thread runs a block: a gemm() or parallel_for() called from inside runs
 * on this thread alone (the pool is busy with the job that called it). */
static __thread int in_block;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake, finished;
    int threads;       /* wanted, caller included; 0 until set or first used */
    int started;       /* the library was made single-threaded */
    int workers;       /* started */
    unsigned long gen; /* bumped per job: workers join only the current one */
    Job job;
    int next, done; /* blocks claimed and finished, under mu */
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER};

static void job_run_block(const Job *j, int i)
{
    if (j->fn) {
        j->fn(j->ctx, i);
        return;
    }
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

/* Claims and runs blocks of job `gen` until none is left; called with mu held. */
static void pool_take_blocks(unsigned long gen)
{
    while (pool.gen == gen && pool.next < pool.job.nblocks) {
        int i = pool.next++;
        Job j = pool.job;
        pthread_mutex_unlock(&pool.mu);
        in_block = 1;
        job_run_block(&j, i);
        in_block = 0;
        pthread_mutex_lock(&pool.mu);
        if (++pool.done == j.nblocks) pthread_cond_signal(&pool.finished);
    }
}

static void *pool_worker(void *arg)
{
    (void)arg;
    gemm_flush_denormals();
    unsigned long seen = 0;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.gen == seen)
            pthread_cond_wait(&pool.wake, &pool.mu);
        seen = pool.gen;
        pool_take_blocks(seen);
    }
    return NULL;
}

/* Makes the library single-threaded and starts workers up to threads-1 (they live as
 * long as the process, asleep between products). With mu held. */
static void pool_start(void)
{
    if (!pool.threads) {
        const char *env = getenv(GEMM_THREADS_ENV);
        cpu_set_t cpus;
        if (env && atoi(env) > 0)
            pool.threads = atoi(env);
        else if (sched_getaffinity(0, sizeof cpus, &cpus) == 0)
            pool.threads = CPU_COUNT(&cpus);
        else
            pool.threads = 1;
    }
    if (!pool.started) {
        backend_single_thread();
        pool.started = 1;
    }
    while (pool.workers < pool.threads - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, pool_worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc) break; /* fewer workers: the caller takes their blocks */
        pool.workers++;
    }
}

void gemm_set_threads(int n)
{
    pthread_mutex_lock(&pool.mu);
    pool.threads = n > 0 ? n : 1;
    backend_single_thread();
    pthread_mutex_unlock(&pool.mu);
}

/* Hands pool.job (filled in, mu held) to the workers, takes blocks until none is left,
 * waits for the others' and unlocks mu. */
static void pool_run(void)
{
    pool.next = pool.done = 0;
    unsigned long gen = ++pool.gen;
    pthread_cond_broadcast(&pool.wake);
    pool_take_blocks(gen);
    while (pool.done < pool.job.nblocks)
        pthread_cond_wait(&pool.finished, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}

/* The threads a job can use: those wanted, at most the workers started plus the caller.
 * With mu held, after pool_start. */
static int pool_threads(void)
{
    return pool.threads < pool.workers + 1 ? pool.threads : pool.workers + 1;
}

int gemm_threads(void)
{
    pthread_mutex_lock(&pool.mu);
    pool_start();
    int threads = pool_threads();
    pthread_mutex_unlock(&pool.mu);
    return threads;
}

int gemm_batch_shards(int b)
{
    int s = gemm_threads();
    if (s > b / GEMM_SHARD_MIN_EXAMPLES) s = b / GEMM_SHARD_MIN_EXAMPLES;
    if (s > GEMM_MAX_SHARDS) s = GEMM_MAX_SHARDS;
    return s < 1 ? 1 : s;
}

void parallel_for(int n, ParallelFn fn, void *ctx)
{
    if (n <= 1 || in_block) {
        for (int i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    pool_start();
    if (pool.workers == 0) {
        pthread_mutex_unlock(&pool.mu);
        for (int i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    pool.job = (Job){.fn = fn, .ctx = ctx, .nblocks = n};
    pool_run();
}

/* The partial sums of a product cut along k, grown as needed; with mu held. */
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
    if (in_block) {
        backend_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    pool_start();
    int threads = pool_threads();
    /* One block per thread along the longer side of C, or along k (each block repacks the
     * operand it shares with the others, so more blocks cost more). Blocks are claimed
     * when a thread gets to run: a worker that is not scheduled in time leaves its block
     * to the caller. */
    int split_k = k >= GEMM_SPLIT_K_RATIO * (m > n ? m : n) &&
                  partial_reserve((size_t)(threads - 1) * m * n);
    int split_rows = m >= n, len = split_k ? k : split_rows ? m : n;
    int block = (len + threads - 1) / threads;
    block = (block + GEMM_BLOCK_ALIGN - 1) / GEMM_BLOCK_ALIGN * GEMM_BLOCK_ALIGN;
    if (threads == 1 || 2.0 * m * n * k < GEMM_PARALLEL_FLOPS || block >= len) {
        pthread_mutex_unlock(&pool.mu);
        backend_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    pool.job = (Job){.ta = ta,
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
                     .block = block,
                     .nblocks = (len + block - 1) / block};
    if (split_k) pool.job.partial = partial.buf;
    const Job j = pool.job;
    pool_run();
    if (j.split_k)
        for (int i = 1; i < j.nblocks; i++) {
            const float *p = j.partial + (size_t)(i - 1) * m * n;
            for (int r = 0; r < m; r++)
                for (int q = 0; q < n; q++) c[(size_t)r * ldc + q] += p[(size_t)r * n + q];
        }
}

void gemm_flush_denormals(void)
{
#if defined(__SSE__)
    _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ (bit 15) | DAZ (bit 6) */
#elif defined(__aarch64__)
    unsigned long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (1ul << 24))); /* FZ */
#endif
}
