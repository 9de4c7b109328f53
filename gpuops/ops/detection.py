"""Detection ops: RoiAlign and NonMaxSuppression (generic versions; also the test oracle for the
kernel-backed CUDA overrides, so they follow the onnx reference semantics exactly).

RoiAlign gathers every (roi, bin, sample) at once. With ``sampling_ratio=0`` the grid of each roi is
``ceil(roi_size / output_size)``, so the sample grid is sized by the largest one (one scalar read
back from the device) and samples past a roi's own grid are masked out.

NonMaxSuppression builds the IoU matrix of each batch's boxes, reorders it by every class's
descending scores (ties: lower box index first), and then runs the greedy pass as a loop over the
sorted positions only: step ``k`` lets box ``k``, if still kept, suppress the later boxes it overlaps,
for all classes at once. Its output size depends on the data, so it reads the kept mask back.
"""

from __future__ import annotations

import numpy as np

from ..device import to_host
from ..errors import NodeError
from ..registry import op
from .checks import require

# -- RoiAlign ------------------------------------------------------------------------------------

_ROI_CHUNK_ELEMENTS = 1 << 26  # bound on the gathered [rois, bins, samples, C, ...] intermediate


def _interp_axis(xp, v, size: int, valid):
    """Bilinear taps along one axis for sample coordinates ``v``: (low, high, w_low, w_high).

    As in the reference: a sample outside [-1, size] contributes nothing, coordinates are clamped at
    0 and at the last pixel. ``valid`` masks samples beyond a roi's adaptive grid (weights 0).
    """
    outside = (v < -1.0) | (v > float(size))
    v = xp.maximum(v, 0.0)
    low = xp.floor(v).astype(np.int64)
    at_end = low >= size - 1
    low = xp.where(at_end, size - 1, low)
    high = xp.where(at_end, size - 1, low + 1)
    v = xp.where(at_end, low.astype(v.dtype), v)
    frac = v - low.astype(v.dtype)
    keep = (~outside) & valid
    zero = xp.zeros_like(frac)
    return low, high, xp.where(keep, 1.0 - frac, zero), xp.where(keep, frac, zero)


def batch_index_array(xp, batch_indices, N: int, R: int):
    """RoiAlign's ``batch_indices`` as int64, checked to lie in [0, N) -- a :class:`NodeError` as in
    onnxruntime, on a device at the end of the run (:mod:`.checks`) -- and wrapped into range meanwhile."""
    if tuple(batch_indices.shape) != (R,):
        raise NodeError(f"RoiAlign: batch_indices has shape {tuple(batch_indices.shape)}, expected ({R},)")
    b = batch_indices.astype(np.int64)
    if R:
        def check(lohi):
            lo, hi = (int(v) for v in lohi)
            if lo < 0 or hi >= N:
                raise NodeError(f"RoiAlign: input 'batch_indices': index {lo if lo < 0 else hi} is out of range "
                                f"[0, {N - 1}] (X holds {N} images)")

        require(xp.stack([xp.min(b), xp.max(b)]), check)
    return b % max(N, 1)


