"""RoiAlign and NonMaxSuppression on CUDA (``cuda_kernels/roi_align.cu``, ``cuda_kernels/nms.cu``).

NonMaxSuppression runs every (batch, class) pair in the same few launches -- a stable device sort,
the IoU bitmask kernel, the greedy selection kernel (one thread block per pair) and the gather of
output rows -- and synchronises with the host once, to read how many boxes were selected.
"""

from __future__ import annotations

import numpy as np

from ... import kernels
from ...device import to_host
from ...errors import NodeError
from ...registry import op
from ..detection import batch_index_array
from ._launch import contiguous, f32, generic, i32, i64, launch, on_device

_CT = {np.dtype(np.float32): "float", np.dtype(np.float16): "__half"}
_MASK_BYTES = 256 << 20  # IoU bitmask budget: more (batch, class) pairs are processed in chunks


def roi_align(xp, X, rois, batch_indices, *, mode="avg", output_height=1, output_width=1, sampling_ratio=0,
              spatial_scale=1.0, half_pixel=True):
    """The kernel path of RoiAlign; None when the generic op must run."""
    if not on_device(X, rois, batch_indices):
        return None
    if np.dtype(X.dtype) not in _CT or X.ndim != 4 or rois.ndim != 2 or int(rois.shape[-1]) != 4:
        return None
    if mode not in ("avg", "max"):
        raise NodeError(f"RoiAlign: mode must be 'avg' or 'max', got {mode!r}")
    if int(output_height) < 1 or int(output_width) < 1:
        raise NodeError(f"RoiAlign: output_height/output_width must be positive, got {output_height}/{output_width}")
    N, C, H, W = (int(d) for d in X.shape)
    R = int(rois.shape[0])
    batch_indices = batch_index_array(xp, batch_indices, N, R)
    PH, PW = int(output_height), int(output_width)
    Y = xp.empty((R, C, PH, PW), dtype=X.dtype)
    if Y.size:
        rois = contiguous(xp, rois.astype(X.dtype) if rois.dtype != X.dtype else rois)
        bi = contiguous(xp, batch_indices)
        launch("roi_align.cu", f"roi_align<{_CT[np.dtype(X.dtype)]}>", X, Y.size,
               (contiguous(xp, X), rois, bi, Y, i64(Y.size), i32(N), i32(C), i32(H), i32(W), i32(PH), i32(PW),
                i32(sampling_ratio), f32(spatial_scale), i32(1 if half_pixel else 0), i32(1 if mode == "max" else 0)))
    return Y


@op("RoiAlign", since=10, device="cuda")
def RoiAlign_10(xp, X, rois, batch_indices, *, mode="avg", output_height=1, output_width=1, sampling_ratio=0,
                spatial_scale=1.0):
    kw = dict(mode=mode, output_height=output_height, output_width=output_width, sampling_ratio=sampling_ratio,
              spatial_scale=spatial_scale)
    Y = roi_align(xp, X, rois, batch_indices, half_pixel=False, **kw)
    return generic("RoiAlign", 10)(xp, X, rois, batch_indices, **kw) if Y is None else Y


