#!/usr/bin/env python3
"""Tables from the GPU check's results (examples/gpu/check.sh, examples/bench/gpu_vs_pytorch.sh).

    gpu_tables.py bench RESULTS.jsonl [--machine TEXT] [--version TEXT]
        the benchmark table of gpu_vs_pytorch.sh's results (markdown on stdout)
    gpu_tables.py doc RESULTS.jsonl --doc docs/gpu.md
        rewrites the part of the doc between <!-- gpu-check:begin --> and <!-- gpu-check:end -->
        from a check.sh results file (docs/data/gpu_check_DATE.jsonl): the checks, the benchmarks
        and the ratios against PyTorch, so the doc's tables always come from a kept results file.

Figures: dptrain's is the median of epochs 2.. over all rounds (range min-max); PyTorch's the
median of its timed repeats' medians over all rounds (range: the repeats' min and max)."""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, existing_file, nothing_measured  # noqa: E402

PEER_OF = {  # dptrain case -> (PyTorch case, way) it is compared with
    "lenet": [("lenet", "graph"), ("lenet", "eager")],
    "lenet-bn": [("lenet-bn", "graph"), ("lenet-bn", "eager")],
    "resnet18-fp32": [("resnet18", "fp32")],
    "resnet18-tf32": [("resnet18", "tf32")],
    "resnet18-bf16": [("resnet18", "bf16")],
}


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def dp_cases(rows):
    """case -> {median, min, max, images_per_s, command, n, test_acc[]}"""
    out = {}
    for r in rows:
        if r.get("who") != "dptrain" or r.get("error"):
            continue
        c = out.setdefault(r["case"], {"s": [], "ips": [], "command": r["command"], "acc": []})
        c["s"] += r["epoch_seconds"]
        if r.get("images") and r["epoch_seconds"]:
            c["images"] = r["images"]
        if r.get("test_acc") is not None:
            c["acc"].append(r["test_acc"])
    for c in out.values():
        if c["s"]:
            c["median"], c["min"], c["max"] = statistics.median(c["s"]), min(c["s"]), max(c["s"])
            c["ips"] = c.get("images", 0) / c["median"] if c["median"] else 0
    return out


def pt_cases(rows):
    out = {}
    for r in rows:
        if r.get("who") != "pytorch":
            continue
        c = out.setdefault((r["case"], r["way"]), {"med": [], "min": [], "max": [], "ips": [],
                                                    "version": r.get("version", "")})
        c["med"].append(r["seconds"])
        c["min"].append(r.get("min", r["seconds"]))
        c["max"].append(r.get("max", r["seconds"]))
        c["ips"].append(r["images_per_s"] * r["seconds"])
    for c in out.values():
        c["median"], c["lo"], c["hi"] = statistics.median(c["med"]), min(c["min"]), max(c["max"])
        c["rate"] = statistics.median(c["ips"]) / c["median"]
    return out


def measured(rows):
    """Whether the results hold any figure: a dptrain case with epochs, a PyTorch timing, an accuracy."""
    d, p = dp_cases(rows), pt_cases(rows)
    return bool(p) or any("median" in c or c["acc"] for c in d.values())


