// Kernels that probe the emulator itself: barrier semantics, per-block shared memory, atomics.

// Each thread writes its index to shared memory, waits at the barrier, then reads its neighbour's
// slot. Correct only if __syncthreads() really waits for every thread of the block.
template <int N>
__global__ void rotate_through_shared(const int* __restrict__ in, int* __restrict__ out) {
    __shared__ int slots[N];
    const int t = threadIdx.x;
    const int base = blockIdx.x * N;
    slots[t] = in[base + t];
    __syncthreads();
    out[base + t] = slots[(t + 1) % N];
}

// The same without the barrier: wrong results prove the emulator does not serialise by accident.
template <int N>
__global__ void rotate_without_barrier(const int* __restrict__ in, int* __restrict__ out) {
    __shared__ int slots[N];
    const int t = threadIdx.x;
    const int base = blockIdx.x * N;
    slots[t] = in[base + t];
    out[base + t] = slots[(t + 1) % N];
}

// A block-wide tree sum in shared memory (log2(N) barriers), plus an atomicAdd across blocks.
// out[block] = the block's sum; total[0] += every element.
template <int N>
__global__ void block_sum(const float* __restrict__ in, float* __restrict__ out, float* __restrict__ total,
                          unsigned long long* __restrict__ hits, int n) {
    __shared__ float s[N];
    const int i = blockIdx.x * N + threadIdx.x;
    s[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int stride = N / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[blockIdx.x] = s[0];
        atomicAdd(total, s[0]);
    }
    if (i < n) atomicAdd(hits, 1ull);
}

// Writes every built-in index, 3-D grid and block.
__global__ void coordinates(int* __restrict__ out) {
    const int bid = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    const int nthreads = blockDim.x * blockDim.y * blockDim.z;
    int* o = out + 6 * (bid * nthreads + tid);
    o[0] = blockIdx.x; o[1] = blockIdx.y; o[2] = blockIdx.z;
    o[3] = threadIdx.x; o[4] = threadIdx.y; o[5] = threadIdx.z;
}

// Thread 0 returns early while the others wait at a barrier: undefined in CUDA, an error here.
__global__ void divergent_barrier(int* out) {
    if (threadIdx.x == 0) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

// __syncthreads_count / __syncthreads_or aggregate a predicate over the block.
__global__ void barrier_votes(const int* __restrict__ pred, int* __restrict__ out) {
    const int c = __syncthreads_count(pred[threadIdx.x]);
    const int o = __syncthreads_or(pred[threadIdx.x]);
    if (threadIdx.x == 0) { out[0] = c; out[1] = o; }
}
