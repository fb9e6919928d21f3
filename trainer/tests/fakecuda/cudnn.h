/* A CPU stand-in for the cuDNN calls of trainer/src/gpu/device.cu (tests only, see
 * cuda_runtime.h here): 2-D cross-correlation on NHWC float tensors with a KRSC (NHWC
 * format) filter, symmetric padding and strides, no dilation; forward, backward data
 * and backward filter with cuDNN's alpha/beta blending. The algorithm queries offer a
 * tensor-op algorithm first (which device.cu must pass over), then a non-deterministic
 * FMA one (its sums, like those of cuDNN's algorithms that add with atomics, differ in
 * the last bits from run to run), then the deterministic FMA one, whose workspace grows
 * with the batch; each call refuses descriptors that do not fit together and a
 * workspace smaller than its algorithm needs. */
#ifndef KT_FAKE_CUDNN_H
#define KT_FAKE_CUDNN_H

#include "cuda_runtime.h"

enum cudnnStatus_t {
    CUDNN_STATUS_SUCCESS = 0,
    CUDNN_STATUS_NOT_INITIALIZED = 1001,
    CUDNN_STATUS_BAD_PARAM = 2000,
    CUDNN_STATUS_NOT_SUPPORTED = 3000,
    CUDNN_STATUS_EXECUTION_FAILED = 5000,
};
enum cudnnTensorFormat_t { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1 };
enum cudnnDataType_t { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_DOUBLE = 1, CUDNN_DATA_HALF = 2 };
enum cudnnConvolutionMode_t { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 };
enum cudnnMathType_t {
    CUDNN_DEFAULT_MATH = 0,
    CUDNN_TENSOR_OP_MATH = 1,
    CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
    CUDNN_FMA_MATH = 3,
};
enum cudnnDeterminism_t { CUDNN_NON_DETERMINISTIC = 0, CUDNN_DETERMINISTIC = 1 };
/* the fake offers algorithms 0 (FMA, deterministic), 1 (tensor op) and 2 (FMA,
 * non-deterministic) of each kind, whatever cuDNN's own numbers name */
enum cudnnConvolutionFwdAlgo_t { FAKE_FWD_ALGO_0 = 0, FAKE_FWD_ALGO_1 = 1, FAKE_FWD_ALGO_2 = 2 };
enum cudnnConvolutionBwdDataAlgo_t {
    FAKE_BWD_DATA_ALGO_0 = 0,
    FAKE_BWD_DATA_ALGO_1 = 1,
    FAKE_BWD_DATA_ALGO_2 = 2,
};
enum cudnnConvolutionBwdFilterAlgo_t {
    FAKE_BWD_FILTER_ALGO_0 = 0,
    FAKE_BWD_FILTER_ALGO_1 = 1,
    FAKE_BWD_FILTER_ALGO_2 = 2,
};

typedef struct FakeCudnn *cudnnHandle_t;
typedef struct FakeTensorDesc *cudnnTensorDescriptor_t;
typedef struct FakeFilterDesc *cudnnFilterDescriptor_t;
typedef struct FakeConvDesc *cudnnConvolutionDescriptor_t;

template <typename Algo> struct FakeAlgoPerf {
    Algo algo;
    cudnnStatus_t status;
    float time;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t mathType;
};
typedef FakeAlgoPerf<cudnnConvolutionFwdAlgo_t> cudnnConvolutionFwdAlgoPerf_t;
typedef FakeAlgoPerf<cudnnConvolutionBwdDataAlgo_t> cudnnConvolutionBwdDataAlgoPerf_t;
typedef FakeAlgoPerf<cudnnConvolutionBwdFilterAlgo_t> cudnnConvolutionBwdFilterAlgoPerf_t;

size_t cudnnGetVersion(void);
const char *cudnnGetErrorString(cudnnStatus_t s);
cudnnStatus_t cudnnCreate(cudnnHandle_t *h);
cudnnStatus_t cudnnDestroy(cudnnHandle_t h);
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s);

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w);
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d);
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w);
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d);
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w,
                                              int u, int v, int dil_h, int dil_w,
                                              cudnnConvolutionMode_t mode, cudnnDataType_t compute);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m);
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t conv,
                                                    cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int *n, int *c,
                                                    int *h, int *wd);

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t h, int *count);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t h, int *count);
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t h, int *count);
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                     cudnnFilterDescriptor_t w,
                                                     cudnnConvolutionDescriptor_t conv,
                                                     cudnnTensorDescriptor_t y, int requested,
                                                     int *returned,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dx, int requested, int *returned,
    cudnnConvolutionBwdDataAlgoPerf_t *perf);
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dw, int requested, int *returned,
    cudnnConvolutionBwdFilterAlgoPerf_t *perf);

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                      cudnnFilterDescriptor_t w,
                                                      cudnnConvolutionDescriptor_t conv,
                                                      cudnnTensorDescriptor_t y,
                                                      cudnnConvolutionFwdAlgo_t algo,
                                                      size_t *bytes);
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t h, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dx,
    cudnnConvolutionBwdDataAlgo_t algo, size_t *bytes);
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t h, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dw,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes);

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha,
                                      cudnnTensorDescriptor_t xd, const void *x,
                                      cudnnFilterDescriptor_t wd, const void *w,
                                      cudnnConvolutionDescriptor_t conv,
                                      cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes,
                                      const void *beta, cudnnTensorDescriptor_t yd, void *y);
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha,
                                           cudnnFilterDescriptor_t wd, const void *w,
                                           cudnnTensorDescriptor_t dyd, const void *dy,
                                           cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *ws,
                                           size_t ws_bytes, const void *beta,
                                           cudnnTensorDescriptor_t dxd, void *dx);
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha,
                                             cudnnTensorDescriptor_t xd, const void *x,
                                             cudnnTensorDescriptor_t dyd, const void *dy,
                                             cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws,
                                             size_t ws_bytes, const void *beta,
                                             cudnnFilterDescriptor_t dwd, void *dw);

#endif
