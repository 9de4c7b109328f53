"""The mutants: (name, file, exact old text, new text, pytest arguments, in the quick set).

Kinds: sign flips, off-by-one, wrong axis, dropped attribute, swapped operands, skipped zero point,
wrong epilogue; over the generic ops, the native C kernels (cpu_kernels/), the CUDA kernels
(cuda_kernels/, run by the emulator), optimizer rewrites, the executor, the device memory pool, the
CUDA graph replay and MDF. Tests are named narrowly (a file and ``-k``) so that each mutant costs
seconds; the old text must occur exactly once in its file.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    quick: bool = True


def _m(name, file, old, new, *tests, quick=True):
    return Mutant(name, file, old, new, tuple(tests), quick)


NODE_OF = "tests/mutation/node_modules.py::test_node_cases_of[cpu-"  # + module + "]": one onnx case module
MUTANTS = [
    # -- generic ops (gpuops/ops) -----------------------------------------------------------------
    _m("softmax-sum-over-all-axes", "gpuops/ops/softmax.py",
       "s = xp.sum(e, axis=axes, keepdims=True)", "s = xp.sum(e, axis=None, keepdims=True)",
       NODE_OF + "softmax]"),
    _m("reduce-keepdims-ignored", "gpuops/ops/reduce.py",
       "    if keepdims != 1:  # only 1 keeps", "    if False:  # only 1 keeps",
       NODE_OF + "reducemean]"),
    _m("cumsum-exclusive-off-by-one", "gpuops/ops/reduce.py",
       "body = y[tuple(slice(0, max(n - 1, 0))", "body = y[tuple(slice(1, max(n, 1))",
       NODE_OF + "cumsum]"),
    _m("topk-largest-dropped", "gpuops/ops/reduce.py",
       "order = xp.argsort(keys, axis=ax, descending=bool(largest), stable=True)",
       "order = xp.argsort(keys, axis=ax, descending=True, stable=True)",
       NODE_OF + "topk]"),
    _m("gemm-transB-dropped", "gpuops/ops/linalg.py",
       "b = up(B).T if transB else up(B)", "b = up(B)",
       NODE_OF + "gemm]"),
    _m("gemm-alpha-as-beta", "gpuops/ops/linalg.py",
       "    if alpha != 1.0:\n        y *= alpha", "    if alpha != 1.0:\n        y *= beta",
       NODE_OF + "gemm]"),
    _m("hardsigmoid-alpha-beta-swapped", "gpuops/ops/activation.py",
       "clamp(xp, X * alpha + beta, 0, 1)", "clamp(xp, X * beta + alpha, 0, 1)",
       NODE_OF + "hardsigmoid]"),
    _m("gather-axis-zero", "gpuops/ops/indexing.py",
       "    return xp.take(data, _normalise(xp, indices, n), axis=axis)",
       "    return xp.take(data, _normalise(xp, indices, n), axis=0)",
       NODE_OF + "gather]"),
    _m("layernorm-epsilon-dropped", "gpuops/ops/norm.py",
       "inv_std = 1 / xp.sqrt(var + epsilon)", "inv_std = 1 / xp.sqrt(var)",
       NODE_OF + "layernormalization]"),
    _m("batchnorm-epsilon-squared", "gpuops/ops/norm.py",
       "inv = scale / xp.sqrt(var + epsilon)", "inv = scale / xp.sqrt(var + epsilon * epsilon)",
       NODE_OF + "batch_normalization]"),
    _m("resize-half-pixel-sign", "gpuops/ops/resize.py",
       "    if mode == \"half_pixel\":\n        x = (y + 0.5) / scale - 0.5",
       "    if mode == \"half_pixel\":\n        x = (y + 0.5) / scale + 0.5",
       "tests/ops/test_resize.py"),
    _m("avgpool-count-include-pad-ignored", "gpuops/ops/windows.py",
       "(-b, n + e) if include_pad else (0, n)", "(0, n)",
       "tests/mutation/node_modules.py::test_node_cases_of[cuda-averagepool]"),
    _m("conv-bias-sign", "gpuops/ops/conv.py",
       "        Y = Y + xp.reshape(B, (-1,) + (1,) * (Y.ndim - 2))",
       "        Y = Y - xp.reshape(B, (-1,) + (1,) * (Y.ndim - 2))",
       "tests/contrib/test_nchwc.py", "-k", "conv"),  # the generic conv: nchwc.Conv, FusedConv on cuda
    _m("dynamic-quantize-lstm-zero-point-sign", "gpuops/ops/contrib/quantized.py",
       "w = w - xp.reshape(zero_point, shape).astype(_F32)", "w = w + xp.reshape(zero_point, shape).astype(_F32)",
       "tests/contrib/test_quantized.py", "-k", "lstm"),
    _m("qlinear-add-output-zero-point-skipped", "gpuops/ops/contrib/quantized.py",
       "q = xp.rint(a * ra + b * rb + (0.0 if C_zero_point is None else scalar_f32(xp, C_zero_point)))",
       "q = xp.rint(a * ra + b * rb)",
       "tests/contrib/test_quantized.py", "-k", "qlinear_binary"),
    _m("attention-mask-filter-sign", "gpuops/ops/contrib/transformer.py",
       "mask = attention_mask(xp, mask_index, Bn, S, P, unidirectional, float(mask_filter_value), np.dtype(ct))",
       "mask = attention_mask(xp, mask_index, Bn, S, P, unidirectional, -float(mask_filter_value), np.dtype(ct))",
       "tests/contrib/test_transformer.py", "-k", "attention and not multi and not packed"),
    # -- native C kernels (cpu_kernels/, through the CPU overrides) --------------------------------
    _m("c-conv-epilogue-bias-sign", "cpu_kernels/conv.c",
       "            for (int64_t l = 0; l < a->L; ++l) {\n                const float v = row[l] + b;",
       "            for (int64_t l = 0; l < a->L; ++l) {\n                const float v = row[l] - b;",
       # (tests/test_conv_epilogue.py never reaches it: there the native GEMM adds the bias itself)
       "tests/test_native.py", "-k", "fused_conv_clamps"),
    _m("c-depthwise-relu-bound", "cpu_kernels/conv.c",
       "            const float v = xc[i] * wk + b;\n            const float u = v < lo ? lo : v;",
       "            const float v = xc[i] * wk + b;\n            const float u = v < lo ? v : v;",
       "tests/test_native.py", "-k", "depthwise or fused_conv_clamps"),
    _m("c-pool-count-off-by-one", "cpu_kernels/pool.c",
       "for (int64_t t = 0; t < k; ++t) n += start + t * d >= lo && start + t * d < hi;",
       "for (int64_t t = 0; t < k; ++t) n += start + t * d >= lo && start + t * d <= hi;",
       "tests/test_native.py", "-k", "pool"),
    _m("c-quantize-zero-point-skipped", "cpu_kernels/quantize.c",
       "        const float q = rintf(x[i] / scale) + z;", "        const float q = rintf(x[i] / scale);",
       "tests/test_native_quantize.py"),
    _m("c-dequantize-zero-point-sign", "cpu_kernels/quantize.c",
       "for (int64_t i = 0; i < n; ++i) y[i] = ((float)((const uint8_t*)x)[i] - z) * scale;",
       "for (int64_t i = 0; i < n; ++i) y[i] = ((float)((const uint8_t*)x)[i] + z) * scale;",
       "tests/test_native_quantize.py"),
    _m("c-lstm-forget-input-swapped", "cpu_kernels/rnn.c",
       "cb[j] = f[j] * cb[j] + i[j] * ct[j];", "cb[j] = i[j] * cb[j] + f[j] * ct[j];",
       "tests/test_native_rnn.py"),
    # -- CUDA kernels (cuda_kernels/, on the emulator) ---------------------------------------------
    _m("cu-conv-epilogue-wrong-channel", "cuda_kernels/conv.cu",
       "        if (bias) v += to_float(bias[m]);", "        if (bias) v += to_float(bias[s % M]);",
       "tests/kernels/test_conv_kernels.py", "-k", "emulator"),
    _m("cu-depthwise-bias-dropped", "cuda_kernels/conv.cu",
       "        if (bias) acc += to_float(bias[m]);", "        if (bias) acc += 0.0f;",
       "tests/kernels/test_conv_kernels.py", "-k", "emulator"),
    _m("cu-quantize-zero-point-skipped", "cuda_kernels/quantize.cu",
       "int v = (int)r + (zero_point ? load_int(zero_point[p], bits, qmin < 0) : 0);", "int v = (int)r;",
       "tests/kernels/test_quantize_kernels.py", "-k", "emulator"),
    _m("cu-dequantize-zero-point-sign", "cuda_kernels/quantize.cu",
       "if (zero_point) v = v - (float)load_int(zero_point[p], bits, is_signed);",
       "if (zero_point) v = v + (float)load_int(zero_point[p], bits, is_signed);",
       "tests/kernels/test_quantize_kernels.py", "-k", "emulator"),
    _m("cu-gemm-b-zero-point-skipped", "cuda_kernels/quantize.cu",
       "if (b_zp) bv -= (int)b_zp[b_zp_per_col ? col : 0];", "if (b_zp) bv -= 0;",
       "tests/kernels/test_integer_kernels.py", "-k", "emulator"),
    # (bt += 4 survived as an equivalent mutant: a grid of z <= 4 layers strides by 4 anyway, and a
    # GPU's grid, one layer per batch, only recomputes batches; this one skips batch gridDim.z)
    _m("cu-gemm-batch-stride-off-by-one", "cuda_kernels/quantize.cu",
       "for (i64 bt = blockIdx.z; bt < batches; bt += gridDim.z) {",
       "for (i64 bt = blockIdx.z; bt < batches; bt += gridDim.z + 1) {",
       "tests/kernels/test_integer_kernels.py", "-k", "emulator"),
    _m("cu-requantize-zero-point-skipped", "cuda_kernels/quantize.cu",
       "const int v = (int)q + (zero_point ? (int)zero_point[0] : 0);", "const int v = (int)q;",
       "tests/kernels/test_integer_kernels.py", "-k", "emulator"),
    _m("cu-roi-align-half-pixel-offset", "cuda_kernels/roi_align.cu",
       "const float offset = half_pixel ? 0.5f : 0.0f;", "const float offset = half_pixel ? 0.0f : 0.5f;",
       "tests/kernels/test_detection_kernels.py", "-k", "emulator and roi"),
    _m("cu-nms-iou-not-strict", "cuda_kernels/nms.cu",
       "    return inter / uni > iou_threshold;", "    return inter / uni >= iou_threshold;",
       "tests/kernels/test_detection_kernels.py", "-k", "emulator and suppression"),
    # -- optimizer rewrites ------------------------------------------------------------------------
    _m("opt-fold-batchnorm-epsilon-dropped", "gpuops/optimizer/fold_batchnorm.py",
       "s = scale / np.sqrt(var + float(attr(bn, \"epsilon\", 1e-5)))", "s = scale / np.sqrt(var)",
       "tests/optimizer/test_fold_into_conv.py"),
    _m("opt-fold-batchnorm-shift-sign", "gpuops/optimizer/fold_batchnorm.py",
       "    return s, bias - mean * s", "    return s, bias + mean * s",
       "tests/optimizer/test_fold_into_conv.py"),
    _m("opt-matmul-add-operands-swapped", "gpuops/optimizer/matmul_add_to_gemm.py",
       "add.input[:] = [mm.input[0], mm.input[1], c]", "add.input[:] = [mm.input[1], mm.input[0], c]",
       "tests/optimizer/test_matmul.py"),
    _m("opt-fused-leakyrelu-alpha-dropped", "gpuops/optimizer/conv_fusion.py",
       "        return [float(attr(node, \"alpha\", 0.01))]", "        return [0.01]",
       "tests/optimizer/test_conv_fusion.py"),
    # -- executor, plan, memory, CUDA graphs -----------------------------------------------------
    # (dropping ``n in step.release`` from _reusable survived as an equivalent mutant: a value that
    # lives on is still referenced by the executor's values, so the reference count refuses it)
    _m("exec-in-place-over-shared-values", "gpuops/executor/run.py",
       "if (args[i].nbytes >= MIN_IN_PLACE_BYTES and _refs(args, i) == _SOLE_REFS and _fits(args, i)",
       "if (args[i].nbytes >= MIN_IN_PLACE_BYTES and _fits(args, i)",
       "tests/test_buffer_reuse.py"),
    _m("plan-release-one-step-early", "gpuops/onnx/plan.py",
       "            plan.steps[i].release.append(name)", "            plan.steps[max(i - 1, 0)].release.append(name)",
       "tests/test_session.py"),
    _m("memory-limit-doubled", "gpuops/memory.py",
       "                    pool.set_limit(size=int(self.limit))",
       "                    pool.set_limit(size=2 * int(self.limit))",
       "tests/test_cuda_path.py", "-k", "memory_limit"),
    _m("graph-replay-without-upload-wait", "gpuops/executor/cuda_graphs.py",
       "        e.stream.wait_event(uploaded)  # the feeds' uploads, without a host wait",
       "        pass",
       "tests/cuda/test_streams.py", "tests/cuda/test_graph_shapes.py", "-k", "replay"),
    # -- MDF ---------------------------------------------------------------------------------------
    _m("mdf-sub-is-add", "gpuops/mdf/expr.py",
       "ast.Sub: operator.sub,", "ast.Sub: operator.add,",
       "tests/mdf/test_mdf_expr.py"),
    _m("mdf-euler-step-sign", "gpuops/mdf/session.py",
       "new = base + self.td(scope) * dt", "new = base - self.td(scope) * dt",
       "tests/mdf/test_mdf_examples.py"),
    _m("mdf-edge-weight-dropped", "gpuops/mdf/session.py",
       "                value = self.weight * value", "                value = value",
       "tests/mdf/test_mdf_examples.py", quick=False),
    # -- slower checks (not in --quick) -------------------------------------------------------------
    _m("cu-im2col-bias-col2im-dropped", "cuda_kernels/conv.cu",
       "        if (bias) acc += to_float(bias[nc % C]);", "        if (bias) acc += 0.0f;",
       "tests/kernels/test_conv_kernels.py", "-k", "emulator", quick=False),
    _m("cuda-conv-kernel-flipped", "gpuops/ops/cuda/conv.py",
       "    X, W = contiguous(xp, X), contiguous(xp, W)\n    if g.G == g.C",
       "    X, W = contiguous(xp, X), contiguous(xp, xp.flip(W, axis=(-2, -1)))\n    if g.G == g.C",
       "tests/cuda/test_graph_capture_models.py", "-k", "squeezenet", quick=False),
    _m("dequantize-per-tensor-zero-point-sign", "gpuops/ops/quantize.py",
       "        v = v - xp.reshape(zero_point, ()).astype(np.float32)",
       "        v = v + xp.reshape(zero_point, ()).astype(np.float32)",
       "tests/contrib/test_quantized.py", "-k", "lookup"),  # QLinearLeakyRelu / QLinearSigmoid tables
]
