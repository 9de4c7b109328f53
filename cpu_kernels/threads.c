/* The native kernels' one thread pool (pool_threads.h says how the kernels use it): threads_run hands the
 * parts of a kernel's work to the workers and the caller, threads_set and threads_get hold the count. The
 * other kernel files call threads_run and threads_get through the pointers gpuops.native binds at load
 * (<stem>_bind_threads). */
#include <stdint.h>
#include "pool_threads.h"

static struct {
    pthread_mutex_t busy;  /* held by the caller of a parallel run */
    pthread_mutex_t lock;  /* guards the fields below */
    pthread_cond_t wake, done;
    int64_t started;  /* workers running */
    uint64_t round;  /* incremented per parallel run */
    int64_t parts, finished, active;  /* this run's parts, those done; workers in it */
    int64_t slots, joined;  /* this run's segments of parts; the threads that have taken one so far */
    int64_t first[POOL_MAX + 1], end[POOL_MAX + 1];  /* segment s: parts [first, end) not taken yet */
    pool_fn fn;
    void* ctx;
    int forked;  /* pthread_atfork registered */
} pool = {.busy = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

static int64_t pool_threads = 1;  /* the count the next runs use (read and written atomically) */

int64_t threads_get(void) { return __atomic_load_n(&pool_threads, __ATOMIC_RELAXED); }

int threads_set(int64_t n) {
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

/* The next part for the thread with segment `slot` (-1: none) to compute, or -1 when all are taken
 * (called with pool.lock held). Each thread takes its own segment's parts in order, so that the data
 * it touches is contiguous: with parts dealt out one by one, neighbouring parts went to different
 * cores, and a 1x1 conv of 16 -> 64 channels on 3025 cells gained nothing from a second thread (in two
 * contiguous halves, 1.65x; neighbours share cache lines at their edges). A thread whose
 * segment is done takes the last part of the segment with most left. */
static int64_t pool_next_part(int64_t slot) {
    if (slot >= 0 && pool.first[slot] < pool.end[slot]) return pool.first[slot]++;
    int64_t most = 0, victim = -1;
    for (int64_t s = 0; s < pool.slots; ++s)
        if (pool.end[s] - pool.first[s] > most) {
            most = pool.end[s] - pool.first[s];
            victim = s;
        }
    return victim < 0 ? -1 : --pool.end[victim];
}

/* Take and compute parts of the current run until none is left, from segment `slot` first (called
 * with pool.lock held; returns with it held). */
static void pool_take_parts(int64_t slot) {
    const pool_fn fn = pool.fn;
    void* ctx = pool.ctx;
    const int64_t parts = pool.parts;
    for (int64_t part; (part = pool_next_part(slot)) >= 0;) {
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
        pool_take_parts(pool.joined < pool.slots ? pool.joined++ : -1);
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
    pool.parts = pool.finished = pool.slots = pool.joined = 0;
}

/* fn(ctx, part, parts) for part in [0, parts) (fn: a pool_fn), on up to the thread count's threads when
 * the pool is free; else all on the calling thread. Returns 0. */
int threads_run(const void* fn_address, void* ctx, int64_t parts) {
    const pool_fn fn = (pool_fn)(intptr_t)fn_address;
    const int64_t threads = threads_get(), want = (parts < threads ? parts : threads) - 1;
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
        pool.slots = (pool.started < want ? pool.started : want) + 1;  /* the caller's (0), one per worker */
        for (int64_t t = 0; t < pool.slots; ++t) {
            pool.first[t] = parts * t / pool.slots;
            pool.end[t] = parts * (t + 1) / pool.slots;
        }
        pool.joined = 1;
        __atomic_store_n(&pool.finished, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&pool.round, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&pool.wake);
        pool_take_parts(0);
        pool_poll(0, 0);
        while (pool.finished < parts || pool.active) pthread_cond_wait(&pool.done, &pool.lock);
        pool.fn = NULL;
        pthread_mutex_unlock(&pool.lock);
        pthread_mutex_unlock(&pool.busy);
        return 0;
    }
    for (int64_t p = 0; p < parts; ++p) fn(ctx, p, parts);
    return 0;
}

