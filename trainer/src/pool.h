/* pool — the trainer's compute threads: the caller and a pool of workers that run the
 * tasks of parallel_for(). gemm.c cuts a large product into blocks run as such tasks,
 * model.c a batch into shards of examples, optim.c the parameter arena into ranges.
 *
 * One hand-off per parallel_for: the caller and the workers claim tasks in order until
 * none is left, so on a shared machine a descheduled worker delays only the task it
 * holds, and no thread spins between calls (the workers sleep on a condition variable,
 * and live as long as the process). */
#ifndef KT_POOL_H
#define KT_POOL_H

/* Runs fn(ctx, 0) .. fn(ctx, n-1) on the pool's threads (the caller included) and
 * returns when all have returned. Tasks are claimed in order as threads get to run them,
 * so which thread runs which is not fixed: a task must depend only on its index. Inside
 * a task, parallel_for() (and gemm()) run on the calling thread alone. Not reentrant:
 * one caller at a time, except from inside a task. */
typedef void (*ParallelFn)(void *ctx, int i);
void parallel_for(int n, ParallelFn fn, void *ctx);

/* Sets how many threads (the caller included, n >= 1) parallel_for uses from now on.
 * Without a call: the CPUs this process may run on (gemm_set_threads and gemm.c set it
 * from the BLAS library's usual variable). */
void pool_set_threads(int n);

/* The threads parallel_for uses now (the caller included): those set, at most the
 * workers that could be started plus the caller. Starts the workers. */
int pool_threads(void);

/* Whether the calling thread is running a task of parallel_for. */
int pool_in_task(void);

/* Flushes denormal floats to zero in the calling thread's arithmetic (results and
 * operands: x86's FTZ and DAZ, AArch64's FZ), as TensorFlow's CPU threads do. Threads
 * created afterwards inherit it; the pool's workers set it themselves, and so should
 * any other thread that computes (the main thread, overlap.c's). Without it a denormal
 * operand (Adam's second moments decaying, gradients of nearly dead units) costs a
 * hundred cycles or more. */
void pool_flush_denormals(void);

#endif
