// cuda_emu.h -- a small CPU emulation of the CUDA execution model, enough to run gpuops' kernels.
//
// The launcher (gpuops/emulator/__init__.py) compiles a kernel file as C++20 with g++ after this header,
// so the very same source that NVRTC compiles for the GPU runs on the CPU. What it provides:
//
//  * the qualifiers (__global__, __device__, __host__, __forceinline__, __restrict__) as no-ops;
//  * dim3 / uint3 and the built-in variables threadIdx, blockIdx, blockDim, gridDim;
//  * __syncthreads() as a REAL barrier. Each block's threads are fibers (ucontext) on one OS thread:
//    a fiber runs until it reaches a barrier or returns, then the next fiber runs. When every fiber of
//    the block waits at the barrier, all of them are released. A thread that reads what another
//    thread wrote before the barrier therefore sees it, and one that reads it without a barrier sees
//    stale data, as on a GPU. Divergent barriers (some threads returned, others wait) are reported
//    as errors instead of hanging or being silently accepted.
//  * __shared__ as `static thread_local`: a worker OS thread runs ONE block at a time, to completion,
//    so a function-local static in that worker's storage is exactly "one copy per resident block,
//    shared by its threads". Several workers run different blocks in parallel, each with its own copy.
//    Like on a GPU, shared memory is not initialised at block start (it keeps the previous block's
//    values). Only statically sized __shared__ arrays are supported (no `extern __shared__`).
//  * atomics (atomicAdd/Sub/Max/Min/Exch/CAS/Or/And) on std::atomic_ref, so blocks on different
//    workers really race and the atomics really serialise them;
//  * the math intrinsics gpuops' kernels use, and __half as _Float16 (conversions round to nearest
//    even, like __float2half).
//
// Not emulated: warps (no __shfl*, no warp-synchronous code: use __syncthreads), dynamic shared
// memory, streams, textures, device-side printf ordering guarantees.

#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static thread_local
#define __constant__

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

// The built-in variables: per OS thread, switched by the scheduler before it resumes a fiber.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace cuda_emu {

enum class State { ready, at_barrier, done };

constexpr size_t kStackBytes = 64 * 1024;

// A fiber's stack, with an inaccessible guard page below it: an overflow faults instead of
// silently overwriting another thread's stack.
struct Stack {
    char* base = nullptr;
    size_t guard = 0;
    Stack() {
        guard = size_t(sysconf(_SC_PAGESIZE));
        void* p = mmap(nullptr, guard + kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return;
        mprotect(p, guard, PROT_NONE);
        base = static_cast<char*>(p);
    }
    ~Stack() {
        if (base) munmap(base, guard + kStackBytes);
    }
    Stack(const Stack&) = delete;
    Stack& operator=(const Stack&) = delete;
    char* top() const { return base + guard; }  // the usable region starts above the guard page
};

struct Fiber {
    ucontext_t ctx;
    std::unique_ptr<Stack> stack;
    uint3 tid;
    State state;
};

// One worker's view of the block it is running.
struct BlockRun {
    ucontext_t scheduler;
    std::vector<Fiber> fibers;
    size_t current = 0;
    void (*body)(void*) = nullptr;  // runs the kernel for the current thread
    void* body_arg = nullptr;
    int predicate_sum = 0;  // for __syncthreads_count / _or / _and
    int barrier_result = 0;
};

inline thread_local BlockRun* block_run = nullptr;

inline void fiber_entry() {
    BlockRun* b = block_run;
    b->body(b->body_arg);
    b->fibers[b->current].state = State::done;
    // returning resumes uc_link, the scheduler
}

// Called by a fiber at a barrier: record the predicate, yield to the scheduler, read the block result.
inline int barrier(int predicate) {
    BlockRun* b = block_run;
    Fiber& f = b->fibers[b->current];
    b->predicate_sum += predicate ? 1 : 0;
    f.state = State::at_barrier;
    swapcontext(&f.ctx, &b->scheduler);
    return b->barrier_result;
}

// Runs every thread of one block to completion. Returns an error message, or "" on success.
inline std::string run_block(BlockRun& b) {
    const size_t n = b.fibers.size();
    for (size_t t = 0; t < n; ++t) {
        Fiber& f = b.fibers[t];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack->top();
        f.ctx.uc_stack.ss_size = kStackBytes;
        f.ctx.uc_link = &b.scheduler;
        makecontext(&f.ctx, fiber_entry, 0);
        f.state = State::ready;
    }
    for (;;) {
        size_t waiting = 0, done = 0;
        b.predicate_sum = 0;
        for (size_t t = 0; t < n; ++t) {
            Fiber& f = b.fibers[t];
            if (f.state == State::ready) {
                b.current = t;
                threadIdx = f.tid;
                swapcontext(&b.scheduler, &f.ctx);
            }
            if (f.state == State::at_barrier) ++waiting;
            if (f.state == State::done) ++done;
        }
        if (done == n) return "";
        if (done) {
            return "divergent __syncthreads(): " + std::to_string(waiting) + " thread(s) of block (" +
                   std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
                   std::to_string(blockIdx.z) + ") wait at a barrier that " + std::to_string(done) +
                   " thread(s) that already returned will never reach";
        }
        b.barrier_result = b.predicate_sum;  // every thread arrived: release them all
        for (auto& f : b.fibers) f.state = State::ready;
    }
}

// A launch: blocks are numbered x fastest, handed out to `workers` OS threads through a counter.
struct Launch {
    dim3 grid, block;
    void (*body)(void*);
    void* arg;
    std::atomic<unsigned long long> next{0};
    std::atomic<bool> failed{false};
    std::string error;
    std::atomic_flag error_lock = ATOMIC_FLAG_INIT;

