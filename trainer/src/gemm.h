/* gemm — the trainer's one matrix product, over a BLAS library chosen at build time.
 *
 * Every Conv2D and Dense product goes through gemm(); layers.c never names a library.
 * The backend is a build flag (trainer.mk: make GEMM=blis|openblas|dnnl): BLIS's typed
 * API, OpenBLAS's CBLAS, or oneDNN's dnnl_sgemm. All are well-kept libraries; nothing
 * here multiplies matrices itself. */
#ifndef KT_GEMM_H
#define KT_GEMM_H

#include <stddef.h>

#include "cpu.h"

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

/* The kernels the products run on, for the start-up line, the Prometheus labels and the
 * benchmarks' JSON. */
typedef struct {
    char library[64];   /* "OpenBLAS 0.3.21", "oneDNN", "BLIS" */
    char kernels[32];   /* OpenBLAS's core type ("SkylakeX"); the width the CPU allows
                         * ("avx512") for the backends that dispatch by features themselves */
    char origin[96];    /* who chose them: the library, the CPU's features, the user */
    char cpu[192];      /* the CPU's flags (cpu_flags_string) */
    CpuInfo info;       /* the CPU (cpu_detect) */
    char warning[512];  /* "" or why the products run narrower than the CPU allows, with
                         * the fix */
} GemmKernels;

/* Picks the widest kernels the CPU's feature flags allow, whatever its model, before
 * anything else in main; argv is main's. OpenBLAS chooses its core type when it is
 * loaded, from a table of CPU models (falling back to SSE kernels on a model newer than
 * the library) or from OPENBLAS_CORETYPE; so when the features call for a wider core
 * type that the library has, this sets OPENBLAS_CORETYPE and runs the program again
 * (execv of the path /proc/self/exe names, once: the variable is then set). A user's
 * OPENBLAS_CORETYPE is kept. Returns only when the kernels are settled (or the exec
 * failed: then a warning says so). Other backends dispatch by the CPU's features
 * themselves: nothing to do. */
void gemm_select_kernels(char **argv);

/* What gemm_select_kernels settled (the library's own choice when it was not called).
 * A static object. */
const GemmKernels *gemm_kernels(void);

/* One line naming the backend, the kernels, who chose them, the CPU and its flags:
 * "OpenBLAS 0.3.21, Zen kernels, chosen by OpenBLAS from the CPU model (cpu: AMD EPYC,
 * family 25 model 1; avx2 fma avx sse3)". */
void gemm_describe(char *buf, size_t len);

#endif
