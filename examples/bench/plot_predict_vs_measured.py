#!/usr/bin/env python3
"""Predicted against measured epoch time, from the summary.json that predict_vs_measured.sh leaves in
each of its output directories: one marker per row (N, mode) and run (the medians the targets are
judged on), each round's pair faint behind it, the diagonal and the targets' bands (10 % DDP, 15 % DP).

    /usr/bin/python3 examples/bench/plot_predict_vs_measured.py DIR [DIR ...] [--labels K1,K2,...]
        [--plot docs/img/predict_vs_measured.png]
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, existing_dir, need_modules, nothing_measured  # noqa: E402


def main():
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=existing_dir, help="output directories of predict_vs_measured.sh")
    ap.add_argument("--labels", help="a name per directory, comma-separated (default: the directory names)")
    ap.add_argument("--plot", default="docs/img/predict_vs_measured.png")
    a = ap.parse_args()
    labels = a.labels.split(",") if a.labels else [os.path.basename(d.rstrip("/")) for d in a.dirs]
    if len(labels) != len(a.dirs):
        ap.error("argument --labels: names %d runs, %d directories given" % (len(labels), len(a.dirs)))
    runs = []
    for d in a.dirs:
        f = os.path.join(d, "summary.json")
        if not os.path.exists(f):
            sys.exit(f"plot_predict_vs_measured.py: no {f}: run predict_vs_measured.sh (or its --report-only) first")
        runs.append(json.load(open(f))["rows"])
    if not any(runs):
        nothing_measured("plot_predict_vs_measured.py", "the summaries in %s hold no row" % ", ".join(a.dirs))
    need_modules("plot_predict_vs_measured.py", "matplotlib", hint="apt-get install python3-matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    style = {("ddp", 1): ("o", "tab:blue"), ("dp", 1): ("s", "tab:orange"),
             ("ddp", 2): ("o", "tab:green"), ("dp", 2): ("s", "tab:red")}
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    xs = [v for rows in runs for r in rows for v in [r["measured_s"]] + [p["measured_s"] for p in r["rounds"]]]
    ys = [v for rows in runs for r in rows for v in [r["predicted_s"]] + [p["predicted_s"] for p in r["rounds"]]]
    lo, hi = 0.9 * min(xs + ys), 1.05 * max(xs + ys)
    ax.plot([lo, hi], [lo, hi], color="black", lw=1)
    for frac, ls in ((0.10, "--"), (0.15, ":")):
        ax.plot([lo, hi], [lo * (1 + frac), hi * (1 + frac)], color="gray", lw=1, ls=ls)
        ax.plot([lo, hi], [lo * (1 - frac), hi * (1 - frac)], color="gray", lw=1, ls=ls,
                label=f"±{int(100 * frac)} % ({'DDP' if frac < 0.12 else 'DP'} target)")
    seen = set()
    for label, rows in zip(labels, runs):
        for r in rows:
            key = (r["mode"], min(r["devices"], 2))
            marker, color = style.get(key, ("^", "tab:gray"))
            ax.scatter([p["measured_s"] for p in r["rounds"]], [p["predicted_s"] for p in r["rounds"]],
                       marker=marker, color=color, alpha=0.18, s=18, lw=0)
            name = f"N={r['devices']} {r['mode'].upper()}"
            ax.scatter([r["measured_s"]], [r["predicted_s"]], marker=marker, color=color, s=46,
                       edgecolor="black", lw=0.6, label=name if name not in seen else None, zorder=3)
            seen.add(name)
            ax.annotate(label, (r["measured_s"], r["predicted_s"]), xytext=(4, 3), textcoords="offset points",
                        fontsize=7, color=color)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel("measured seconds per epoch (mpirun -np N, --backend mpi)")
    ax.set_ylabel("predicted seconds per epoch (dptrain predict, host topology)")
    ax.set_title("Overhead model against MPI runs, LeNet / Fashion-MNIST, batch 64, 2 cores\n"
                 "large: medians over a run's rounds (what the targets judge); faint: single rounds", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.plot) or ".", exist_ok=True)
    fig.savefig(a.plot, dpi=150)
    for label, rows in zip(labels, runs):
        print(label + ": " + ", ".join(f"N={r['devices']} {r['mode']} {100 * r['error']:+.1f}%" for r in rows))
    print(f"wrote {a.plot}")


if __name__ == "__main__":
    main()
