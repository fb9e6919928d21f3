/* cuda_emul.h — just enough of CUDA's execution model to run device.cu's kernels
 * (trainer/src/gpu/kernels.cuh) on the CPU, for test-gpu-kernels.cc. It stands in for
 * a GPU where none can be had and says nothing about CUDA itself, cuDNN, cuBLAS,
 * streams or graphs: test-gpu.c checks those on a device.
 *
 * A launch starts one real thread (std::thread) per thread of a block; together they
 * run the blocks one after another, meeting at a barrier after each, so __syncthreads is
 * a barrier among them and __shared__ arrays (static here) belong to the block that is
 * running. One dimension (x) only, as the kernels use. */
#ifndef KT_CUDA_EMUL_H
#define KT_CUDA_EMUL_H

#include <pthread.h>

#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x, y, z;
};

static dim3 blockDim, gridDim;
static thread_local dim3 blockIdx, threadIdx;
static pthread_barrier_t emul_block_barrier;
static std::mutex emul_atomic_lock;

#define __global__
#define __device__
#define __shared__ static

static inline void __syncthreads()
{
    pthread_barrier_wait(&emul_block_barrier);
}

static inline float atomicAdd(float *p, float v)
{
    std::lock_guard<std::mutex> hold(emul_atomic_lock);
    float old = *p;
    *p = old + v;
    return old;
}

/* kernel<<<grid, block>>>(args...) */
template <typename... P, typename... A>
static void emul_launch(unsigned grid, unsigned block, void (*kernel)(P...), A... args)
{
    gridDim = dim3{grid, 1, 1};
    blockDim = dim3{block, 1, 1};
    pthread_barrier_init(&emul_block_barrier, nullptr, block);
    std::vector<std::thread> threads;
    threads.reserve(block);
    for (unsigned t = 0; t < block; t++)
        threads.emplace_back([=] {
            threadIdx = dim3{t, 0, 0};
            for (unsigned b = 0; b < grid; b++) {
                blockIdx = dim3{b, 0, 0};
                kernel(args...);
                pthread_barrier_wait(&emul_block_barrier); // the block is done
            }
        });
    for (auto &th : threads) th.join();
    pthread_barrier_destroy(&emul_block_barrier);
}

#endif
