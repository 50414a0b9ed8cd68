#!/usr/bin/env python3
"""Statistics, markdown tables and plots from JSON-lines training logs, for the scripts in examples/bench/.

Reads the logs of `dptrain train --log FILE` and of examples/pytorch/lenet_reference.py --log FILE (the same
field names, docs/logs.md). Needs only the Python standard library, and matplotlib for plots.

    jsonl_stats.py complete LOG --epochs E [--expect KEY=VALUE...]
        exit status 0 when LOG holds epoch lines 1..E, no error line, and a config line with the expected
        values (e.g. seed=0); 1 otherwise, with the reason on stderr. Used to reuse finished runs.

    jsonl_stats.py run --load-file FILE [--wait-idle S] -- COMMAND...
        runs COMMAND (exit status passed on) and writes to FILE, as JSON, how much CPU the rest of the
        machine used meanwhile: other_cores = (busy CPU time of the whole machine from /proc/stat - the
        command's own CPU time) / wall time. With --wait-idle S, first waits up to S seconds for the
        machine to be idle (under 0.15 cores busy over a second). epoch-time reports these files.

    jsonl_stats.py epoch-time [--drop N] [--dptrain LOG...] [--pytorch LOG...] [--meta 'KEY=VALUE'...]
                              [--command 'TEXT'...] [--title TEXT] [--md FILE]
        the median, min and max of the per-epoch "seconds" over all logs of each implementation, after
        dropping the first N epochs of every log (default 1, warm-up), and the ratio PyTorch/dptrain of
        the medians; a markdown block on stdout (and in FILE).

    jsonl_stats.py accuracy --epochs E [--dptrain SEED=LOG...] [--pytorch SEED=LOG...] [--last K]
                            [--meta 'KEY=VALUE'...] [--command 'TEXT'...] [--md FILE] [--plot PNG]
        test accuracy per epoch and seed, the mean over seeds per epoch, and the difference of the means
        (dptrain - PyTorch) at epoch E and averaged over the last K epochs (default 3); a markdown block on
        stdout (and in FILE), and a plot of the mean curves with the per-seed curves faint (PNG).
"""
import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, number, uint  # noqa: E402

NAMES = {"dptrain": "dptrain", "pytorch": "PyTorch"}
QUIET = 0.1  # an epoch is "quiet" when other processes used less than this many cores meanwhile


class LogError(Exception):
    pass


def read_log(path):
    """Returns (config dict or None, {epoch: epoch record}); raises LogError on unreadable logs or error lines."""
    config, epochs = None, {}
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise LogError("%s: cannot read (%s)" % (path, e.strerror))
    for no, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            if no == len(lines):  # a run killed while writing its last line
                continue
            raise LogError("%s:%d: not a JSON object" % (path, no))
        ev = rec.get("event")
        if ev == "config" and config is None:
            config = rec
        elif ev == "epoch":
            epochs[int(rec["epoch"])] = rec
        elif ev == "error":
            raise LogError("%s:%d: the run failed: %s" % (path, no, rec.get("message", "(no message)")))
    return config, epochs


def need_epochs(path, epochs, upto, field):
    missing = [e for e in range(1, upto + 1) if e not in epochs]
    if missing:
        raise LogError("%s: no epoch line for epoch%s %s (the run stopped early?)"
                       % (path, "s" if len(missing) > 1 else "", ",".join(map(str, missing[:10]))))
    for e in range(1, upto + 1):
        v = epochs[e].get(field)
        if not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)):
            raise LogError("%s: epoch %d has no numeric \"%s\"" % (path, e, field))


def fmt_s(x):
    return "%.2f" % x if x < 100 else "%.0f" % x


def meta_lines(meta):
    out = []
    for m in meta or []:
        k, sep, v = m.partition("=")
        out.append("- %s: %s" % (k, v) if sep else "- %s" % m)
    return out


def command_block(commands):
    if not commands:
        return []
    return ["", "Commands:", "", "```sh"] + list(commands) + ["```"]