def _roi_align(xp, X, rois, batch_indices, *, half_pixel, mode, output_height, output_width,
               sampling_ratio, spatial_scale):
    mode = mode.lower()
    if mode not in ("avg", "max"):
        raise NodeError(f"RoiAlign mode must be 'avg' or 'max', got {mode!r}")
    if X.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4:
        raise NodeError(f"RoiAlign expects X [N, C, H, W] and rois [R, 4], got {tuple(X.shape)} and "
                        f"{tuple(rois.shape)}")
    N, C, H, W = (int(d) for d in X.shape)
    R, PH, PW = int(rois.shape[0]), int(output_height), int(output_width)
    batch_indices = batch_index_array(xp, batch_indices, N, R)
    if R == 0:
        return xp.zeros((0, C, PH, PW), dtype=X.dtype)
    ct = np.float64 if X.dtype == np.float64 else np.float32
    r = rois.astype(ct) * spatial_scale - (0.5 if half_pixel else 0.0)
    start_w, start_h = r[:, 0], r[:, 1]
    roi_w, roi_h = r[:, 2] - start_w, r[:, 3] - start_h
    if not half_pixel:  # malformed rois are forced to 1x1
        roi_w, roi_h = xp.maximum(roi_w, 1.0), xp.maximum(roi_h, 1.0)
    bin_h, bin_w = roi_h / PH, roi_w / PW
    if sampling_ratio > 0:
        grid_h = grid_w = xp.full((R,), sampling_ratio, dtype=ct)
        Gh = Gw = int(sampling_ratio)
    else:
        grid_h, grid_w = xp.ceil(bin_h), xp.ceil(bin_w)
        gmax = to_host(xp.stack([xp.max(grid_h), xp.max(grid_w)]))  # the one read-back
        if not np.all(np.isfinite(gmax)):
            raise NodeError("RoiAlign: rois with non-finite coordinates")
        Gh, Gw = max(int(gmax[0]), 1), max(int(gmax[1]), 1)
    count = xp.maximum(grid_h * grid_w, 1.0)  # the reference's divisor, grids <= 0 included

    def samples(start, bin_size, grid, P, G):  # -> coordinates [R, P, G] and mask
        p = xp.reshape(xp.arange(P, dtype=ct), (1, P, 1))
        g = xp.reshape(xp.arange(G, dtype=ct), (1, 1, G))
        start, bin_size, grid = (xp.reshape(a, (R, 1, 1)) for a in (start, bin_size, grid))
        v = start + p * bin_size + (g + 0.5) * bin_size / xp.maximum(grid, 1.0)
        return v, xp.broadcast_to(g < grid, v.shape)

    yy, ymask = samples(start_h, bin_h, grid_h, PH, Gh)
    xx, xmask = samples(start_w, bin_w, grid_w, PW, Gw)
    y_lo, y_hi, wy_lo, wy_hi = _interp_axis(xp, yy, H, ymask)  # [R, PH, Gh]
    x_lo, x_hi, wx_lo, wx_hi = _interp_axis(xp, xx, W, xmask)  # [R, PW, Gw]
    taps = (batch_indices, y_lo, y_hi, wy_lo, wy_hi, ymask, x_lo, x_hi, wx_lo, wx_hi, xmask, count)
    # rois are pooled in chunks that bound the gathered intermediate's size
    per_roi = C * (PH * Gh * W + PW * Gw * PH if mode == "avg" else PH * Gh * PW * Gw)
    step = max(1, _ROI_CHUNK_ELEMENTS // per_roi)
    pool = _pool_avg if mode == "avg" else _pool_max
    outs = [pool(xp, X, ct, *(t[i:i + step] for t in taps)) for i in range(0, R, step)]
    return (outs[0] if len(outs) == 1 else xp.concat(outs, axis=0)).astype(X.dtype)


def _pool_avg(xp, X, ct, b, y_lo, y_hi, wy_lo, wy_hi, ymask, x_lo, x_hi, wx_lo, wx_hi, xmask, count):
    """Mean of the samples, separably: interpolate along rows, then along columns."""
    R = int(b.shape[0])
    bi = xp.reshape(b, (R, 1, 1))
    rows = (wy_lo[..., None, None] * X[bi, :, y_lo, :].astype(ct)
            + wy_hi[..., None, None] * X[bi, :, y_hi, :].astype(ct))  # [R, PH, Gh, C, W]
    rows = xp.sum(rows, axis=2)  # [R, PH, C, W]
    ri = xp.reshape(xp.arange(R), (R, 1, 1))
    cols = wx_lo[..., None, None] * rows[ri, :, :, x_lo] + wx_hi[..., None, None] * rows[ri, :, :, x_hi]
    out = xp.sum(cols, axis=2)  # [R, PW, PH, C]
    return xp.permute_dims(out, (0, 3, 2, 1)) / xp.reshape(count, (R, 1, 1, 1))


def _pool_max(xp, X, ct, b, y_lo, y_hi, wy_lo, wy_hi, ymask, x_lo, x_hi, wx_lo, wx_hi, xmask, count):
    """Largest of the four weighted corner values of each sample, then over the samples."""
    R, PH, Gh = (int(d) for d in y_lo.shape)
    PW, Gw = (int(d) for d in x_lo.shape[1:])
    bi = xp.reshape(b, (R, 1, 1, 1, 1))
    yl, yh = (xp.reshape(a, (R, PH, Gh, 1, 1)) for a in (y_lo, y_hi))
    xl, xh = (xp.reshape(a, (R, 1, 1, PW, Gw)) for a in (x_lo, x_hi))
    wyl, wyh = (xp.reshape(a, (R, PH, Gh, 1, 1, 1)) for a in (wy_lo, wy_hi))
    wxl, wxh = (xp.reshape(a, (R, 1, 1, PW, Gw, 1)) for a in (wx_lo, wx_hi))
    val = (wyl * wxl) * X[bi, :, yl, xl].astype(ct)  # [R, PH, Gh, PW, Gw, C]
    val = xp.maximum(val, (wyl * wxh) * X[bi, :, yl, xh].astype(ct))
    val = xp.maximum(val, (wyh * wxl) * X[bi, :, yh, xl].astype(ct))
    val = xp.maximum(val, (wyh * wxh) * X[bi, :, yh, xh].astype(ct))
    valid = (xp.reshape(ymask, (R, PH, Gh, 1, 1)) & xp.reshape(xmask, (R, 1, 1, PW, Gw)))[..., None]
    out = xp.max(xp.where(valid, val, -xp.inf), axis=(2, 4))  # [R, PH, PW, C]
    out = xp.where(xp.any(valid, axis=(2, 4)), out, 0.0)  # a roi without samples pools to 0
    return xp.permute_dims(out, (0, 3, 1, 2))


@op("RoiAlign", since=10, syncs="sampling_ratio=0 sizes the sample grid by the rois' largest one, read on the host")
def RoiAlign_10(xp, X, rois, batch_indices, *, mode="avg", output_height=1, output_width=1,
                sampling_ratio=0, spatial_scale=1.0):
    """Opset 10 has no pixel shift (what opset 16 calls 'output_half_pixel')."""
    return _roi_align(xp, X, rois, batch_indices, half_pixel=False, mode=mode, output_height=output_height,
                      output_width=output_width, sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)


@op("RoiAlign", since=16, syncs="sampling_ratio=0 sizes the sample grid by the rois' largest one, read on the host")  # 22 only adds bfloat16
def RoiAlign_16(xp, X, rois, batch_indices, *, coordinate_transformation_mode="half_pixel", mode="avg",
                output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise NodeError("RoiAlign coordinate_transformation_mode must be 'half_pixel' or 'output_half_pixel', "
                        f"got {coordinate_transformation_mode!r}")
    return _roi_align(xp, X, rois, batch_indices, half_pixel=coordinate_transformation_mode == "half_pixel",
                      mode=mode, output_height=output_height, output_width=output_width,
                      sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)


# -- NonMaxSuppression ---------------------------------------------------------------------------

_NMS_CHUNK_ELEMENTS = 1 << 27  # bound on the [classes, N, N] suppression masks built at once


def _suppression_matrix(xp, boxes, center_point_box: int, iou_threshold: float):
    """[B, N, N] bool: box i would suppress box j (IoU strictly above the threshold)."""
    if center_point_box:
        half_w, half_h = boxes[..., 2] / 2, boxes[..., 3] / 2
        x0, x1 = boxes[..., 0] - half_w, boxes[..., 0] + half_w
        y0, y1 = boxes[..., 1] - half_h, boxes[..., 1] + half_h
    else:  # any diagonal pair of corners
        y0, y1 = xp.minimum(boxes[..., 0], boxes[..., 2]), xp.maximum(boxes[..., 0], boxes[..., 2])
        x0, x1 = xp.minimum(boxes[..., 1], boxes[..., 3]), xp.maximum(boxes[..., 1], boxes[..., 3])
    ix0 = xp.maximum(x0[:, :, None], x0[:, None, :])
    ix1 = xp.minimum(x1[:, :, None], x1[:, None, :])
    iy0 = xp.maximum(y0[:, :, None], y0[:, None, :])
    iy1 = xp.minimum(y1[:, :, None], y1[:, None, :])
    inter = (ix1 - ix0) * (iy1 - iy0)
    area = (x1 - x0) * (y1 - y0)
    union = area[:, :, None] + area[:, None, :] - inter
    ok = (ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area[:, :, None] > 0) & (area[:, None, :] > 0) & (union > 0)
    iou = inter / xp.where(ok, union, xp.ones_like(union))
    return ok & (iou > iou_threshold)


@op("NonMaxSuppression", since=10, host_inputs=(2, 3, 4), syncs="the output's size depends on the data")
def NonMaxSuppression(xp, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                      score_threshold=None, *, center_point_box=0):
    """int64 [num_selected, 3] rows (batch, class, box), by batch, class, then descending score."""
    def scalar(v, default):
        return default if v is None or np.size(v) == 0 else np.asarray(v).reshape(-1)[0]

    max_out = int(scalar(max_output_boxes_per_class, 0))
    iou_thr = float(scalar(iou_threshold, 0.0))
    score_thr = scalar(score_threshold, None)
    if center_point_box not in (0, 1):
        raise NodeError(f"center_point_box must be 0 or 1, got {center_point_box}")
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or scores.shape[0] != boxes.shape[0] \
            or scores.shape[2] != boxes.shape[1]:
        raise NodeError(f"NonMaxSuppression expects boxes [B, N, 4] and scores [B, C, N], got "
                        f"{tuple(boxes.shape)} and {tuple(scores.shape)}")
    B, C, N = (int(d) for d in scores.shape)
    empty = xp.zeros((0, 3), dtype=np.int64)
    if max_out <= 0 or N == 0 or C == 0 or B == 0:
        return empty
    suppress = _suppression_matrix(xp, boxes, center_point_box, iou_thr)  # [B, N, N]
    order = xp.argsort(scores, axis=-1, descending=True, stable=True)  # [B, C, N]
    later = xp.arange(N)[None, :] > xp.arange(N)[:, None]  # only a higher-ranked box suppresses
    chunk = max(1, _NMS_CHUNK_ELEMENTS // (N * N))
    pieces = []
    for b in range(B):
        for c0 in range(0, C, chunk):
            o = order[b, c0:c0 + chunk]  # [c, N] box indices in rank order
            kept = xp.ones(o.shape, dtype=bool)
            if score_thr is not None:
                kept = xp.take_along_axis(scores[b, c0:c0 + chunk], o, axis=-1) > float(score_thr)
            s = suppress[b][o[:, :, None], o[:, None, :]] & later  # [c, N, N] in rank order
            for k in range(N):
                kept = kept & ~(kept[:, k:k + 1] & s[:, k, :])
            kept = kept & (xp.cumsum(kept.astype(np.int64), axis=-1) <= max_out)
            ci, k = xp.nonzero(kept)
            pieces.append(xp.stack([xp.full(ci.shape, b, dtype=np.int64), (ci + c0).astype(np.int64),
                                    o[ci, k].astype(np.int64)], axis=1))
    return xp.concat(pieces, axis=0) if pieces else empty
