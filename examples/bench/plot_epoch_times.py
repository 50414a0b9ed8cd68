#!/usr/bin/env python3
"""Bar chart of median seconds per epoch (epoch 1 of every run dropped) from the logs that
epoch_time.sh, sim_overhead.sh and mpi_vs_sim.sh leave under out/: docs/img/epoch_times.png.

    /usr/bin/python3 examples/bench/plot_epoch_times.py [--out-dir out] [--plot docs/img/epoch_times.png]
"""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, need_modules, nothing_measured  # noqa: E402


def median_epoch(pattern):
    secs = []
    for f in sorted(glob.glob(pattern)):
        eps = [json.loads(l) for l in open(f) if '"epoch"' in l and '"event"' in l]
        eps = [e for e in eps if e.get("event") == "epoch"]
        secs += [e["seconds"] for e in eps[1:]]
    return statistics.median(secs) if secs else None


def main():
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default="out")
    ap.add_argument("--plot", default="docs/img/epoch_times.png")
    a = ap.parse_args()
    if not os.path.isdir(a.out_dir):
        ap.error("argument --out-dir: '%s' is not a directory (run the benchmark scripts first)" % a.out_dir)
    o = a.out_dir
    bars = [
        ("PyTorch 1.13\n2 threads", f"{o}/epoch-time/pytorch-r*.jsonl"),
        ("dptrain\nsim, 1 replica", f"{o}/epoch-time/dptrain-r*.jsonl"),
        ("sim DDP\n4 replicas", f"{o}/sim-overhead/r4-ddp-round*.jsonl"),
        ("sim DP\n4 replicas", f"{o}/sim-overhead/r4-dp-round*.jsonl"),
        ("MPI DDP\n2 processes", f"{o}/mpi-vs-sim/mpi-n2-ddp-r*.jsonl"),
        ("MPI DP\n2 processes", f"{o}/mpi-vs-sim/mpi-n2-dp-r*.jsonl"),
    ]
    rows = [(name, median_epoch(p)) for name, p in bars]
    rows = [(n, v) for n, v in rows if v is not None]
    if not rows:
        nothing_measured("plot_epoch_times.py", "no logs found under %s: run the benchmark scripts first" % o)
    need_modules("plot_epoch_times.py", "matplotlib", hint="apt-get install python3-matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 3.6))
    colors = ["tab:orange"] + ["tab:blue"] * (len(rows) - 1)
    ax.bar([n for n, _ in rows], [v for _, v in rows], color=colors[: len(rows)])
    for i, (_, v) in enumerate(rows):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("seconds per epoch (median)")
    ax.set_title("LeNet / Fashion-MNIST, global batch 64, 2 cores (same machine, same day)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.plot) or ".", exist_ok=True)
    fig.savefig(a.plot, dpi=150)
    for n, v in rows:
        print(f"{n.replace(chr(10), ' ')}: {v:.2f} s/epoch")


if __name__ == "__main__":
    main()
