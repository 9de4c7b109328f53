/* The persistent thread pool of the native CPU kernels: one per process, in cpu_kernels/threads.c, whose
 * functions every other kernel file reaches through pointers bound when Python loads it
 * (<stem>_bind_threads): the kernels of one run follow one another closely, and a pool per file left the
 * workers of the last file's pool polling beside the next one's. A kernel splits its work into parts --
 * independent outputs, so that the result is the same bits for any number of parts and whichever thread
 * computes one -- and pool_run() hands them out: each thread of the run (the caller and its workers) has
 * a contiguous segment of the parts, which it takes in order, then takes the last untaken part of the
 * segment with most left until none is left, so a worker that the OS does not schedule in time (cores
 * loaded by other processes, or by a BLAS's spinning threads) costs nothing: the others take its parts. Parts
 * are several per thread for the same reason. Workers are started on first need; between calls they
 * poll for POOL_POLL_NS, yielding the core to any other thread that wants it, then sleep on a condition
 * variable; the caller waits for the parts taken by workers the same way. (Waking a sleeping thread
 * takes 50-100 us on a VM, as long as a small conv: a program's kernels follow one another closely, so
 * a worker that slept after each would miss most of them.) The thread count is set from Python
 * (gpuops.native.set_threads, through threads_set). A second caller while the pool is busy (another
 * Python thread in another session's run, or a kernel called from a part: Winograd's products) runs all
 * its parts itself. After fork() the child starts with no workers. A file not bound (threads.c could not
 * be built) runs its parts on the calling thread. */
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

typedef int (*pool_run_fn)(const void* fn, void* ctx, int64_t parts);
typedef int64_t (*pool_threads_fn)(void);
static pool_run_fn pool_shared_run;  /* threads.c's threads_run and threads_get, once bound */
static pool_threads_fn pool_shared_threads;

static inline int64_t pool_get_threads(void) {
    const pool_threads_fn get = __atomic_load_n(&pool_shared_threads, __ATOMIC_ACQUIRE);
    return get ? get() : 1;
}

/* fn(ctx, part, parts) for part in [0, parts), on up to the thread count's threads when the pool is free. */
static inline void pool_run(pool_fn fn, void* ctx, int64_t parts) {
    const pool_run_fn run = __atomic_load_n(&pool_shared_run, __ATOMIC_ACQUIRE);
    if (parts > 1 && run) {
        run((const void*)(intptr_t)fn, ctx, parts);
        return;
    }
    for (int64_t p = 0; p < parts; ++p) fn(ctx, p, parts);
}

/* The body of each file's <stem>_bind_threads(run, get): threads.c's threads_run and threads_get. */
static inline int pool_bind(const void* run, const void* get) {
    __atomic_store_n(&pool_shared_threads, (pool_threads_fn)(intptr_t)get, __ATOMIC_RELEASE);
    __atomic_store_n(&pool_shared_run, (pool_run_fn)(intptr_t)run, __ATOMIC_RELEASE);
    return 0;
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

/* [lo, hi) of part `part` of `parts` over n units, boundaries at multiples of `align`. */
static inline void pool_range(int64_t n, int64_t align, int64_t part, int64_t parts, int64_t* lo, int64_t* hi) {
    const int64_t blocks = (n + align - 1) / align;
    const int64_t b0 = blocks * part / parts, b1 = blocks * (part + 1) / parts;
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}
