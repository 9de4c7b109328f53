// conv.cu -- convolution building blocks. The GEMM itself is cupy.matmul (cuBLAS) in
// gpuops/ops/cuda/conv.py; these kernels reshape data around it and fuse the epilogue.
//
// Every convolution is treated as 3-D (1-D and 2-D ones get unit leading spatial dims), with
//   x   [N, C, D, H, W]              input
//   col [C * KD*KH*KW, N, OD*OH*OW]  im2col matrix: channel-major rows (so it splits into groups as
//                                    [G, C/G * K, N * O]), each row holding every image's outputs, so
//                                    that one GEMM per group covers the whole batch
// and, along each spatial axis, output o reads input  i = o * stride - pad_begin + k * dilation
// (pads may be negative, i.e. cropping, or larger than the input: such taps read zeros).
// The GEMM's result is [M, N, O]; conv_epilogue writes it out as y [N, M, O].
#include "common.cuh"

// col[c, k, n, o] = x[n, c, i(o, k)] or 0 outside the input.
template <class T>
__global__ void im2col(const T* __restrict__ x, T* __restrict__ col, i64 total, int N, int C, int D, int H, int W,
                       int OD, int OH, int OW, int KD, int KH, int KW, int SD, int SH, int SW, int PD, int PH,
                       int PW, int DD, int DH, int DW) {
    GRID_STRIDE_LOOP(i, total) {
        i64 r = i;
        const int ow = (int)(r % OW); r /= OW;
        const int oh = (int)(r % OH); r /= OH;
        const int od = (int)(r % OD); r /= OD;
        const int n = (int)(r % N); r /= N;
        const int kw = (int)(r % KW); r /= KW;
        const int kh = (int)(r % KH); r /= KH;
        const int kd = (int)(r % KD); r /= KD;
        const i64 nc = (i64)n * C + r;
        const i64 id = (i64)od * SD - PD + (i64)kd * DD;
        const i64 ih = (i64)oh * SH - PH + (i64)kh * DH;
        const i64 iw = (i64)ow * SW - PW + (i64)kw * DW;
        T v = from_float<T>(0.0f);
        if (id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W) v = x[((nc * D + id) * H + ih) * W + iw];
        col[i] = v;
    }
}

// The transpose of im2col as a gather (no atomics, deterministic): for ConvTranspose,
//   y[n, c, o] = act(bias[c] + sum over taps k with o = i * stride - pad + k * dilation of col[n, c, k, i])
// where col [N, C * K, ID*IH*IW] = W^T x is the GEMM result and y [N, C, D, H, W] the output.
template <class T>
__global__ void col2im(const T* __restrict__ col, const T* __restrict__ bias, T* __restrict__ y, i64 total, int C,
                       int D, int H, int W, int ID, int IH, int IW, int KD, int KH, int KW, int SD, int SH, int SW,
                       int PD, int PH, int PW, int DD, int DH, int DW, int act, float alpha, float beta) {
    const i64 I = (i64)ID * IH * IW;
    GRID_STRIDE_LOOP(i, total) {
        i64 r = i;
        const int w = (int)(r % W); r /= W;
        const int h = (int)(r % H); r /= H;
        const int d = (int)(r % D); r /= D;
        const i64 nc = r;  // n * C + c
        const T* base = col + nc * KD * KH * KW * I;
        float acc = 0.0f;
        for (int kd = 0; kd < KD; ++kd) {
            const i64 td = (i64)d + PD - (i64)kd * DD;
            if (td < 0 || td % SD) continue;
            const i64 id = td / SD;
            if (id >= ID) continue;
            for (int kh = 0; kh < KH; ++kh) {
                const i64 th = (i64)h + PH - (i64)kh * DH;
                if (th < 0 || th % SH) continue;
                const i64 ih = th / SH;
                if (ih >= IH) continue;
                for (int kw = 0; kw < KW; ++kw) {
                    const i64 tw = (i64)w + PW - (i64)kw * DW;
                    if (tw < 0 || tw % SW) continue;
                    const i64 iw = tw / SW;
                    if (iw >= IW) continue;
                    const i64 k = ((i64)kd * KH + kh) * KW + kw;
                    acc += to_float(base[k * I + (id * IH + ih) * IW + iw]);
                }
            }
        }
        if (bias) acc += to_float(bias[nc % C]);
        y[i] = from_float<T>(activate(acc, act, alpha, beta));
    }
}

// y[n, m, s] = act(t[m, n, s] + bias[m] + z[n, m, s]), from the GEMM's result t [M, N, inner]
// (`inner` = spatial size). With N = 1, t may be y itself (each element is read, then written, by
// one thread). bias and z (FusedConv's residual input, shaped as y) may be null.
template <class T>
__global__ void conv_epilogue(const T* t, const T* __restrict__ bias, const T* __restrict__ z, T* y, i64 total,
                              int N, int M, i64 inner, int act, float alpha, float beta) {
    GRID_STRIDE_LOOP(i, total) {
        const i64 s = i % inner, nm = i / inner;
        const int m = (int)(nm % M);
        float v = to_float(t[((i64)m * N + nm / M) * inner + s]);
        if (bias) v += to_float(bias[m]);
        if (z) v += to_float(z[i]);
        y[i] = from_float<T>(activate(v, act, alpha, beta));
    }
}

// Depthwise convolution (group == C, each input channel feeds M / C output channels), direct:
//   y[n, m, o] = act(bias[m] + sum_k x[n, m / (M / C), i(o, k)] * w[m, 0, k]).
template <class T>
__global__ void depthwise_conv(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                               T* __restrict__ y, i64 total, int C, int M, int D, int H, int W, int OD, int OH,
                               int OW, int KD, int KH, int KW, int SD, int SH, int SW, int PD, int PH, int PW,
                               int DD, int DH, int DW, int act, float alpha, float beta) {
    const int multiplier = M / C;
    GRID_STRIDE_LOOP(i, total) {
        i64 r = i;
        const int ow = (int)(r % OW); r /= OW;
        const int oh = (int)(r % OH); r /= OH;
        const int od = (int)(r % OD); r /= OD;
        const int m = (int)(r % M);
        const i64 n = r / M;
        const T* xc = x + (n * C + m / multiplier) * D * H * W;
        const T* wm = w + (i64)m * KD * KH * KW;
        float acc = 0.0f;
        for (int kd = 0; kd < KD; ++kd) {
            const i64 id = (i64)od * SD - PD + (i64)kd * DD;
            if (id < 0 || id >= D) continue;
            for (int kh = 0; kh < KH; ++kh) {
                const i64 ih = (i64)oh * SH - PH + (i64)kh * DH;
                if (ih < 0 || ih >= H) continue;
                for (int kw = 0; kw < KW; ++kw) {
                    const i64 iw = (i64)ow * SW - PW + (i64)kw * DW;
                    if (iw < 0 || iw >= W) continue;
                    acc += to_float(xc[(id * H + ih) * W + iw]) * to_float(wm[(kd * KH + kh) * KW + kw]);
                }
            }
        }
        if (bias) acc += to_float(bias[m]);
        y[i] = from_float<T>(activate(acc, act, alpha, beta));
    }
}