def _roi_align_16(since: int):
    def RoiAlign_16(xp, X, rois, batch_indices, *, coordinate_transformation_mode="half_pixel", mode="avg",
                    output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
        if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
            raise NodeError("RoiAlign: coordinate_transformation_mode must be 'half_pixel' or 'output_half_pixel', "
                            f"got {coordinate_transformation_mode!r}")
        kw = dict(mode=mode, output_height=output_height, output_width=output_width, sampling_ratio=sampling_ratio,
                  spatial_scale=spatial_scale)
        Y = roi_align(xp, X, rois, batch_indices, half_pixel=coordinate_transformation_mode == "half_pixel", **kw)
        if Y is None:
            return generic("RoiAlign", since)(xp, X, rois, batch_indices,
                                              coordinate_transformation_mode=coordinate_transformation_mode, **kw)
        return Y

    return RoiAlign_16


for _v in (16, 22):
    op("RoiAlign", since=_v, device="cuda")(_roi_align_16(_v))


# -- NonMaxSuppression ---------------------------------------------------------------------------


def _scalar(v, default):
    """A host input that may be absent, empty, or a 0-d/1-element array."""
    if v is None:
        return default
    v = np.asarray(to_host(v)).reshape(-1)
    return v[0].item() if v.size else default


def non_max_suppression(xp, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    """The kernel path of NonMaxSuppression; None when the generic op must run."""
    if not on_device(boxes, scores):
        return None
    if np.dtype(boxes.dtype) not in _CT or boxes.ndim != 3 or scores.ndim != 3:
        return None
    B, N = int(boxes.shape[0]), int(boxes.shape[1])
    C = int(scores.shape[1])
    if int(boxes.shape[2]) != 4 or int(scores.shape[0]) != B or int(scores.shape[2]) != N:
        raise NodeError(f"NonMaxSuppression: boxes {tuple(boxes.shape)} and scores {tuple(scores.shape)} do not "
                        "match ([B, N, 4] and [B, C, N])")
    if center_point_box not in (0, 1):
        raise NodeError(f"NonMaxSuppression: center_point_box must be 0 or 1, got {center_point_box}")
    max_out = min(max(int(_scalar(max_output_boxes_per_class, 0)), 0), N)
    iou = float(_scalar(iou_threshold, 0.0))
    score = _scalar(score_threshold, None)
    if max_out == 0 or B * C == 0:
        return xp.zeros((0, 3), dtype=np.int64)
    t = _CT[np.dtype(boxes.dtype)]
    boxes = contiguous(xp, boxes)
    scores = contiguous(xp, scores.astype(boxes.dtype) if scores.dtype != boxes.dtype else scores)
    # Descending score, ties by lower index: a stable ascending sort of the negated scores.
    order = contiguous(xp, xp.argsort(-scores, axis=-1, stable=True).astype(np.int32))
    words = -(-N // 64)
    n_bc = B * C
    chunk = max(1, min(n_bc, 65535, _MASK_BYTES // max(1, N * words * 8)))
    mask = xp.empty((chunk, N, words), dtype=np.uint64)
    suppressed = xp.empty((chunk, words), dtype=np.uint64)
    selected = xp.empty((n_bc, max_out), dtype=np.int64)
    counts = xp.empty((n_bc,), dtype=np.int32)
    backend, device = kernels.backend_of(boxes), kernels.device_of(boxes)
    mask_fn = kernels.get_function("nms.cu", f"nms_mask<{t}>", backend, device)
    select_fn = kernels.get_function("nms.cu", f"nms_select<{t}>", backend, device)
    select_block = backend.launch_limits.nms_select_block
    with backend.on_device(device):
        for off in range(0, n_bc, chunk):
            n = min(chunk, n_bc - off)
            mask_fn((words, words, n), (kernels.NMS_BLOCK,),
                    (boxes, order, mask, i32(C), i32(N), i32(words), i32(off), i32(center_point_box), f32(iou)))
            select_fn((n,), (select_block,),
                      (scores, order, mask, suppressed, selected, counts, i32(N), i32(words), i32(off),
                       i32(max_out), i32(score is not None), f32(score if score is not None else 0.0)))
    total = int(to_host(counts).astype(np.int64).sum())  # the one device -> host synchronisation
    out = xp.empty((total, 3), dtype=np.int64)
    if total:
        offsets = contiguous(xp, (xp.cumsum(counts.astype(np.int64)) - counts.astype(np.int64)))
        launch("nms.cu", "nms_gather", out, n_bc * max_out,
               (selected, counts, offsets, out, i32(C), i32(max_out), i64(n_bc * max_out)))
    return out


def _nms_op(since: int):
    def NonMaxSuppression(xp, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                          score_threshold=None, *, center_point_box=0):
        args = (boxes, scores, max_output_boxes_per_class, iou_threshold, score_threshold)
        out = non_max_suppression(xp, *args, center_point_box=center_point_box)
        return generic("NonMaxSuppression", since)(xp, *args, center_point_box=center_point_box) if out is None else out

    return NonMaxSuppression


for _v in (10, 11):
    op("NonMaxSuppression", since=_v, device="cuda", host_inputs=(2, 3, 4),
       syncs="reads how many boxes were selected")(_nms_op(_v))
