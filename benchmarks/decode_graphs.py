"""Greedy decoding with a past (the test zoo's GPT-2 export) where every step is a CUDA graph replay.

Each decode step feeds a past one entry longer than the last, so the feed shapes change every token
and a graph per exact shape would be captured once and never replayed. With *length buckets* the
past is left-padded to the next bucket length (``BUCKETS``) and the padding masked out by the
attention mask: all steps of a bucket share one feed-shape signature, so one graph per bucket serves
them (``InferenceSession(..., cuda_graph=True)`` keeps one per signature). The positions of the new
tokens cannot come from the padded past's length any more: the model takes them as an input,
``position_ids``, as onnxruntime's GPT-2 exports with past do (:func:`with_position_ids` rewrites the
zoo model that way).

Everything between steps stays on the device: the next token is an ``argmax`` on the device fed back
as a device array, and the present is re-padded into the next past on the device; only the mask and
positions (a few integers) are uploaded. Run it::

    GPUOPS_CUDA_BACKEND=gpuops.testing.cuda_standin python -m benchmarks.decode_graphs  # the CPU stand-in
    python -m benchmarks.decode_graphs                              # a GPU with CuPy

It prints, per step, whether the step captured or replayed a graph, the host syncs and kernel
launches the stand-in counts (host syncs only on a GPU) and the tokens, against node-by-node decoding
and an unpadded cpu reference.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import onnx

BUCKETS = (4, 8, 12, 15)
"""Past lengths the past is padded to. The zoo model's causal table has MAX_POS = 16 positions: a
padded past and the new tokens must fit in it."""


def zoo_gpt():
    from tests.zoo.models import BUILDERS

    return BUILDERS["gpt"]("batch").model


def with_position_ids(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (the zoo's GPT-2) with the positions of the new tokens as an input ``position_ids``
    (batch, sequence) int64, instead of ``Range(past length, past length + sequence)``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    ranges = {o for n in g.node if n.op_type == "Range" for o in n.output}
    (unsq,) = [n for n in g.node if n.op_type == "Unsqueeze" and n.input[0] in ranges]
    old = unsq.output[0]
    g.node.remove(unsq)
    for n in g.node:
        n.input[:] = ["position_ids" if i == old else i for i in n.input]
    g.input.append(onnx.helper.make_tensor_value_info("position_ids", onnx.TensorProto.INT64,
                                                      ["batch", "sequence"]))
    return m


def _dims(model):
    """(layers, heads, head size) from the past inputs' declared shapes."""
    past = [i for i in model.graph.input if i.name.startswith("past_")]
    dims = past[0].type.tensor_type.shape.dim
    return len(past), dims[2].dim_value, dims[4].dim_value


def bucket(length: int, buckets=BUCKETS) -> int:
    for b in buckets:
        if b >= length:
            return b
    raise ValueError(f"a past of {length} entries is longer than the largest bucket {buckets[-1]}")


def reference(model, prompt: np.ndarray, steps: int):
    """Unpadded greedy decoding on the cpu: (tokens (batch, steps), last logits of every step)."""
    import gpuops

    sess = gpuops.InferenceSession(model, device="cpu")
    layers, heads, hsize = _dims(model)
    b, s = prompt.shape
    past = [np.zeros((2, b, heads, 0, hsize), np.float32) for _ in range(layers)]
    ids, length, tokens, logits = prompt, 0, [], []
    for _ in range(steps):
        n = ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((b, length + n), np.int64),
                 "position_ids": np.broadcast_to(np.arange(length, length + n), (b, n)).astype(np.int64)}
        feeds.update({f"past_{i}": p for i, p in enumerate(past)})
        out = sess.run(None, feeds)
        last = out[0][:, -1, :]
        logits.append(last)
        ids = last.argmax(-1).astype(np.int64)[:, None]
        tokens.append(ids[:, 0])
        past, length = out[1:], length + n
    return np.stack(tokens, 1), logits


