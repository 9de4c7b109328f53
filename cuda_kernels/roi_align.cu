// roi_align.cu -- RoiAlign (opset 10 and 16), one thread per output element.
//
// Follows the ONNX reference implementation step by step, in float32 and in the same order of
// operations (modules are compiled without FMA contraction), so results match it closely:
//  * roi corners are scaled by spatial_scale and shifted by -0.5 for "half_pixel" (opset 16's
//    default); "output_half_pixel" (opset 10's only mode) does not shift but makes the roi at least 1x1;
//  * each bin takes sampling_ratio x sampling_ratio samples, or ceil(roi size / output size) per axis
//    when sampling_ratio is 0;
//  * a sample outside [-1, H] x [-1, W] contributes 0; others are clamped into the image and
//    interpolated bilinearly;
//  * "avg" averages the interpolated samples; "max" takes the maximum over samples of the maximum of
//    the four WEIGHTED corner values (the reference's definition, not the max of interpolations).
#include "common.cuh"

template <class T>
__global__ void roi_align(const T* __restrict__ x, const T* __restrict__ rois, const i64* __restrict__ batch_indices,
                          T* __restrict__ y, i64 total, int N, int C, int H, int W, int PH, int PW, int sampling_ratio,
                          float spatial_scale, int half_pixel, int mode_max) {
    GRID_STRIDE_LOOP(i, total) {
        i64 r = i;
        const int pw = (int)(r % PW); r /= PW;
        const int ph = (int)(r % PH); r /= PH;
        const int c = (int)(r % C);
        const i64 n = r / C;
        const i64 b = batch_indices[n];
        if (b < 0 || b >= N || H <= 0 || W <= 0) {  // invalid batch index or empty image: no samples
            y[i] = from_float<T>(0.0f);
            continue;
        }
        const T* roi = rois + n * 4;
        const float offset = half_pixel ? 0.5f : 0.0f;
        const float start_w = to_float(roi[0]) * spatial_scale - offset;
        const float start_h = to_float(roi[1]) * spatial_scale - offset;
        const float end_w = to_float(roi[2]) * spatial_scale - offset;
        const float end_h = to_float(roi[3]) * spatial_scale - offset;
        float roi_w = end_w - start_w, roi_h = end_h - start_h;
        if (!half_pixel) {
            roi_w = fmaxf(roi_w, 1.0f);
            roi_h = fmaxf(roi_h, 1.0f);
        }
        const float bin_h = roi_h / (float)PH, bin_w = roi_w / (float)PW;
        const int grid_h = sampling_ratio > 0 ? sampling_ratio : (int)ceilf(roi_h / (float)PH);
        const int grid_w = sampling_ratio > 0 ? sampling_ratio : (int)ceilf(roi_w / (float)PW);
        const int count = max(grid_h * grid_w, 1);
        const T* img = x + (b * C + c) * (i64)H * W;

        float out = 0.0f;
        bool first = true;
        for (int iy = 0; iy < grid_h; ++iy) {
            const float yy = start_h + (float)ph * bin_h + ((float)iy + 0.5f) * bin_h / (float)grid_h;
            for (int ix = 0; ix < grid_w; ++ix) {
                const float xx = start_w + (float)pw * bin_w + ((float)ix + 0.5f) * bin_w / (float)grid_w;
                float v = 0.0f;  // an out-of-range sample contributes 0
                if (!(yy < -1.0f || yy > (float)H || xx < -1.0f || xx > (float)W)) {
                    float sy = fmaxf(yy, 0.0f), sx = fmaxf(xx, 0.0f);
                    int y_low = (int)sy, x_low = (int)sx, y_high, x_high;
                    if (y_low >= H - 1) {
                        y_high = y_low = H - 1;
                        sy = (float)y_low;
                    } else {
                        y_high = y_low + 1;
                    }
                    if (x_low >= W - 1) {
                        x_high = x_low = W - 1;
                        sx = (float)x_low;
                    } else {
                        x_high = x_low + 1;
                    }
                    const float ly = sy - (float)y_low, lx = sx - (float)x_low;
                    const float hy = 1.0f - ly, hx = 1.0f - lx;
                    const float v1 = hy * hx * to_float(img[y_low * W + x_low]);
                    const float v2 = hy * lx * to_float(img[y_low * W + x_high]);
                    const float v3 = ly * hx * to_float(img[y_high * W + x_low]);
                    const float v4 = ly * lx * to_float(img[y_high * W + x_high]);
                    v = mode_max ? fmaxf(fmaxf(v1, v2), fmaxf(v3, v4)) : v1 + v2 + v3 + v4;
                }
                if (mode_max) {
                    out = first ? v : fmaxf(out, v);
                    first = false;
                } else {
                    out += v;
                }
            }
        }
        if (!mode_max) out = out / (float)count;
        y[i] = from_float<T>(out);
    }
}
