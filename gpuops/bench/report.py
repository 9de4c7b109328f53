"""Benchmark results -> JSON, a Markdown table and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path

from .machine import one_line


def write_all(result: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json", out / "bench.md"]
    paths[0].write_text(json.dumps(result, indent=1, default=str))
    paths[1].write_text(markdown(result))
    paths += plots(result, out)
    return paths


def markdown(result: dict) -> str:
    peers = sorted({p for r in result["runs"] for p in r.get("peers", {})})
    head = ["model", "batch", "device", "gpuops median ms", "p90 ms", "items/s"]
    head += [f"gpuops / {p}" for p in peers] + ["outputs agree", "planned peak MB", "all intermediates MB"]
    env = result["env"]
    machine = one_line(env["machine"]) if "machine" in env else env["cpu"]
    lines = [f"gpuops benchmark — {env.get('gpu') or machine} — {env['date']}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["runs"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['device']} | error: {r['error'][:80]} |")
            continue
        g = r["gpuops"]
        row = [r["model"], str(r["batch"]), r["device"], f"{g['median_ms']:.2f}", f"{g['p90_ms']:.2f}",
               f"{g['throughput']:.1f}"]
        for p in peers:
            pr = r.get("peers", {}).get(p)
            row.append(f"{pr['ratio']:.2f}x" if pr and "ratio" in pr else "–")
        agree = [pr.get("max_abs_diff") for pr in r.get("peers", {}).values() if "max_abs_diff" in pr]
        row.append(("yes" if r["agree"] else "NO") + (f" ({max(agree):.1e})" if agree else ""))
        mem = r.get("memory", {})
        row += [f"{mem.get('planned_peak_bytes', 0) / 1e6:.1f}", f"{mem.get('intermediates_total_bytes', 0) / 1e6:.1f}"]
        lines.append("| " + " | ".join(row) + " |")
    threads = env.get("threads")
    lines += ["", "gpuops / peer = gpuops median latency / peer median latency (below 1: gpuops is faster)"
              + (f"; on the CPU every runtime ran {threads} thread(s)." if threads else ".")]
    if result.get("mdf"):
        lines += ["", "| MDF model | device | gpuops per evaluate | modeci-mdf per evaluate | gpuops / modeci-mdf | "
                  "max abs diff |", "|---|---|---|---|---|---|"]
        for r in result["mdf"]:
            if "error" in r:
                lines.append(f"| {r['model']} | {r['device']} | error: {r['error'][:80]} | | | |")
                continue
            lines.append(f"| {r['model']} | {r['device']} | {r['gpuops']['median_ms'] * 1e3:.1f} µs | "
                         f"{r['modeci_mdf']['median_ms'] * 1e3:.1f} µs | {1 / r['speedup']:.2g}x | "
                         f"{r['max_abs_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def plots(result: dict, out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    runs = [r for r in result["runs"] if "error" not in r]
    if not runs:
        return []
    labels = [f"{r['model']}\nb{r['batch']}" for r in runs]
    peers = sorted({p for r in runs for p in r.get("peers", {}) if "ratio" in r["peers"][p]})
    paths = []
    fig, ax = plt.subplots(figsize=(max(6, len(runs) * 0.9), 4))
    w = 0.8 / max(len(peers), 1)
    for i, p in enumerate(peers):
        vals = [r.get("peers", {}).get(p, {}).get("ratio", 0) for r in runs]
        ax.bar([j + i * w for j in range(len(runs))], vals, w, label=p)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")  # 2x faster and 2x slower look equally far from 1
    ax.set_xticks([j + w * (len(peers) - 1) / 2 for j in range(len(runs))], labels, fontsize=7, rotation=30)
    ax.set_ylabel("gpuops latency / peer latency (log; below 1: gpuops is faster)")
    ax.set_title(f"gpuops speed ratio ({runs[0]['device']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "ratios.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(max(6, len(runs) * 0.9), 4))
    planned = [r.get("memory", {}).get("planned_peak_bytes", 0) / 1e6 for r in runs]
    total = [r.get("memory", {}).get("intermediates_total_bytes", 0) / 1e6 for r in runs]
    ax.bar([j - 0.2 for j in range(len(runs))], total, 0.4, label="all intermediates")
    ax.bar([j + 0.2 for j in range(len(runs))], planned, 0.4, label="peak under liveness plan")
    ax.set_xticks(range(len(runs)), labels, fontsize=7, rotation=30)
    ax.set_ylabel("MB")
    ax.set_title("gpuops memory")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "memory.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
