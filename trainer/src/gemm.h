/* gemm — the trainer's one matrix product, over a BLAS library chosen at build time.
 *
 * Every Conv2D and Dense product goes through gemm(); layers.c never names a library.
 * The backend is a build flag (trainer.mk: make GEMM=blis|openblas|dnnl): BLIS's typed
 * API, OpenBLAS's CBLAS, or oneDNN's dnnl_sgemm. All are well-kept libraries; nothing
 * here multiplies matrices itself. */
#ifndef KT_GEMM_H
#define KT_GEMM_H

typedef enum { GEMM_N = 0, GEMM_T = 1 } GemmTrans;

/* C (m,n) = alpha * op(A) (m,k) @ op(B) (k,n) + beta * C, all row-major, exactly like
 * cblas_sgemm(CblasRowMajor, ...): op(X) is X or its transpose as ta/tb say; lda, ldb
 * and ldc are the row strides of A, B and C as stored. With beta == 0, C is only
 * written (its old contents may be NaN).
 *
 * Threads: the library itself always runs single-threaded. A large product is cut
 * into independent blocks of C's rows or columns, or, when the inner dimension k is far
 * longer than both sides of C (a Dense layer's forward on a small batch), into blocks
 * of k whose sums are added in block order afterwards (so that no block packs the
 * whole of a shared operand); a result is then the same bits for a given thread count.
 * The caller and gemm's own workers take blocks until none is left. One hand-off per call instead of the library's per-panel
 * barriers: on a shared machine a descheduled thread then delays only its own block,
 * and no library thread spins between calls. Not reentrant: one caller at a time,
 * except that a task of parallel_for() may call it (it then runs on that thread alone). */
void gemm(GemmTrans ta, GemmTrans tb, int m, int n, int k, float alpha, const float *a, int lda,
          const float *b, int ldb, float beta, float *c, int ldc);

/* Sets how many threads (the caller included, n >= 1) gemm() uses from now on.
 * Without a call: the backend's usual variable if set (OPENBLAS_NUM_THREADS,
 * BLIS_NUM_THREADS or OMP_NUM_THREADS), else the CPUs this process may run on. */
void gemm_set_threads(int n);

/* The threads gemm() uses now (the caller included); starts its workers. */
int gemm_threads(void);

/* Runs fn(ctx, 0) .. fn(ctx, n-1) on gemm's threads (the caller included) and returns
 * when all have returned. Tasks are claimed in order as threads get to run them, so
 * which thread runs which is not fixed: a task must depend only on its index. Inside a
 * task, gemm() and parallel_for() run on the calling thread alone. Same caller rule as
 * gemm(). */
typedef void (*ParallelFn)(void *ctx, int i);
void parallel_for(int n, ParallelFn fn, void *ctx);

/* How many shards model.c cuts a batch of b examples into, each run by one task of
 * parallel_for: one per thread, with at least GEMM_SHARD_MIN_EXAMPLES examples each and
 * at most GEMM_MAX_SHARDS; 1 when b is small or there is one thread. */
#define GEMM_SHARD_MIN_EXAMPLES 16
#define GEMM_MAX_SHARDS 64
int gemm_batch_shards(int b);

/* The backend's name: "blis", "openblas" or "dnnl" (a static string). */
const char *gemm_backend(void);

/* Flushes denormal floats to zero in the calling thread's arithmetic (results and
 * operands: x86's FTZ and DAZ, AArch64's FZ), as TensorFlow's CPU threads do. Threads
 * created afterwards inherit it; the pool's workers set it themselves. Without it a
 * denormal operand (Adam's second moments decaying, gradients of nearly dead units)
 * costs a hundred cycles or more. */
void gemm_flush_denormals(void);

#endif