def decode(model, prompt: np.ndarray, steps: int, *, cuda_graph: bool = True, buckets=BUCKETS,
           device: str = "cuda") -> dict:
    """Greedy decoding of ``steps`` tokens after ``prompt`` (batch, length) with the past padded to
    ``buckets``, on ``device``; the first step runs the prompt. Returns the tokens, the last logits of
    every step and a record per step (host syncs, kernel launches, graph captured or replayed)."""
    import gpuops

    sess = gpuops.InferenceSession(model, device=device, cuda_graph=cuda_graph)
    dev = sess.device
    xp = dev.xp
    layers, heads, hsize = _dims(model)
    b = prompt.shape[0]
    ids = dev.asarray(prompt)
    length = 0  # real past entries
    past = None  # the padded pasts on the device
    tokens, logits, records = [], [], []
    for step in range(steps):
        n = ids.shape[1]
        padded = bucket(length, buckets)
        if padded + n > 16:
            raise ValueError("the zoo model has 16 positions: use fewer steps or a shorter prompt")
        syncs, launches = dev.host_sync_count(), dev.kernel_launch_count()
        captures = _captures(sess)
        if past is None:
            past = [xp.zeros((2, b, heads, padded, hsize), dtype=xp.float32) for _ in range(layers)]
        mask = np.zeros((b, padded + n), np.int64)
        mask[:, padded - length:] = 1
        feeds = {"input_ids": ids, "attention_mask": mask,
                 "position_ids": np.broadcast_to(np.arange(length, length + n), (b, n)).astype(np.int64)}
        feeds.update({f"past_{i}": p for i, p in enumerate(past)})
        out = sess.run(None, feeds, output_device="device")
        last = out[0][:, -1, :]
        ids = xp.reshape(xp.astype(xp.argmax(last, axis=-1), xp.int64), (b, 1))
        length += n
        nxt = bucket(length, buckets)
        past = [_repad(xp, present, length, nxt) for present in out[1:]]
        syncs = dev.host_sync_count() - syncs
        launches = None if launches is None else dev.kernel_launch_count() - launches
        status = sess.cuda_graph_status()
        records.append({"step": step, "tokens_in": n, "past": length - n, "past_padded": padded,
                        "graph": ("captured" if _captures(sess) > captures else "replayed") if status["captured"]
                        else "node by node", "host_syncs": syncs, "kernel_launches": launches})
        tokens.append(ids)
        logits.append(last)
    result = {
        "tokens": np.concatenate([dev.to_host(t) for t in tokens], 1),
        "logits": [dev.to_host(v) for v in logits],
        "steps": records,
        "graphs": sess.cuda_graph_status(per_signature=True),
    }
    sess.close()
    return result


def _captures(sess) -> int:
    return sess.cuda_graph_status(per_signature=True).get("captures", 0)


def _repad(xp, present, length: int, padded: int):
    """The last ``length`` entries of ``present`` (2, batch, heads, entries, head size), left-padded to
    ``padded`` entries (on the device)."""
    real = present[:, :, :, present.shape[3] - length:, :]
    if padded == length:
        return xp.asarray(real, copy=True)
    pad = xp.zeros((*present.shape[:3], padded - length, present.shape[4]), dtype=present.dtype)
    return xp.concatenate([pad, real], axis=3)


def per_token(records: list[dict], kind: str) -> dict:
    """Mean host syncs and kernel launches of the decode steps (not the prompt) of one kind."""
    rs = [r for r in records if r["tokens_in"] == 1 and r["graph"] == kind]
    if not rs:
        return {}
    launches = [r["kernel_launches"] for r in rs if r["kernel_launches"] is not None]
    return {"steps": len(rs), "host_syncs": sum(r["host_syncs"] for r in rs) / len(rs),
            "kernel_launches": sum(launches) / len(launches) if launches else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=9, help="the prompt's step and the decode steps after it")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--json", help="write the record here")
    a = ap.parse_args(argv)
    model = with_position_ids(zoo_gpt())
    prompt = np.random.default_rng(0).integers(0, 24, (a.batch, 5)).astype(np.int64)
    want, want_logits = reference(model, prompt, a.steps)
    report = {}
    for name, graphs in (("node_by_node", False), ("cuda_graphs", True)):
        r = decode(model, prompt, a.steps, cuda_graph=graphs)
        same = bool((r["tokens"] == want).all())
        diff = max(float(np.abs(g - w).max()) for g, w in zip(r["logits"], want_logits))
        report[name] = {"tokens_match_cpu": same, "max_abs_logit_diff": diff, "steps": r["steps"],
                        "per_token": {k: per_token(r["steps"], k) for k in ("captured", "replayed", "node by node")
                                      if per_token(r["steps"], k)}}
        print(f"{name}: tokens {'match' if same else 'DIFFER FROM'} the cpu's, max |logit diff| {diff:.2e}")
        for s in r["steps"]:
            print(f"  step {s['step']}: {s['tokens_in']} token(s), past {s['past']} padded to {s['past_padded']}, "
                  f"{s['graph']}: {s['host_syncs']} host syncs, {s['kernel_launches']} kernel launches")
        for kind, v in report[name]["per_token"].items():
            print(f"  per token ({kind}, {v['steps']} steps): {v['host_syncs']:.1f} host syncs, "
                  f"{v['kernel_launches']} kernel launches")
        if graphs:
            sigs = r["graphs"]["signatures"]
            print(f"  {len(sigs)} graphs: " + ", ".join(
                f"past {s['shapes']['past_0'][3]}: {s['replays']} replays, {s['folded_nodes']} nodes folded"
                for s in sigs))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if all(v["tokens_match_cpu"] for v in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
