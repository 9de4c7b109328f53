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
    """Measured against the planned native GEMM conv (one core of the AVX-512 Xeon, 2026-11-28; the
    products of both run the same packed GEMM): 0.67-0.8x of its time on 28x28 and larger maps from 64
    input channels (from 32 with at most 64 output channels: the GEMM's narrow products), and on 14x14
    maps from 128; on 13x13-14x14 maps of 48-64 channels and 27x27 maps of 32 it lost (1.1-1.6x): their
    16 products have too short a K for the transforms' cost. With 8 lanes (the same Xeon, kernels built
    for x86-64-v3, 2026-11-28) it also wins on 13x13-14x14 maps from 64 input channels: 0.75-0.9x of the
    GEMM conv's time (inception_v1's 96 -> 208 and 64 -> 96 convs; end to end inception_v2 0.95x)."""
    tiles = N * math.ceil(out[0] / 2) * math.ceil(out[1] / 2)
    fewest = 64 if native.vector_lanes() == 8 else 128  # input channels on 13x13-14x14 maps
    return M >= 16 and ((C >= fewest and tiles >= 36) or (tiles >= 196 and (C >= 64 or (C >= 32 and M <= 64))))


def weights(W):
    """``U = G g G^T`` per (out, in) channel pair, as ``(16, M, C)``: tile position ``4u + v``. A session
    transforms a weight once (kept on its plan step: :mod:`.conv`)."""
    M, C = W.shape[:2]
    U = np.einsum("ui,mcij,vj->uvmc", _G, W.astype(np.float64), _G)
    return np.ascontiguousarray(U.reshape(16, M, C).astype(W.dtype))
