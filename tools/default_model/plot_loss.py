"""Draw the loss curve (train and held-out, nats/token vs tokens seen) from train.py's loss.csv.

    python tools/default_model/plot_loss.py .dm_data/run/loss.csv docs/default-model-loss.png
"""

from __future__ import annotations

import csv
import sys


def main(csv_path: str, png_path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt

    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    tokens = [int(r["tokens"]) / 1e6 for r in rows]
    held = [(int(r["tokens"]) / 1e6, float(r["heldout_loss"])) for r in rows if r["heldout_loss"]]
    best = min(held, key=lambda h: h[1])
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(tokens, [float(r["train_loss"]) for r in rows], label="train (one batch)", lw=1)
    ax.plot(*zip(*held, strict=True), "o-", label="held-out (16 x 1024 tokens)", ms=3)
    ax.axvline(best[0], color="gray", ls=":", lw=1)
    ax.annotate(f"kept: held-out {best[1]:.3f} nats", (best[0], best[1]), xytext=(8, 20),
                textcoords="offset points", fontsize=8)
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("mxserve default model (DeepSeek-V4, 26 M params) on the KJV, H200, 480 s")
    ax.set_ylim(0, 8.5)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
