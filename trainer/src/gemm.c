#include "gemm.h"

#if defined(GEMM_BLIS)

#include <blis.h>
#include <string.h>

/* BLIS's typed API takes plain pointers for operands it only reads. */
static float *unconst(const float *p)
{
    float *q;
    memcpy(&q, &p, sizeof q);
    return q;
}

void gemm(GemmTrans ta, GemmTrans tb, int m, int n, int k, float alpha, const float *a, int lda,
          const float *b, int ldb, float beta, float *c, int ldc)
{
    /* Row-major storage is a row stride of ld and a column stride of 1; BLIS applies the
     * transposes to the stored matrices itself. */
    bli_sgemm(ta == GEMM_T ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
              tb == GEMM_T ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n, k, &alpha, unconst(a), lda,
              1, unconst(b), ldb, 1, &beta, c, ldc, 1);
}

void gemm_set_threads(int n)
{
    bli_thread_set_num_threads(n);
}

const char *gemm_backend(void)
{
    return "blis";
}

#elif defined(GEMM_DNNL)

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

void gemm(GemmTrans ta, GemmTrans tb, int m, int n, int k, float alpha, const float *a, int lda,
          const float *b, int ldb, float beta, float *c, int ldc)
{
    dnnl_status_t st = dnnl_sgemm(ta == GEMM_T ? 'T' : 'N', tb == GEMM_T ? 'T' : 'N', m, n, k,
                                  alpha, a, lda, b, ldb, beta, c, ldc);
    /* Only bad arguments fail, and the layers derive theirs from checked shapes: a bug. */
    if (st != dnnl_success) {
        fprintf(stderr, "gemm: dnnl_sgemm(m=%d, n=%d, k=%d) failed: status %d\n", m, n, k, (int)st);
        abort();
    }
}

void gemm_set_threads(int n)
{
    omp_set_num_threads(n); /* oneDNN's CPU runtime here is OpenMP */
}

const char *gemm_backend(void)
{
    return "dnnl";
}

#else /* OpenBLAS */

#include <cblas.h>

void gemm(GemmTrans ta, GemmTrans tb, int m, int n, int k, float alpha, const float *a, int lda,
          const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta == GEMM_T ? CblasTrans : CblasNoTrans,
                tb == GEMM_T ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
}

void gemm_set_threads(int n)
{
    openblas_set_num_threads(n);
}

const char *gemm_backend(void)
{
    return "openblas";
}

#endif
