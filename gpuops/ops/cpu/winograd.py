"""Winograd convolution F(2x2, 3x3) on the CPU: a 3x3 stride-1 conv in 4/9 of the GEMM flops.

Each 2x2 output tile is ``A^T [(G g G^T) * (B^T d B)] A`` over a 4x4 input tile ``d`` (Lavin & Gray,
*Fast Algorithms for Convolutional Neural Networks*, 2015): for the 16 tile positions, 16 GEMMs
``(M, C) @ (C, tiles)``, where im2col needs one GEMM with nine times the inner size. The transforms
(``cpu_kernels/winograd.c``) hold only 0, +-1 and +-1/2: the result differs from a direct float32 sum
by rounding only. In NumPy the transforms cost as much as the flops they save (measured), so this path
exists only with the native kernels.

The conv runs planned (``winograd_f2k3_planned_f32``, from :func:`gpuops.ops.cpu.conv._plan`): one
native call whose products run the native GEMM over the transformed weight, packed once per session for
a constant weight (a BLAS would pack it on every call) and per call for others, a block of tile rows at
a time that fits L2.
"""

from __future__ import annotations

import math

import numpy as np

from ... import native

_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])



def applies(X, W, kernel, strides, dilations, group, out) -> bool:
    """Whether the Winograd path runs this conv: native kernels present, float32, 3x3, stride and
    dilation 1, no groups, and enough channels and tiles that 16 GEMMs on a quarter of the columns
    beat one GEMM of nine times the inner size (measured on one core; see :func:`pays`)."""
    return (X.dtype == W.dtype == np.float32 and X.ndim == 4 and list(kernel) == [3, 3] and group == 1
            and list(strides) == [1, 1] and list(dilations) == [1, 1]
            and pays(X.shape[1], W.shape[0], X.shape[0], out)
            and native.function("winograd_f2k3_input_f32") is not None)


def pays(C: int, M: int, N: int, out) -> bool:
    """Whether F(2x2, 3x3) beats the planned native GEMM conv, by the tiles of its output and the product
    of its channels. Measured against that conv (the products of both run the same packed GEMM) on one
    core of the AVX-512 Xeon, 2026-11-28, over 7x7 to 28x28 maps of 32-256 input channels and half to twice
    as many outputs: on 28x28 maps and larger it won everywhere (0.48-0.82x of the time); on 20x20 from 32
    input and output channels (0.65-0.93x; 32 -> 16: 1.0x); on 10x10 to 14x14 maps where the channels'
    product reaches 96 x 96 (0.63-0.91x; below it 0.93-1.9x); on 7x7 maps nowhere (1.1-2x). With 8 lanes
    (the same Xeon, kernels built for x86-64-v3) the GEMM conv is slower and Winograd wins earlier: on
    13x13-14x14 maps from a product of 32 x 64 (0.59-0.90x), on 10x10 from 64 x 64 (0.62-0.87x)."""
    tiles = N * math.ceil(out[0] / 2) * math.ceil(out[1] / 2)
    if C < 32 or M < 16 or tiles < 25:
        return False
    if tiles >= 196:
        return True
    if M < 32:  # (20x20 maps: 48 -> 24 channels 0.65x; 14x14: 128 -> 16 1.03-1.35x)
        return tiles >= 100 and C * M >= 1152
    if tiles >= 100:
        return True
    wide = native.vector_lanes() == 16
    return C * M >= (9216 if wide else 2048 if tiles >= 49 else 4096)


def weights(W):
    """``U = G g G^T`` per (out, in) channel pair, as ``(16, M, C)``: tile position ``4u + v``. A session
    transforms a weight once (kept on its plan step: :mod:`.conv`)."""
    M, C = W.shape[:2]
    U = np.einsum("ui,mcij,vj->uvmc", _G, W.astype(np.float64), _G)
    return np.ascontiguousarray(U.reshape(16, M, C).astype(W.dtype))
