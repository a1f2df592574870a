"""Draw the loss curve (train and held-out, nats/token vs tokens seen) from train.py's loss.csv
files, one per training stage in order; each later stage continues the token axis.

    python tools/default_model/plot_loss.py docs/default-model-loss.png stage1/loss.csv stage2/loss.csv

The kept weights (the best held-out loss of the last stage) are marked. A stage trained with
--unlikelihood-alpha logs train loss = LM loss + alpha x unlikelihood loss; its held-out loss is
the plain LM loss, like every stage's.
"""

from __future__ import annotations

import csv
import sys


def main(png_path: str, *csv_paths: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    offset = 0.0
    best = None
    for stage, path in enumerate(csv_paths, start=1):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        tokens = [offset + int(r["tokens"]) / 1e6 for r in rows]
        held = [(offset + int(r["tokens"]) / 1e6, float(r["heldout_loss"])) for r in rows if r["heldout_loss"]]
        ax.plot(tokens, [float(r["train_loss"]) for r in rows], lw=1, label=f"stage {stage}: train (one batch)")
        ax.plot(*zip(*held, strict=True), "o-", ms=3, label=f"stage {stage}: held-out (16 x 1024 tokens)")
        best = min(held, key=lambda h: h[1])
        if stage < len(csv_paths):
            ax.axvline(tokens[-1], color="black", lw=0.5)
        offset = tokens[-1]
    ax.axvline(best[0], color="gray", ls=":", lw=1)
    ax.annotate(f"kept: held-out {best[1]:.3f} nats", (best[0], best[1]), xytext=(8, 20),
                textcoords="offset points", fontsize=8)
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("mxserve default model (DeepSeek-V4, 26 M params) on the KJV, H200")
    ax.set_ylim(0, 8.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png_path)


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])
