"""RoiAlign and NonMaxSuppression against onnxruntime, edge cases included."""

import numpy as np
import pytest
from onnx import helper

from tests.ops.common import assert_node_matches_ort, make_model, run_gpuops, run_node

RNG = np.random.default_rng(0)


# -- RoiAlign ------------------------------------------------------------------------------------

ROIS = np.array([
    [0.0, 0.0, 9.0, 9.0],      # whole image
    [2.2, 1.1, 6.7, 8.3],      # fractional
    [3.0, 3.0, 3.0, 3.0],      # zero area
    [7.0, 2.0, 4.0, 5.0],      # x2 < x1 (malformed)
    [-4.0, -3.0, 2.5, 1.5],    # partly outside
    [12.0, 12.0, 20.0, 15.0],  # wholly outside the image
    [0.5, 8.5, 9.5, 9.5],      # thin strip at the bottom edge
], dtype=np.float32)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align_matches_onnxruntime(mode, ctm, sampling_ratio):
    X = RNG.normal(size=(2, 3, 10, 10)).astype(np.float32)
    feeds = {"X": X, "rois": ROIS, "batch_indices": np.array([0, 1, 0, 1, 0, 1, 1], np.int64)}
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], mode=mode, output_height=3,
                            output_width=4, sampling_ratio=sampling_ratio, spatial_scale=0.9,
                            coordinate_transformation_mode=ctm)
    (got,) = assert_node_matches_ort(node, feeds, opset=16, rtol=1e-5, atol=1e-5)
    assert got.shape == (7, 3, 3, 4) and got.dtype == np.float32


def test_roi_align_opset10_has_no_pixel_shift():
    X = RNG.normal(size=(1, 2, 8, 8)).astype(np.float32)
    feeds = {"X": X, "rois": ROIS[:3] * 0.8, "batch_indices": np.zeros(3, np.int64)}
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], output_height=2, output_width=2)
    assert_node_matches_ort(node, feeds, opset=10, rtol=1e-5, atol=1e-5)


def test_roi_align_no_rois():
    feeds = {"X": np.ones((1, 2, 4, 4), np.float32), "rois": np.zeros((0, 4), np.float32),
             "batch_indices": np.zeros((0,), np.int64)}
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], output_height=2, output_width=3)
    (got,) = assert_node_matches_ort(node, feeds, opset=16)
    assert got.shape == (0, 2, 2, 3)


def test_roi_align_constant_image_averages_to_the_constant():
    X = np.full((1, 1, 6, 6), 2.5, np.float32)
    feeds = {"X": X, "rois": np.array([[1.0, 1.0, 4.0, 5.0]], np.float32), "batch_indices": np.zeros(1, np.int64)}
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], output_height=2, output_width=2)
    (got,) = run_node(node, feeds, opset=16)
    np.testing.assert_allclose(got, 2.5, rtol=1e-6)


# -- NonMaxSuppression ---------------------------------------------------------------------------


def nms_feeds(boxes, scores, max_out=None, iou=None, score=None):
    feeds = {"boxes": boxes.astype(np.float32), "scores": scores.astype(np.float32)}
    names = ["boxes", "scores"]
    for name, value, dtype in (("max_output_boxes_per_class", max_out, np.int64), ("iou_threshold", iou, np.float32),
                               ("score_threshold", score, np.float32)):
        if value is not None:
            feeds[name] = np.array([value], dtype)
            names.append(name)
        else:
            names.append("")
    while names[-1] == "":
        names.pop()
    return feeds, names


def random_boxes(B, N, center=False):
    xy = RNG.uniform(0, 10, size=(B, N, 2))
    wh = RNG.uniform(0.5, 4, size=(B, N, 2))
    if center:
        return np.concatenate([xy, wh], axis=-1)
    corners = np.concatenate([xy, xy + wh], axis=-1)
    flip = RNG.random((B, N)) < 0.5  # corners in either diagonal order
    corners[flip] = corners[flip][:, [2, 3, 0, 1]]
    return corners


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("max_out,iou,score", [(3, 0.3, None), (100, 0.5, 0.4), (2, 0.0, 0.9), (None, None, None),
                                               (0, 0.5, None), (5, None, None)])