    void worker() {
        BlockRun b;
        b.body = body;
        b.body_arg = arg;
        const size_t nthreads = size_t(block.x) * block.y * block.z;
        b.fibers.resize(nthreads);
        size_t t = 0;
        for (unsigned z = 0; z < block.z; ++z)
            for (unsigned y = 0; y < block.y; ++y)
                for (unsigned x = 0; x < block.x; ++x, ++t) {
                    b.fibers[t].stack.reset(new Stack());
                    if (!b.fibers[t].stack->base) return fail("cannot allocate fiber stacks (mmap failed)");
                    b.fibers[t].tid = uint3{x, y, z};
                }
        BlockRun* saved = block_run;
        block_run = &b;
        blockDim = block;
        gridDim = grid;
        const unsigned long long nblocks = (unsigned long long)grid.x * grid.y * grid.z;
        for (unsigned long long i; !failed.load() && (i = next.fetch_add(1)) < nblocks;) {
            blockIdx = uint3{unsigned(i % grid.x), unsigned(i / grid.x % grid.y),
                             unsigned(i / grid.x / grid.y)};
            std::string err = run_block(b);
            if (!err.empty()) fail(err);
        }
        block_run = saved;
    }

    void fail(const std::string& err) {  // the first error wins; the other workers stop
        while (error_lock.test_and_set()) {
        }
        if (!failed.load()) error = err;
        failed = true;
        error_lock.clear();
    }
};

inline int worker_count(unsigned long long nblocks) {
    static const int configured = [] {
        const char* env = std::getenv("GPUOPS_EMU_WORKERS");
        int n = env ? std::atoi(env) : 0;
        if (n <= 0) n = std::min(4, int(std::max(1u, std::thread::hardware_concurrency())));
        return n;
    }();
    return int(std::min<unsigned long long>(configured, nblocks));
}

// Runs `body(arg)` as the kernel of every thread of every block; 0 on success, else -1 and a message.
inline int run(dim3 grid, dim3 block, void (*body)(void*), void* arg, char* err, int errlen) {
    Launch l;
    l.grid = grid;
    l.block = block;
    l.body = body;
    l.arg = arg;
    const unsigned long long nblocks = (unsigned long long)grid.x * grid.y * grid.z;
    const int workers = worker_count(nblocks);
    if (workers <= 1) {
        l.worker();
    } else {
        std::vector<std::thread> pool;
        for (int w = 0; w < workers; ++w) pool.emplace_back([&l] { l.worker(); });
        for (auto& th : pool) th.join();
    }
    if (l.failed) {
        std::snprintf(err, size_t(errlen), "%s", l.error.c_str());
        return -1;
    }
    return 0;
}

// -- typed launch: unpack `void** args` by the kernel's parameter types -------------------------

template <class... A>
struct Bound {
    void (*kernel)(A...);
    std::tuple<A...> args;
    static void call(void* self) {
        auto* b = static_cast<Bound*>(self);
        std::apply(b->kernel, b->args);
    }
};

template <class... A, size_t... I>
int launch_impl(void (*kernel)(A...), dim3 grid, dim3 block, void** args, char* err, int errlen,
                std::index_sequence<I...>) {
    Bound<A...> bound{kernel, std::tuple<A...>(*static_cast<std::remove_cv_t<A>*>(args[I])...)};
    return run(grid, block, &Bound<A...>::call, &bound, err, errlen);
}

template <class... A>
int launch(void (*kernel)(A...), dim3 grid, dim3 block, void** args, char* err, int errlen) {
    return launch_impl(kernel, grid, block, args, err, errlen, std::index_sequence_for<A...>{});
}

// A parameter's description for the Python side's argument check: "f4", "i8", "u1", "b1", or for a
// pointer "p" + ("c" if it points to const) + ":" + the pointee's description ("v0" for void).
template <class T>
std::string describe_value() {
    if constexpr (std::is_void_v<T>) return "v0";
    else if constexpr (std::is_same_v<T, bool>) return "b1";
    else if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, _Float16>)
        return "f" + std::to_string(sizeof(T));
    else if constexpr (std::is_integral_v<T>)
        return (std::is_signed_v<T> ? "i" : "u") + std::to_string(sizeof(T));
    else return "s" + std::to_string(sizeof(T));  // a struct passed by value
}

