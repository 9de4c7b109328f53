/* A small persistent thread pool for the native CPU kernels (one per library: each C file that
 * includes this header has its own). A kernel splits its work into parts -- independent outputs,
 * so that the result is the same bits for any number of parts -- and pool_run() runs part 0 on the
 * calling thread and the others on workers. Workers are started on first need and sleep on a
 * condition variable between calls (no spinning: a busy machine loses nothing to idle workers); the
 * caller sleeps the same way until the last part is done. The thread count is set from Python
 * (gpuops.native.set_threads, through each file's <file>_set_threads). A second caller while the
 * pool is busy (another Python thread in another session's run) runs all its parts itself.
 * After fork() the child starts with no workers. */
#pragma once
#include <pthread.h>
#include <stdint.h>

#define POOL_MAX 256  /* workers at most */
/* The least work per part, in multiply-adds or window cells (vectorised: about 10 us on one core),
 * against the 5-20 us of waking a worker and waiting for it. */
#define POOL_MIN_WORK 262144

typedef void (*pool_fn)(void* ctx, int64_t part, int64_t parts);

static struct {
    pthread_mutex_t busy;  /* held by the caller of a parallel run */
    pthread_mutex_t lock;  /* guards the fields below */
    pthread_cond_t wake, done;
    int64_t started;  /* workers running: ids 1..started */
    uint64_t round;  /* incremented per parallel run */
    int64_t parts, pending;
    pool_fn fn;
    void* ctx;
    int forked;  /* pthread_atfork registered */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
          0, 0, 0, 0, 0, 0, 0};

static int64_t pool_threads = 1;  /* the count the next runs use (read and written atomically) */
static uint64_t pool_first_round[POOL_MAX + 1];  /* worker id -> the round it was started in */

static inline int64_t pool_get_threads(void) { return __atomic_load_n(&pool_threads, __ATOMIC_RELAXED); }

static inline int pool_threads_set(int64_t n) {
    __atomic_store_n(&pool_threads, n < 1 ? 1 : n > POOL_MAX + 1 ? POOL_MAX + 1 : n, __ATOMIC_RELAXED);
    return 0;
}

static void* pool_worker(void* arg) {
    const int64_t id = (int64_t)(intptr_t)arg;
    pthread_mutex_lock(&pool.lock);
    uint64_t seen = pool_first_round[id];
    for (;;) {
        while (pool.round == seen) pthread_cond_wait(&pool.wake, &pool.lock);
        seen = pool.round;
        if (id < pool.parts) {
            const pool_fn fn = pool.fn;
            void* ctx = pool.ctx;
            const int64_t parts = pool.parts;
            pthread_mutex_unlock(&pool.lock);
            fn(ctx, id, parts);
            pthread_mutex_lock(&pool.lock);
            if (--pool.pending == 0) pthread_cond_signal(&pool.done);
        }
    }
    return NULL;
}

static void pool_after_fork(void) {  /* the child: the parent's workers do not exist here */
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.started = 0;
    pool.pending = 0;
}

/* How many parts to split work of `units` (independent outputs) into when each part should have at
 * least `min_units` of them: at most the thread count, at least 1. */
static inline int64_t pool_parts(int64_t units, int64_t min_units) {
    const int64_t t = pool_get_threads();
    if (t <= 1 || units < 2 * min_units) return 1;
    const int64_t p = units / (min_units > 0 ? min_units : 1);
    return p < t ? p : t;
}

/* fn(ctx, part, parts) for part in [0, parts), on parts threads when the pool is free. */
static void pool_run(pool_fn fn, void* ctx, int64_t parts) {
    if (parts > 1 && pthread_mutex_trylock(&pool.busy) == 0) {
        pthread_mutex_lock(&pool.lock);
        if (!pool.forked) {
            pthread_atfork(NULL, NULL, pool_after_fork);
            pool.forked = 1;
        }
        while (pool.started < parts - 1 && pool.started < POOL_MAX) {
            pthread_t t;
            pthread_attr_t attr;
            const int64_t id = pool.started + 1;
            pool_first_round[id] = pool.round;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            const int failed = pthread_create(&t, &attr, pool_worker, (void*)(intptr_t)id);
            pthread_attr_destroy(&attr);
            if (failed) break;
            pool.started = id;
        }
        if (parts > pool.started + 1) parts = pool.started + 1;  /* fewer threads could be started */
        if (parts > 1) {
            pool.fn = fn;
            pool.ctx = ctx;
            pool.parts = parts;
            pool.pending = parts - 1;
            ++pool.round;
            pthread_cond_broadcast(&pool.wake);
            pthread_mutex_unlock(&pool.lock);
            fn(ctx, 0, parts);
            pthread_mutex_lock(&pool.lock);
            while (pool.pending) pthread_cond_wait(&pool.done, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
            pthread_mutex_unlock(&pool.busy);
            return;
        }
        pthread_mutex_unlock(&pool.lock);
        pthread_mutex_unlock(&pool.busy);
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
