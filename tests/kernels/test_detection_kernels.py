"""RoiAlign and NonMaxSuppression kernels (roi_align.cu, nms.cu via gpuops/ops/cuda/detection.py)
against the onnx reference implementation (the spec's own evaluator), which they match exactly."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import gpuops
from gpuops.errors import NodeError
from gpuops.ops.cuda import detection
from gpuops.selftest import ROI_BATCH as BATCH
from gpuops.selftest import ROIS
from gpuops.selftest import nms_boxes as _boxes

from tests.ops.common import one_node_model

from .test_conv_kernels import ort_run


def reference(op_type, inputs, attrs, opset):
    """Run one node in onnx's ReferenceEvaluator; None inputs are omitted optional inputs."""
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(inputs)]
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
          for n, a in zip(names, inputs) if a is not None]
    out = helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)
    model = helper.make_model(helper.make_graph([helper.make_node(op_type, names, ["y"], **attrs)], "g", vi, [out]),
                              opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {n: a for n, a in zip(names, inputs) if a is not None})[0]


@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align(dev, mode, ctm, sampling_ratio):
    X = np.random.default_rng(0).standard_normal((2, 3, 10, 13)).astype(np.float32)
    attrs = dict(mode=mode, output_height=3, output_width=5, sampling_ratio=sampling_ratio, spatial_scale=0.8)
    Y = dev.get(detection.roi_align(dev.xp, dev.put(X), dev.put(ROIS), dev.put(BATCH),
                                    half_pixel=ctm == "half_pixel", **attrs))
    want = reference("RoiAlign", [X, ROIS, BATCH], dict(coordinate_transformation_mode=ctm, **attrs), 16)
    assert Y.dtype == np.float32 and Y.shape == want.shape
    np.testing.assert_allclose(Y, want, rtol=1e-6, atol=1e-6)


def test_roi_align_opset10_is_output_half_pixel(dev):
    X = np.random.default_rng(1).standard_normal((2, 2, 7, 6)).astype(np.float32)
    Y = dev.get(detection.RoiAlign_10(dev.xp, dev.put(X), dev.put(ROIS), dev.put(BATCH), output_height=2,
                                      output_width=3, spatial_scale=0.5))
    # onnxruntime: the reference evaluator applies opset 16's default (half_pixel) at opset 10 too
    want = ort_run("RoiAlign", [X, ROIS, BATCH], dict(output_height=2, output_width=3, spatial_scale=0.5), 10)
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-5)


def test_roi_align_float16_and_empty(dev):
    X = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float16)
    Y = dev.get(detection.roi_align(dev.xp, dev.put(X), dev.put(ROIS.astype(np.float16)), dev.put(BATCH),
                                    output_height=2, output_width=2))
    want = reference("RoiAlign", [X.astype(np.float32), ROIS, BATCH], dict(output_height=2, output_width=2), 16)
    assert Y.dtype == np.float16
    np.testing.assert_allclose(Y.astype(np.float32), want, rtol=1e-2, atol=1e-2)
    no_rois = detection.roi_align(dev.xp, dev.put(X), dev.put(np.zeros((0, 4), np.float16)),
                                  dev.put(np.zeros(0, np.int64)), output_height=2, output_width=2)
    assert dev.get(no_rois).shape == (0, 3, 2, 2)


NMS_CASES = {  # (max_output_boxes_per_class, iou_threshold, score_threshold)
    "score-threshold": (10, 0.3, 0.2),
    "few": (3, 0.5, None),
    "zero": (0, 0.5, None),
    "absent": (None, 0.5, None),
    "all": (1000, 0.0, 0.5),
    "iou-one": (1000, 1.0, None),
}


@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("case", NMS_CASES)
def test_non_max_suppression(dev, case, center_point_box):
    rng = np.random.default_rng(3)
    B, C, N = 2, 3, 150  # N > 64 (several mask words), not a multiple of 64
    boxes = _boxes(rng, B, N, center_point_box)
    scores = (rng.integers(0, 20, (B, C, N)) / 20).astype(np.float32)  # many tied scores
    boxes[0, 7] = boxes[0, 3]  # duplicate boxes: IoU exactly 1
    max_out, iou, score = NMS_CASES[case]
    host = [None if max_out is None else np.array([max_out], np.int64), np.array([iou], np.float32),
            None if score is None else np.array([score], np.float32)]
    got = dev.get(detection.non_max_suppression(dev.xp, dev.put(boxes), dev.put(scores), *host,
                                                center_point_box=center_point_box))
    if max_out is None:  # the reference evaluator fails on it: the spec's default 0 selects nothing
        want = np.zeros((0, 3), np.int64)
    else:
        inputs = [boxes, scores, *host]
        while inputs[-1] is None:
            inputs.pop()
        want = reference("NonMaxSuppression", inputs, dict(center_point_box=center_point_box), 11).reshape(-1, 3)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_non_max_suppression_chunks_and_edges(dev, monkeypatch):
    rng = np.random.default_rng(4)
    boxes = _boxes(rng, 3, 70, 0)
    scores = rng.random((3, 4, 70)).astype(np.float32)
    host = (np.array([5], np.int64), np.array([0.4], np.float32), np.array([0.1], np.float32))
    want = reference("NonMaxSuppression", [boxes, scores, *host], {}, 11)
    monkeypatch.setattr(detection, "_MASK_BYTES", 1)  # one (batch, class) pair per mask chunk
    got = dev.get(detection.non_max_suppression(dev.xp, dev.put(boxes), dev.put(scores), *host))
    np.testing.assert_array_equal(got, want)
    # no boxes at all, and no classes
    for b, s in [(np.zeros((1, 0, 4), np.float32), np.zeros((1, 2, 0), np.float32)),
                 (boxes, np.zeros((3, 0, 70), np.float32))]:
        got = dev.get(detection.non_max_suppression(dev.xp, dev.put(b), dev.put(s), *host))
        assert got.shape == (0, 3) and got.dtype == np.int64
    # float16 boxes and scores
    got = dev.get(detection.non_max_suppression(dev.xp, dev.put(boxes.astype(np.float16)),
                                                dev.put(scores.astype(np.float16)), *host))
    want16 = reference("NonMaxSuppression", [boxes.astype(np.float16).astype(np.float32),
                                             scores.astype(np.float16).astype(np.float32), *host], {}, 11)
    np.testing.assert_array_equal(got, want16)


@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("bad", [-1, 2, 2**31 - 1, -2**63])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_roi_align_batch_index_out_of_range_is_a_node_error(device, bad, sampling_ratio):
    """As onnxruntime: an index outside [0, N) is refused, with the same message on both devices
    (the cpu path used to take -1 as the last image, the kernel gave zeros; found by fuzzing)."""
    X = np.random.default_rng(1).standard_normal((2, 3, 10, 13)).astype(np.float32)
    batch = BATCH.astype(np.int64).copy()
    batch[-1] = bad
    feeds = {"X": X, "rois": ROIS, "batch_indices": batch}
    model = one_node_model("RoiAlign", feeds, opset=16, sampling_ratio=sampling_ratio)
    with pytest.raises(NodeError, match=rf"batch_indices'?: index {bad} is out of range \[0, 1\]"):
        gpuops.InferenceSession(model, device=device).run(None, feeds)
