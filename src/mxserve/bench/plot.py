"""PNG plots of benchmark results. matplotlib is optional: it is imported here only, and when it
is missing the plot is skipped with a message saying so (the JSON holds every number)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _pyplot() -> Any | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def plot_serve(result: dict[str, Any], path: Path) -> str:
    """Aggregate tok/s, per-stream tok/s and TTFT/ITL against concurrency, one line per dataset.
    Returns a one-line message: where the plot went, or why there is none."""
    plt = _pyplot()
    if plt is None:
        return "plot skipped: matplotlib is not installed (pip install matplotlib); the JSON has every number"
    levels = result["levels"]
    if not levels:
        return "plot skipped: no levels were measured"
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for dataset in dict.fromkeys(level["dataset"] for level in levels):
        rows = [level for level in levels if level["dataset"] == dataset]
        n = [r["concurrency"] for r in rows]
        axes[0].plot(n, [r["aggregate_output_tok_s"] for r in rows], "o-", label=f"{dataset} aggregate")
        axes[0].plot(n, [r["per_stream_decode_tok_s_median"] or 0 for r in rows], "s--", label=f"{dataset} per stream")
        for key, style in (("ttft_p50_s", "o-"), ("ttft_p99_s", "o:")):
            axes[1].plot(n, [1e3 * (r[key] or 0) for r in rows], style, label=f"{dataset} {key[:-2].replace('_', ' ')}")
        for key, style in (("itl_p50_s", "o-"), ("itl_p99_s", "o:")):
            axes[2].plot(n, [1e3 * (r[key] or 0) for r in rows], style, label=f"{dataset} {key[:-2].replace('_', ' ')}")
    for ax, ylabel in zip(axes, ("output tok/s", "TTFT ms", "inter-token latency ms"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    meta = result["meta"]
    fig.suptitle(f"mxserve bench serve — {Path(meta['model_dir']).name}, prompt {meta['options']['prompt_len']} / "
                 f"output {meta['options']['output_len']} tokens, {meta['date_utc']} UTC", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot: {path}"