def emit(lines, md_path):
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if md_path:
        d = os.path.dirname(md_path)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(md_path, "w") as f:
            f.write(text)


# ---------------------------------------------------------------- complete

def cmd_complete(a):
    try:
        config, epochs = read_log(a.log)
        need_epochs(a.log, epochs, a.epochs, "test_acc")
    except LogError as e:
        print(e, file=sys.stderr)
        return 1
    for item in a.expect:
        key, _, want = item.partition("=")
        have = None if config is None else config.get(key)
        try:
            # dptrain logs float32 values (lr 0.00999999978): equal to 6 significant digits is the same
            same = have is not None and math.isclose(float(have), float(want), rel_tol=1e-6, abs_tol=1e-12)
        except (TypeError, ValueError):
            same = str(have) == want
        if not same:
            print("%s: config line has %s=%s, wanted %s" % (a.log, key, have, want), file=sys.stderr)
            return 1
    return 0


# ---------------------------------------------------------------- run

def machine_busy_s():
    """Busy CPU seconds of the whole machine since boot (all CPUs), from /proc/stat; None if unavailable."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal guest guest_nice; guest time is inside user
    busy = v[0] + v[1] + v[2] + (v[5] if len(v) > 5 else 0) + (v[6] if len(v) > 6 else 0) + (v[7] if len(v) > 7 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def wait_idle(limit_s, threshold=0.15):
    import time
    t0 = time.monotonic()
    while True:
        b0, w0 = machine_busy_s(), time.monotonic()
        if b0 is None:
            return 0.0, None
        time.sleep(1.0)
        load = (machine_busy_s() - b0) / (time.monotonic() - w0)
        waited = time.monotonic() - t0
        if load < threshold or waited >= limit_s:
            return waited, load
        time.sleep(2.0)


def cmd_run(a):
    import subprocess
    import time
    cmd = a.command[1:] if a.command and a.command[0] == "--" else a.command
    if not cmd:
        print("run: no command given", file=sys.stderr)
        return 2
    info = {}
    if a.wait_idle > 0:
        waited, load = wait_idle(a.wait_idle)
        info["waited_s"], info["load_before"] = round(waited, 1), load
        if load is not None and load >= 0.15:
            print("run: machine still busy (%.2f cores) after waiting %.0f s; running anyway" % (load, waited),
                  file=sys.stderr)
    b0, w0 = machine_busy_s(), time.monotonic()
    try:
        p = subprocess.Popen(cmd)
    except OSError as e:
        print("run: cannot start %s: %s" % (cmd[0], e.strerror), file=sys.stderr)
        return 127
    while True:
        try:
            _, status, ru = os.wait4(p.pid, 0)
            break
        except InterruptedError:
            continue
    wall = time.monotonic() - w0
    b1 = machine_busy_s()
    own = ru.ru_utime + ru.ru_stime
    info.update({"wall_s": wall, "own_cpu_s": own})
    if b0 is not None and b1 is not None and wall > 0:
        info["machine_busy_cpu_s"] = b1 - b0
        info["other_cores"] = max(0.0, (b1 - b0 - own) / wall)
    with open(a.load_file, "w") as f:
        f.write(json.dumps(info) + "\n")
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def read_load(log_path):
    """The load file written by `run` next to a log (LOG with .jsonl replaced by .load.json), or None."""
    base = log_path[:-6] if log_path.endswith(".jsonl") else log_path
    try:
        with open(base + ".load.json") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- epoch-time

def collect_times(paths, drop):
    """Per-epoch seconds after dropping the first `drop` epochs of each log; also data_wait_s/compute_s."""
    secs, extra, runs, config = [], {"data_wait_s": [], "compute_s": [], "quiet": []}, [], None
    for p in paths:
        cfg, epochs = read_log(p)
        config = config or cfg
        if not epochs:
            raise LogError("%s: no epoch lines" % p)
        last = max(epochs)
        need_epochs(p, epochs, last, "seconds")
        kept = [e for e in range(drop + 1, last + 1)]
        if not kept:
            raise LogError("%s: only %d epoch(s), nothing left after dropping the first %d" % (p, last, drop))
        runs.append((p, [(epochs[e]["seconds"], epochs[e].get("other_cores")) for e in range(1, last + 1)]))
        for e in kept:
            secs.append(epochs[e]["seconds"])
            for k in ("data_wait_s", "compute_s"):
                if isinstance(epochs[e].get(k), (int, float)):
                    extra[k].append(epochs[e][k])
            oc = epochs[e].get("other_cores")
            if isinstance(oc, (int, float)) and oc < QUIET:
                extra["quiet"].append(epochs[e]["seconds"])
    return secs, extra, runs, config


def cmd_epoch_time(a):
    sides = [(k, getattr(a, k)) for k in ("dptrain", "pytorch") if getattr(a, k)]
    if not sides:
        print("epoch-time: give --dptrain and/or --pytorch logs", file=sys.stderr)
        return 2
    res = {}
    try:
        for k, paths in sides:
            res[k] = collect_times(paths, a.drop)
    except LogError as e:
        print("epoch-time: %s" % e, file=sys.stderr)
        return 1

    def label(k):
        cfg = res[k][3] or {}
        if k == "pytorch" and cfg.get("torch_version"):
            return "PyTorch %s" % cfg["torch_version"]
        if k == "dptrain" and cfg.get("version"):
            return "dptrain %s" % cfg["version"]
        return NAMES[k]

    keys = [k for k, _ in sides]
    med = {k: statistics.median(res[k][0]) for k in keys}
    train_n = {k: (res[k][3] or {}).get("train_samples", 60000) for k in keys}
    lines = ["### %s" % a.title, ""]
    lines.append("| | " + " | ".join(label(k) for k in keys) + " |")
    lines.append("|---|" + "---:|" * len(keys))
    lines.append("| median s/epoch | " + " | ".join("**%s**" % fmt_s(med[k]) for k in keys) + " |")
    lines.append("| images/s at the median | " + " | ".join("%.0f" % (train_n[k] / med[k]) for k in keys) + " |")
    lines.append("| min / max s/epoch | " + " | ".join("%s / %s" % (fmt_s(min(res[k][0])), fmt_s(max(res[k][0])))
                                                    for k in keys) + " |")
    lines.append("| epochs timed (runs x epochs after dropping %d per run) | " % a.drop
                 + " | ".join("%d (%d runs)" % (len(res[k][0]), len(res[k][2])) for k in keys) + " |")
    if "dptrain" in res and res["dptrain"][1]["compute_s"]:
        ex = res["dptrain"][1]
        row = "| dptrain median data_wait_s / compute_s | "
        vals = []
        for k in keys:
            if k == "dptrain" and ex["data_wait_s"]:
                vals.append("%.3f / %s" % (statistics.median(ex["data_wait_s"]), fmt_s(statistics.median(ex["compute_s"]))))
            else:
                vals.append("")
        lines.append(row + " | ".join(vals) + " |")
    if any(any(oc is not None for _, oc in r) for k in keys for _, r in res[k][2]):
        vals = []
        for k in keys:
            q = res[k][1]["quiet"]
            vals.append("%s (%d)" % (fmt_s(statistics.median(q)), len(q)) if q else "")
        lines.append("| median s/epoch of the quiet epochs (n), where logged | " + " | ".join(vals) + " |")
    lines.append("")
    if "dptrain" in med and "pytorch" in med:
        r = med["pytorch"] / med["dptrain"]
        lines.append("PyTorch / dptrain, median s/epoch: **%.2fx** (%s)" % (
            r, "dptrain faster" if r > 1 else "PyTorch faster" if r < 1 else "equal"))
        lines.append("")
    lines += meta_lines(a.meta)
    pcfg = (res.get("pytorch") or (None, None, None, None))[3]
    if pcfg:
        lines.append("- PyTorch threads: torch %s, OMP_NUM_THREADS %s, OPENBLAS_NUM_THREADS %s; BLAS loaded: %s"
                     % (pcfg.get("torch_threads"), pcfg.get("omp_num_threads"), pcfg.get("openblas_num_threads"),
                        pcfg.get("blas", "unknown")))
    lines.append("- Seconds per epoch of every run, in epoch order (the first %d of each run not in the statistics; "
                 "[x.xx] = cores other processes used in that epoch where the log has it and it is %.1f or more), "
                 "and the cores other processes used over the whole run:" % (a.drop, QUIET))
    others = []
    for k in keys:
        for p, r in res[k][2]:
            ld = read_load(p)
            oc = ld.get("other_cores") if ld else None
            if oc is not None:
                others.append(oc)
            ep = " ".join(fmt_s(x) + (" [%.2f]" % o if o is not None and o >= QUIET else "") for x, o in r)
            lines.append("  - %s `%s`: %s; others %s" % (NAMES[k], os.path.basename(p), ep,
                                                         "%.2f" % oc if oc is not None else "not measured"))
    if others and max(others) >= 0.2:
        lines.append("- **Warning**: other processes used up to %.2f cores during a run (mean %.2f); these timings "
                     "are not from a quiet machine." % (max(others), statistics.mean(others)))
    lines += command_block(a.command)
    emit(lines, a.md)
    return 0


# ---------------------------------------------------------------- accuracy

def parse_seed_logs(items, what):
    out = []
    for it in items or []:
        seed, sep, path = it.partition("=")
        if not sep or not seed.lstrip("-").isdigit():
            raise LogError("--%s: expected SEED=LOG, got '%s'" % (what, it))
        out.append((int(seed), path))
    return out


def cmd_accuracy(a):
    try:
        sides = {}
        for k in ("dptrain", "pytorch"):
            runs = parse_seed_logs(getattr(a, k), k)
            if not runs:
                continue
            acc = {}
            for seed, path in runs:
                _, epochs = read_log(path)
                need_epochs(path, epochs, a.epochs, "test_acc")
                acc[seed] = [epochs[e]["test_acc"] for e in range(1, a.epochs + 1)]
            sides[k] = acc
    except LogError as e:
        print("accuracy: %s" % e, file=sys.stderr)
        return 1
    if not sides:
        print("accuracy: give --dptrain and/or --pytorch SEED=LOG", file=sys.stderr)
        return 2
    E = a.epochs
    last = min(a.last, E)
    means = {k: [statistics.mean(v[e] for v in acc.values()) for e in range(E)] for k, acc in sides.items()}
    both = "dptrain" in sides and "pytorch" in sides
    keys = [k for k in ("dptrain", "pytorch") if k in sides]

    head = ["epoch"]
    for k in keys:
        head += ["%s s%d" % (NAMES[k], s) for s in sorted(sides[k])] + ["%s mean" % NAMES[k]]
    if both:
        head.append("difference (pp)")
    lines = ["### %s" % a.title, "", "Test accuracy (%) after each epoch, per seed and mean over seeds"
             + ("; difference = dptrain mean - PyTorch mean, in percentage points." if both else "."), ""]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---:|" * len(head))
    for e in range(E):
        row = [str(e + 1)]
        for k in keys:
            row += ["%.2f" % (100 * sides[k][s][e]) for s in sorted(sides[k])] + ["**%.2f**" % (100 * means[k][e])]
        if both:
            row.append("%+.2f" % (100 * (means["dptrain"][e] - means["pytorch"][e])))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for k in keys:
        finals = [sides[k][s][E - 1] for s in sorted(sides[k])]
        spread = (" (std over %d seeds %.2f pp, min %.2f%%, max %.2f%%)"
                  % (len(finals), 100 * statistics.stdev(finals), 100 * min(finals), 100 * max(finals))
                  if len(finals) > 1 else " (1 seed)")
        lines.append("- %s, epoch %d: mean %.2f%%%s; mean of the last %d epochs %.2f%%"
                     % (NAMES[k], E, 100 * means[k][E - 1], spread, last,
                        100 * statistics.mean(means[k][E - last:])))
    if both:
        d_final = means["dptrain"][E - 1] - means["pytorch"][E - 1]
        d_last = statistics.mean(means["dptrain"][E - last:]) - statistics.mean(means["pytorch"][E - last:])
        lines.append("- Difference dptrain - PyTorch: **%+.2f pp** at epoch %d, **%+.2f pp** over the last %d epochs"
                     % (100 * d_final, E, 100 * d_last, last))
    lines += meta_lines(a.meta)
    if a.plot:
        try:
            plot_accuracy(sides, means, E, a.plot, a.title)
        except ImportError as e:
            print("accuracy: cannot plot, matplotlib missing (%s): apt-get install python3-matplotlib" % e,
                  file=sys.stderr)
            return 1
        lines.append("- Plot: `%s`" % a.plot)
    lines += command_block(a.command)
    emit(lines, a.md)
    return 0


def plot_accuracy(sides, means, E, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"dptrain": "tab:blue", "pytorch": "tab:orange"}
    x = list(range(1, E + 1))
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=150)
    for k, acc in sides.items():
        for s in sorted(acc):
            ax.plot(x, [100 * v for v in acc[s]], color=colors[k], alpha=0.25, linewidth=1)
        ax.plot(x, [100 * v for v in means[k]], color=colors[k], linewidth=2.2, marker="o", markersize=3.5,
                label="%s, mean of %d seeds" % (NAMES[k], len(acc)))
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.set_xticks(x if E <= 20 else None)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv=None):
    p = Parser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("complete", help="is a log finished (exit 0) or not (exit 1)")
    c.add_argument("log")
    c.add_argument("--epochs", type=uint(1), required=True)
    c.add_argument("--expect", action="append", default=[], metavar="KEY=VALUE",
                   help="the config line must have this value (repeatable)")

    t = sub.add_parser("epoch-time", help="median seconds per epoch of dptrain and PyTorch logs")
    t.add_argument("--drop", type=uint(0), default=1, help="epochs dropped at the start of every log (default 1)")
    t.add_argument("--dptrain", nargs="*", default=[])
    t.add_argument("--pytorch", nargs="*", default=[])
    t.add_argument("--meta", action="append", default=[], help="KEY=VALUE line for the notes (repeatable)")
    t.add_argument("--command", action="append", default=[], help="a command line to list (repeatable)")
    t.add_argument("--title", default="Epoch time, LeNet / Fashion-MNIST")
    t.add_argument("--md", help="also write the markdown to this file")

    acc = sub.add_parser("accuracy", help="test accuracy per epoch over seeds, dptrain vs PyTorch")
    acc.add_argument("--epochs", type=uint(1), required=True)
    acc.add_argument("--last", type=uint(1), default=3, help="window for the late-epoch mean (default 3)")
    acc.add_argument("--dptrain", nargs="*", default=[], metavar="SEED=LOG")
    acc.add_argument("--pytorch", nargs="*", default=[], metavar="SEED=LOG")
    acc.add_argument("--meta", action="append", default=[])
    acc.add_argument("--command", action="append", default=[])
    acc.add_argument("--title", default="Test accuracy, LeNet / Fashion-MNIST")
    acc.add_argument("--md")
    acc.add_argument("--plot", help="write a PNG plot here")

    r = sub.add_parser("run", help="run a command and record the CPU use of the rest of the machine meanwhile")
    r.add_argument("--load-file", required=True)
    r.add_argument("--wait-idle", type=number(0), default=0, metavar="S",
                   help="first wait up to S seconds for an idle machine (default 0: do not wait)")
    r.add_argument("command", nargs=argparse.REMAINDER)

    a = p.parse_args(argv)
    if a.cmd == "run":
        return cmd_run(a)
    if a.cmd == "complete":
        return cmd_complete(a)
    if a.cmd == "epoch-time":
        return cmd_epoch_time(a)
    return cmd_accuracy(a)


if __name__ == "__main__":
    sys.exit(main())
