#include "pool.h"

#include <pthread.h>
#include <sched.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

/* Set while this thread runs a task: a parallel_for() called from inside runs on this
 * thread alone (the pool is busy with the job that called it). */
static __thread int in_task;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake, finished;
    int threads;       /* wanted, caller included; 0 until set or first used */
    int workers;       /* started */
    unsigned long gen; /* bumped per job: workers join only the current one */
    ParallelFn fn;     /* the current job: task i is fn(ctx, i), i < ntasks */
    void *ctx;
    int ntasks;
    int next, done; /* tasks claimed and finished, under mu */
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER};

/* Claims and runs tasks of job `gen` until none is left; called with mu held. */
static void take_tasks(unsigned long gen)
{
    while (pool.gen == gen && pool.next < pool.ntasks) {
        int i = pool.next++, n = pool.ntasks;
        ParallelFn fn = pool.fn;
        void *ctx = pool.ctx;
        pthread_mutex_unlock(&pool.mu);
        in_task = 1;
        fn(ctx, i);
        in_task = 0;
        pthread_mutex_lock(&pool.mu);
        if (++pool.done == n) pthread_cond_signal(&pool.finished);
    }
}

static void *worker(void *arg)
{
    (void)arg;
    pool_flush_denormals();
    unsigned long seen = 0;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.gen == seen) pthread_cond_wait(&pool.wake, &pool.mu);
        seen = pool.gen;
        take_tasks(seen);
    }
    return NULL;
}

/* Starts workers up to threads-1 (they live as long as the process, asleep between
 * jobs). With mu held. */
static void start_workers(void)
{
    if (!pool.threads) {
        cpu_set_t cpus;
        pool.threads = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    }
    while (pool.workers < pool.threads - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc) break; /* fewer workers: the caller takes their tasks */
        pool.workers++;
    }
}

void pool_set_threads(int n)
{
    pthread_mutex_lock(&pool.mu);
    pool.threads = n > 0 ? n : 1;
    pthread_mutex_unlock(&pool.mu);
}

int pool_threads(void)
{
    pthread_mutex_lock(&pool.mu);
    start_workers();
    int threads = pool.threads < pool.workers + 1 ? pool.threads : pool.workers + 1;
    pthread_mutex_unlock(&pool.mu);
    return threads;
}

int pool_in_task(void)
{
    return in_task;
}

void parallel_for(int n, ParallelFn fn, void *ctx)
{
    if (n <= 1 || in_task) {
        for (int i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    start_workers();
    if (pool.workers == 0) {
        pthread_mutex_unlock(&pool.mu);
        for (int i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    /* hand the job to the workers, take tasks until none is left, wait for theirs */
    pool.fn = fn;
    pool.ctx = ctx;
    pool.ntasks = n;
    pool.next = pool.done = 0;
    unsigned long gen = ++pool.gen;
    pthread_cond_broadcast(&pool.wake);
    take_tasks(gen);
    while (pool.done < n) pthread_cond_wait(&pool.finished, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}

void pool_flush_denormals(void)
{
#if defined(__SSE__)
    _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ (bit 15) | DAZ (bit 6) */
#elif defined(__aarch64__)
    unsigned long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (1ul << 24))); /* FZ */
#endif
}
