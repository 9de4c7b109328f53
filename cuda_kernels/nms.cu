// nms.cu -- NonMaxSuppression for every (batch, class) pair at once, without host round trips.
//
// The host sorts each class's boxes by descending score, ties by lower box index (a stable argsort
// of -scores), giving `order` [B*C, N] (int32 box indices). Then:
//  1. nms_mask: for sorted positions p < q, bit q of mask[bc][p] is set when box order[q] overlaps
//     box order[p] with IoU > iou_threshold (strictly). Blocks of NMS_BLOCK x NMS_BLOCK pairs: the
//     block stages its NMS_BLOCK column boxes in shared memory; each thread owns one row.
//  2. nms_select: one thread block per (batch, class) walks the sorted boxes greedily, keeping a
//     bitmask of suppressed positions in global scratch: a box that is not suppressed is selected and
//     ORs its mask row into the suppressed set. It stops at the first box whose score is not above
//     score_threshold (when given) or after max_output_boxes_per_class selections.
//  3. nms_gather writes the [num_selected, 3] output rows (batch, class, box) from per-class offsets.
// The host reads the per-class counts once, to size the output.
//
// Boxes are [y1, x1, y2, x2] with the corners in any diagonal order (center_point_box = 0) or
// [x_center, y_center, width, height] (1). The IoU arithmetic is the reference's, in float32.
#include "common.cuh"

#define NMS_BLOCK 64

// [x_min, x_max, y_min, y_max] of a box, as the reference computes them.
template <class T>
__device__ __forceinline__ void box_extent(const T* b, int center_point_box, float* e) {
    const float b0 = to_float(b[0]), b1 = to_float(b[1]), b2 = to_float(b[2]), b3 = to_float(b[3]);
    if (center_point_box) {
        const float half_w = b2 / 2.0f, half_h = b3 / 2.0f;
        e[0] = b0 - half_w; e[1] = b0 + half_w;
        e[2] = b1 - half_h; e[3] = b1 + half_h;
    } else {
        e[0] = fminf(b1, b3); e[1] = fmaxf(b1, b3);
        e[2] = fminf(b0, b2); e[3] = fmaxf(b0, b2);
    }
}

// The reference's suppress_by_iou(box1, box2), for extents a (candidate) and b (selected box).
__device__ __forceinline__ bool suppresses(const float* a, const float* b, float iou_threshold) {
    const float ix_min = fmaxf(a[0], b[0]), ix_max = fminf(a[1], b[1]);
    if (ix_max <= ix_min) return false;
    const float iy_min = fmaxf(a[2], b[2]), iy_max = fminf(a[3], b[3]);
    if (iy_max <= iy_min) return false;
    const float inter = (ix_max - ix_min) * (iy_max - iy_min);
    if (inter <= 0.0f) return false;
    const float area_a = (a[1] - a[0]) * (a[3] - a[2]);
    const float area_b = (b[1] - b[0]) * (b[3] - b[2]);
    const float uni = area_a + area_b - inter;
    if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return false;
    return inter / uni > iou_threshold;
}

// grid (words, words, n_bc), block NMS_BLOCK; words = ceil(N / 64). mask [n_bc, N, words].
template <class T>
__global__ void nms_mask(const T* __restrict__ boxes, const int* __restrict__ order, u64* __restrict__ mask,
                         int C, int N, int words, int bc_offset, int center_point_box, float iou_threshold) {
    const int row_block = blockIdx.y, col_block = blockIdx.x;
    if (col_block < row_block) return;  // only pairs p < q matter (uniform over the block)
    const int bc = bc_offset + blockIdx.z;
    const T* bboxes = boxes + (i64)(bc / C) * N * 4;
    const int* ord = order + (i64)bc * N;

    __shared__ float cols[NMS_BLOCK * 4];
    const int q0 = col_block * NMS_BLOCK, ncols = min(NMS_BLOCK, N - q0);
    if ((int)threadIdx.x < ncols) box_extent(bboxes + (i64)ord[q0 + threadIdx.x] * 4, center_point_box, &cols[threadIdx.x * 4]);
    __syncthreads();

    const int p = row_block * NMS_BLOCK + threadIdx.x;
    if (p < N) {
        float e[4];
        box_extent(bboxes + (i64)ord[p] * 4, center_point_box, e);
        u64 bits = 0;
        for (int k = (col_block == row_block ? threadIdx.x + 1 : 0); k < ncols; ++k)
            if (suppresses(&cols[k * 4], e, iou_threshold)) bits |= 1ull << k;
        mask[((i64)blockIdx.z * N + p) * words + col_block] = bits;
    }
}

// grid n_bc, any block size. suppressed [n_bc, words] scratch; selected [B*C, max_out] box indices.
template <class T>
__global__ void nms_select(const T* __restrict__ scores, const int* __restrict__ order, const u64* __restrict__ mask,
                           u64* __restrict__ suppressed, i64* __restrict__ selected, int* __restrict__ counts, int N,
                           int words, int bc_offset, int max_out, int use_score_threshold, float score_threshold) {
    const int bc = bc_offset + blockIdx.x;
    const T* s = scores + (i64)bc * N;
    const int* ord = order + (i64)bc * N;
    const u64* m = mask + (i64)blockIdx.x * N * words;
    u64* sup = suppressed + (i64)blockIdx.x * words;
    for (int w = threadIdx.x; w < words; w += blockDim.x) sup[w] = 0;
    __syncthreads();
    // Every thread walks the same positions and takes the same branches (uniform control flow);
    // the barrier after each selection publishes the updated suppressed set.
    int count = 0;
    for (int p = 0; p < N && count < max_out; ++p) {
        const int box = ord[p];
        if (use_score_threshold && !(to_float(s[box]) > score_threshold)) break;  // sorted: the rest are lower
        // Row p only has bits for q > p, so bit p itself is stable while rows are OR-ed in below.
        if ((sup[p / 64] >> (p % 64)) & 1ull) continue;
        if (threadIdx.x == 0) selected[(i64)bc * max_out + count] = box;
        ++count;
        const u64* row = m + (i64)p * words;
        for (int w = p / 64 + threadIdx.x; w < words; w += blockDim.x) sup[w] |= row[w];
        __syncthreads();
    }
    if (threadIdx.x == 0) counts[bc] = count;
}

// out [total, 3] = (batch, class, box) for each selection; offsets = exclusive prefix sum of counts.
__global__ void nms_gather(const i64* __restrict__ selected, const int* __restrict__ counts,
                           const i64* __restrict__ offsets, i64* __restrict__ out, int C, int max_out, i64 n) {
    GRID_STRIDE_LOOP(i, n) {  // n = B * C * max_out
        const i64 bc = i / max_out;
        const int k = (int)(i % max_out);
        if (k < counts[bc]) {
            i64* row = out + (offsets[bc] + k) * 3;
            row[0] = bc / C;
            row[1] = bc % C;
            row[2] = selected[i];
        }
    }
}