template <class T>
std::string describe() {
    if constexpr (std::is_pointer_v<T>) {
        using P = std::remove_pointer_t<T>;
        return std::string("p") + (std::is_const_v<P> ? "c" : "") + ":" + describe_value<std::remove_cv_t<P>>();
    } else {
        return describe_value<std::remove_cv_t<T>>();
    }
}

template <class... A>
const char* signature(void (*)(A...)) {
    static const std::string s = [] {
        std::string out;
        ((out += describe<A>() + ","), ...);
        if (!out.empty()) out.pop_back();
        return out;
    }();
    return s.c_str();
}

}  // namespace cuda_emu

// -- synchronisation ----------------------------------------------------------------------------

inline void __syncthreads() { cuda_emu::barrier(1); }
inline int __syncthreads_count(int p) { return cuda_emu::barrier(p); }
inline int __syncthreads_or(int p) { return cuda_emu::barrier(p) != 0; }
inline int __syncthreads_and(int p) { return cuda_emu::barrier(p) == int(blockDim.x * blockDim.y * blockDim.z); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// -- atomics (all return the old value, as in CUDA) ---------------------------------------------

template <class T>
inline T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
template <class T>
inline T atomicSub(T* p, T v) { return std::atomic_ref<T>(*p).fetch_sub(v); }
template <class T>
inline T atomicExch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v); }
template <class T>
inline T atomicOr(T* p, T v) { return std::atomic_ref<T>(*p).fetch_or(v); }
template <class T>
inline T atomicAnd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_and(v); }
template <class T>
inline T atomicCAS(T* p, T expected, T desired) {
    std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired);
    return expected;  // the old value, whether or not the swap happened
}
template <class T>
inline T atomicMax(T* p, T v) {
    std::atomic_ref<T> a(*p);
    T old = a.load();
    while (old < v && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}
template <class T>
inline T atomicMin(T* p, T v) {
    std::atomic_ref<T> a(*p);
    T old = a.load();
    while (v < old && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}

// -- math intrinsics ----------------------------------------------------------------------------
// The C functions (fminf, fmaxf, expf, rintf, floorf, ceilf, sqrtf, tanhf, fabsf, ...) come from
// <cmath>; CUDA's fast/explicitly rounded variants map to the IEEE operations.

template <class T>
inline T min(T a, T b) { return b < a ? b : a; }
template <class T>
inline T max(T a, T b) { return a < b ? b : a; }

inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline int __float2int_rn(float x) { return int(rintf(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline int __float2int_rd(float x) { return int(floorf(x)); }
inline int __float2int_ru(float x) { return int(ceilf(x)); }
inline long long __float2ll_rn(float x) { return (long long)rintf(x); }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline unsigned int __float_as_uint(float x) { unsigned int i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x ? __builtin_clz(unsigned(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
template <class T>
inline T __ldg(const T* p) { return *p; }

// -- half precision (what <cuda_fp16.h> provides, the subset the kernels use) -------------------

using __half = _Float16;
inline float __half2float(__half h) { return float(h); }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline unsigned short __half_as_ushort(__half h) { unsigned short u; std::memcpy(&u, &h, 2); return u; }
inline __half __ushort_as_half(unsigned short u) { __half h; std::memcpy(&h, &u, 2); return h; }
