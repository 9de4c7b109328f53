/* A small persistent thread pool for the native CPU kernels (one per library: each C file that
 * includes this header has its own). A kernel splits its work into parts -- independent outputs,
 * so that the result is the same bits for any number of parts and whichever thread computes one --
 * and pool_run() hands them out: the calling thread and the workers each take the next part not
 * taken yet until none is left, so a worker that the OS does not schedule in time (cores loaded by
 * other processes, or by a BLAS's spinning threads) costs nothing: the caller takes its parts. Parts
 * are several per thread for the same reason. Workers are started on first need; between calls they
 * poll for POOL_POLL_NS, yielding the core to any other thread that wants it, then sleep on a condition
 * variable; the caller waits for the parts taken by workers the same way. (Waking a sleeping thread
 * takes 50-100 us on a VM, as long as a small conv: a program's kernels follow one another closely, so
 * a worker that slept after each would miss most of them.) The thread count is set from Python
 * (gpuops.native.set_threads, through each file's <file>_set_threads). A second caller while the pool
 * is busy (another Python thread in another session's run) runs all its parts itself. After fork() the
 * child starts with no workers. */
#pragma once
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

#define POOL_MAX 256  /* workers at most */
/* The least work worth splitting, in multiply-adds or window cells (vectorised: about 10 us on one
 * core), against the 5-20 us of waking a worker and waiting for it; a part gets a quarter of it. */
#define POOL_MIN_WORK 262144
#define POOL_PARTS_PER_THREAD 4
#define POOL_POLL_NS 200000  /* how long a worker, or a caller waiting for workers, polls before sleeping */

typedef void (*pool_fn)(void* ctx, int64_t part, int64_t parts);

static struct {
    pthread_mutex_t busy;  /* held by the caller of a parallel run */
    pthread_mutex_t lock;  /* guards the fields below */
    pthread_cond_t wake, done;
    int64_t started;  /* workers running */
    uint64_t round;  /* incremented per parallel run */
    int64_t parts, next, finished, active;  /* this run's parts, the next to take, those done; workers in it */
    pool_fn fn;
    void* ctx;
    int forked;  /* pthread_atfork registered */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
          0, 0, 0, 0, 0, 0, 0, 0, 0};

static int64_t pool_threads = 1;  /* the count the next runs use (read and written atomically) */

static inline int64_t pool_get_threads(void) { return __atomic_load_n(&pool_threads, __ATOMIC_RELAXED); }

static inline int pool_threads_set(int64_t n) {
    __atomic_store_n(&pool_threads, n < 1 ? 1 : n > POOL_MAX + 1 ? POOL_MAX + 1 : n, __ATOMIC_RELAXED);
    return 0;
}

static inline int64_t pool_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* For a worker: whether a round after `seen` has begun; for the caller: whether all parts of its run
 * are done and no worker is inside it. Read without the lock: the fields are written under it,
 * atomically. */
static inline int pool_moved(int worker, uint64_t seen) {
    if (worker) return __atomic_load_n(&pool.round, __ATOMIC_ACQUIRE) != seen;
    return __atomic_load_n(&pool.finished, __ATOMIC_ACQUIRE) == __atomic_load_n(&pool.parts, __ATOMIC_RELAXED) &&
           !__atomic_load_n(&pool.active, __ATOMIC_ACQUIRE);
}

/* Polls, yielding the core to any thread that wants it, until pool_moved(worker, seen), for at most
 * POOL_POLL_NS (called with pool.lock held; returns with it held). */
static void pool_poll(int worker, uint64_t seen) {
    if (pool_moved(worker, seen)) return;
    pthread_mutex_unlock(&pool.lock);
    const int64_t until = pool_now_ns() + POOL_POLL_NS;
    while (!pool_moved(worker, seen) && pool_now_ns() < until) sched_yield();
    pthread_mutex_lock(&pool.lock);
}

