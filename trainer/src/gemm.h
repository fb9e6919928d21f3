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
 * The blocks are the tasks of one parallel_for (pool.h): one hand-off per call instead
 * of the library's per-panel barriers. Not reentrant: one caller at a time, except that
 * a task of parallel_for() may call it (it then runs on that thread alone). */
void gemm(GemmTrans ta, GemmTrans tb, int m, int n, int k, float alpha, const float *a, int lda,
          const float *b, int ldb, float beta, float *c, int ldc);

/* Sets how many threads (the caller included, n >= 1) gemm() and parallel_for() use
 * from now on (pool_set_threads). Without a call: the backend's usual variable if set
 * (OPENBLAS_NUM_THREADS, BLIS_NUM_THREADS or OMP_NUM_THREADS), else the CPUs this
 * process may run on. */
void gemm_set_threads(int n);

/* The threads gemm() and parallel_for() use now (the caller included); starts the
 * pool's workers. */
int gemm_threads(void);

/* How many shards model.c cuts a batch of b examples into, each run by one task of
 * parallel_for: one per thread, with at least GEMM_SHARD_MIN_EXAMPLES examples each and
 * at most GEMM_MAX_SHARDS; 1 when b is small or there is one thread. */
#define GEMM_SHARD_MIN_EXAMPLES 16
#define GEMM_MAX_SHARDS 64
int gemm_batch_shards(int b);

/* The backend's name: "blis", "openblas" or "dnnl" (a static string). */
const char *gemm_backend(void);

#endif