def bench_table(rows, machine="", version=""):
    d, p = dp_cases(rows), pt_cases(rows)
    lines = []
    if machine or version:
        lines += ["Machine: %s; %s" % (machine, version), ""]
    lines += ["| who | case | s/epoch, median (min-max) | images/s | timings | command |", "|---|---|---|---|---|---|"]
    for name, c in d.items():
        if name.startswith("accuracy-") or "median" not in c:
            continue
        lines.append("| dptrain | %s | %.4f (%.4f-%.4f) | %.0f | %d | `%s` |" % (
            name, c["median"], c["min"], c["max"], c["ips"], len(c["s"]), c["command"]))
    for (case, way), c in p.items():
        lines.append("| PyTorch %s | %s %s | %.4f (%.4f-%.4f) | %.0f | %d | `examples/pytorch/gpu_reference.py` |" % (
            c["version"], case, way, c["median"], c["lo"], c["hi"], c["rate"], len(c["med"])))
    ratios = []
    for name, peers in PEER_OF.items():
        for key in peers:
            if name in d and "median" in d[name] and key in p:
                ratios.append("| %s | PyTorch %s %s | %.2fx |" % (name, key[0], key[1], p[key]["median"] / d[name]["median"]))
    for a, b in (("lenet-r4", "lenet-r1"), ("lenet-r4-dp", "lenet-r1"), ("lenet-nograph", "lenet")):
        if a in d and b in d and "median" in d[a] and "median" in d[b]:
            ratios.append("| %s | dptrain %s | %.2fx slower |" % (a, b, d[a]["median"] / d[b]["median"]))
    if ratios:
        lines += ["", "| dptrain case | against | speed (peer's time / dptrain's) |", "|---|---|---|"] + ratios
    acc = {}
    for name, c in d.items():
        if name.startswith("accuracy-") and c["acc"]:
            acc.setdefault(name.split("-")[1], []).append(c["acc"][-1])
    if acc:
        lines += ["", "| device | test accuracy after 10 epochs, seeds 1-3 | mean |", "|---|---|---|"]
        for dev, a in acc.items():
            lines.append("| %s | %s | %.4f |" % (dev, ", ".join("%.4f" % x for x in a), statistics.mean(a)))
        if "cuda" in acc and "cpu" in acc:
            lines.append("")
            lines.append("GPU - CPU: %+.2f pp" % (100 * (statistics.mean(acc["cuda"]) - statistics.mean(acc["cpu"]))))
    return "\n".join(lines) + "\n"


def check_table(rows):
    lines = ["| check | result | seconds | detail |", "|---|---|---|---|"]
    for r in rows:
        if r.get("who") == "check":
            lines.append("| %s | %s | %.0f | %s |" % (r["check"], r["status"], r.get("seconds", 0),
                                                      r.get("detail", "").replace("|", "/")))
    return "\n".join(lines) + "\n"


def main():
    a = Parser(description=__doc__.split("\n")[0])
    a.add_argument("what", choices=["bench", "doc"])
    a.add_argument("results", type=existing_file)
    a.add_argument("--machine", default="")
    a.add_argument("--version", default="")
    a.add_argument("--doc", default="docs/gpu.md")
    o = a.parse_args()
    try:
        rows = load(o.results)
    except ValueError as e:
        sys.exit("gpu_tables.py: %s: not a JSON-lines results file (%s)" % (o.results, e))
    if o.what == "bench":
        if not measured(rows):  # an empty table would read as a run that passed
            nothing_measured("gpu_tables.py", "%s holds no timing or accuracy (every case failed or none ran)"
                             % o.results)
        sys.stdout.write(bench_table(rows, o.machine, o.version))
        return
    if not os.path.isfile(o.doc):
        a.error("argument --doc: '%s' is not a file" % o.doc)
    meta = next((r for r in rows if r.get("who") == "meta"), {})
    body = ("Results file: [%s](%s) (`%s`), %s, %s.\n\n" % (
        os.path.basename(o.results), os.path.relpath(o.results, os.path.dirname(o.doc)), meta.get("command", ""),
        meta.get("machine", "?"), meta.get("date", "?")) + check_table(rows) + "\n" +
        bench_table(rows))
    text = open(o.doc).read()
    b, e = "<!-- gpu-check:begin -->", "<!-- gpu-check:end -->"
    if b not in text or e not in text:
        sys.exit("gpu_tables.py: %s has no %s ... %s section" % (o.doc, b, e))
    head, rest = text.split(b, 1)
    _, tail = rest.split(e, 1)
    with open(o.doc + ".tmp", "w") as f:
        f.write(head + b + "\n" + body + e + tail)
    os.replace(o.doc + ".tmp", o.doc)


if __name__ == "__main__":
    main()