def test_nms_matches_onnxruntime(center, max_out, iou, score):
    boxes = random_boxes(2, 20, center)
    scores = RNG.random((2, 3, 20))
    feeds, names = nms_feeds(boxes, scores, max_out, iou, score)
    node = helper.make_node("NonMaxSuppression", names, ["selected"], center_point_box=center)
    (got,) = assert_node_matches_ort(node, feeds, opset=11)
    assert got.dtype == np.int64 and got.shape[1:] == (3,)


def test_nms_tied_scores_keep_lower_index_first():
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6], [0, 0, 1, 1.05], [10, 10, 11, 11]]], np.float32)
    scores = np.array([[[0.5, 0.5, 0.5, 0.5]]], np.float32)
    feeds, names = nms_feeds(boxes, scores, 10, 0.5)
    (got,) = assert_node_matches_ort(helper.make_node("NonMaxSuppression", names, ["s"]), feeds, opset=11)
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 1], [0, 0, 3]])


def test_nms_degenerate_boxes_never_suppress():
    boxes = np.array([[[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 3, 3], [1, 1, 3, 3]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.6]]], np.float32)
    feeds, names = nms_feeds(boxes, scores, 10, 0.1)
    (got,) = assert_node_matches_ort(helper.make_node("NonMaxSuppression", names, ["s"]), feeds, opset=11)
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 1], [0, 0, 2]])


def test_nms_no_boxes():
    feeds, names = nms_feeds(np.zeros((1, 0, 4)), np.zeros((1, 2, 0)), 5, 0.5)
    (got,) = assert_node_matches_ort(helper.make_node("NonMaxSuppression", names, ["s"]), feeds, opset=11)
    assert got.shape == (0, 3) and got.dtype == np.int64  # onnxruntime's output has the same shape


def test_nms_many_classes_chunked(monkeypatch):
    from gpuops.ops import detection

    monkeypatch.setattr(detection, "_NMS_CHUNK_ELEMENTS", 2 * 15 * 15)  # two classes per chunk
    boxes = random_boxes(1, 15)
    scores = RNG.random((1, 5, 15))
    feeds, names = nms_feeds(boxes, scores, 4, 0.2, 0.1)
    assert_node_matches_ort(helper.make_node("NonMaxSuppression", names, ["s"]), feeds, opset=11)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_chunked_rois(monkeypatch, mode):
    from gpuops.ops import detection

    monkeypatch.setattr(detection, "_ROI_CHUNK_ELEMENTS", 1)  # one roi per chunk
    X = RNG.normal(size=(2, 3, 10, 10)).astype(np.float32)
    feeds = {"X": X, "rois": ROIS, "batch_indices": np.array([0, 1, 0, 1, 0, 1, 1], np.int64)}
    # (spatial_scale < 1 keeps onnxruntime clear of its overflow on the malformed roi's negative grid)
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], mode=mode, output_height=2,
                            output_width=3, spatial_scale=0.9)
    assert_node_matches_ort(node, feeds, opset=16, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_malformed_rois_match_onnx_reference(mode):
    """Reversed rois give negative adaptive grids (no samples, output 0); onnxruntime overflows on
    them, so the onnx reference evaluator is the oracle here."""
    from onnx.reference import ReferenceEvaluator

    X = RNG.normal(size=(2, 3, 10, 10)).astype(np.float32)
    feeds = {"X": X, "rois": ROIS, "batch_indices": np.array([0, 1, 0, 1, 0, 1, 1], np.int64)}
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], mode=mode, output_height=2,
                            output_width=3)
    model = make_model(node, feeds, opset=16)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = run_gpuops(model, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[3], 0.0)