/* Take and compute parts of the current run until none is left (called with pool.lock held; returns
 * with it held). */
static void pool_take_parts(void) {
    const pool_fn fn = pool.fn;
    void* ctx = pool.ctx;
    const int64_t parts = pool.parts;
    while (pool.next < parts) {
        const int64_t part = pool.next++;
        pthread_mutex_unlock(&pool.lock);
        fn(ctx, part, parts);
        pthread_mutex_lock(&pool.lock);
        __atomic_add_fetch(&pool.finished, 1, __ATOMIC_RELEASE);
    }
}

static void* pool_worker(void* arg) {
    uint64_t seen = (uint64_t)(uintptr_t)arg;  /* the round it was started in */
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        pool_poll(1, seen);
        while (pool.round == seen) pthread_cond_wait(&pool.wake, &pool.lock);
        seen = pool.round;
        __atomic_add_fetch(&pool.active, 1, __ATOMIC_RELEASE);
        pool_take_parts();
        if (__atomic_sub_fetch(&pool.active, 1, __ATOMIC_RELEASE) == 0 && pool.finished == pool.parts)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

static void pool_after_fork(void) {  /* the child: the parent's workers do not exist here */
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.started = pool.active = 0;
    pool.next = pool.parts = pool.finished = 0;
}

/* How many parts to split work of `units` (independent outputs) into, where `min_units` of them are
 * worth a thread: 1 below two threads' worth or at one thread, else up to POOL_PARTS_PER_THREAD per
 * thread, each of at least a quarter of min_units. */
static inline int64_t pool_parts(int64_t units, int64_t min_units) {
    const int64_t t = pool_get_threads();
    if (min_units < 1) min_units = 1;
    if (t <= 1 || units < 2 * min_units) return 1;
    const int64_t quarter = min_units / 4 > 0 ? min_units / 4 : 1, p = units / quarter;
    return p < POOL_PARTS_PER_THREAD * t ? p : POOL_PARTS_PER_THREAD * t;
}

/* fn(ctx, part, parts) for part in [0, parts), on up to the thread count's threads when the pool is free. */
static void pool_run(pool_fn fn, void* ctx, int64_t parts) {
    const int64_t threads = pool_get_threads(), want = (parts < threads ? parts : threads) - 1;
    if (want > 0 && pthread_mutex_trylock(&pool.busy) == 0) {
        pthread_mutex_lock(&pool.lock);
        if (!pool.forked) {
            pthread_atfork(NULL, NULL, pool_after_fork);
            pool.forked = 1;
        }
        while (pool.started < want && pool.started < POOL_MAX) {
            pthread_t t;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            const int failed = pthread_create(&t, &attr, pool_worker, (void*)(uintptr_t)pool.round);
            pthread_attr_destroy(&attr);
            if (failed) break;  /* fewer threads: the caller takes more parts */
            ++pool.started;
        }
        pool.fn = fn;
        pool.ctx = ctx;
        __atomic_store_n(&pool.parts, parts, __ATOMIC_RELAXED);
        pool.next = 0;
        __atomic_store_n(&pool.finished, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&pool.round, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&pool.wake);
        pool_take_parts();
        pool_poll(0, 0);
        while (pool.finished < parts || pool.active) pthread_cond_wait(&pool.done, &pool.lock);
        pool.fn = NULL;
        pthread_mutex_unlock(&pool.lock);
        pthread_mutex_unlock(&pool.busy);
        return;
    }
    for (int64_t p = 0; p < parts; ++p) fn(ctx, p, parts);
}

/* [lo, hi) of part `part` of `parts` over n units, boundaries at multiples of `align`. */
static inline void pool_range(int64_t n, int64_t align, int64_t part, int64_t parts, int64_t* lo, int64_t* hi) {
    const int64_t blocks = (n + align - 1) / align;
    const int64_t b0 = blocks * part / parts, b1 = blocks * (part + 1) / parts;
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}
