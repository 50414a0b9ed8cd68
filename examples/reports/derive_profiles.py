#!/usr/bin/env python3
"""Derive a GPU compute profile from a measured one by a roofline transfer (docs/overhead-model.md,
"GPU profiles derived from the H100's").

The transfer, per node (forward and backward separately), the loss, the SGD step and the lane sum:

  1. From the model's shapes (re-built here as src/nn/models.c builds them), the node's FLOPs and
     bytes: per sample, plus per step (its weights). On a device with peak P FLOP/s and memory
     bandwidth B, its roofline time at batch b is x(b) = max(F b / P, (M b + W) / B).
  2. From the source profile's rows (batch b_j, seconds t_j), a least-squares line
     t = a + s x_src(b): a is the node's fixed cost per step (launch, and a kernel too small to fill
     the device), s is 1 / (the fraction of the roofline the node reaches).
  3. On the target: t = a + s x_tgt(b): the fixed cost and the efficiency 1/s carry over. Source and
     target are of one kind (GPU to GPU, or CPU to CPU): a CPU's fixed cost is a function call, a
     GPU's its launches, so a CPU profile says nothing of a GPU's a (derive refuses the pair).
  A target node with no counterpart in the first source (same layer kind, same ordinal: LeNet-BN's
  BatchNorms from a LeNet profile) takes the median a per kernel and the median s of that kind's
  nodes in all sources (the BatchNorms of ResNet-18).

Device specifications are files `sim/presets/<name>.spec` (`key value  # source`): fp32_tflops,
mem_bandwidth_GBps, launch_us, kind (gpu or cpu). This machine's CPU has no preset: its spec is
measured (build/bench_cpu_spec) into build/cpu-here.spec on first use, and again when /proc/cpuinfo
names another CPU.

  derive_profiles.py derive --source A.profile[,B.profile] --from h100 --to t4 --skeleton S.profile --out F
  derive_profiles.py check  --source A.profile[,B.profile] --from h100 --to h200 --measured H200.profile
                            [--markdown F] [--json F]   # the derived profile against a measured one
  derive_profiles.py shipped --dptrain build/dptrain [--out sim/presets]   # every profile the reports use
  derive_profiles.py checks [--rounds 3] [--markdown F]   # the shape transfer's error on this CPU
                                                          # (docs/overhead-model.md)
  derive_profiles.py cpu-spec [--out build/cpu-here.spec]   # measure this machine's CPU (if not done)

`check` calls the same derive() with the same sources as `shipped` (tests/derive_profiles_check.sh
holds them to it: checked against the shipped files, every row's error is 0).

Standard library only.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRESETS = os.path.join(ROOT, "sim", "presets")
BUILD = os.path.join(ROOT, "build")
sys.path.insert(0, os.path.join(ROOT, "examples", "lib"))
from scriptargs import Parser, existing_file, uint  # noqa: E402
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def die(msg):
    """A bad argument or input: one line, exit 2."""
    print(f"derive_profiles.py: {msg}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------
# profiles

def load_profile(path):
    p = {"path": path, "nodes": [], "rows": [], "buckets": [], "overheads": [], "comments": []}
    row = None
    for line in open(path):
        body = line.split("#", 1)[0].split()
        if not body:
            if line.startswith("#"):
                p["comments"].append(line.rstrip("\n"))
            continue
        k = body[0]
        if k in ("model", "device", "input", "precision"):
            p[k] = body[1]
        elif k == "tf32":
            p[k] = int(body[1])
        elif k in ("input_floats", "classes", "params", "buffers"):
            p[k] = int(body[1])
        elif k == "nodes":
            p["n_nodes"] = int(body[1])
        elif k == "buckets":
            p["n_buckets"] = int(body[1])
        elif k == "node":
            p["nodes"].append({"name": body[2], "kf": int(body[3]), "kb": int(body[4])})
        elif k == "bucket":
            p["buckets"].append((int(body[2]), int(body[3])))
        elif k == "overhead":
            p["overheads"].append(body[1:])
        elif k == "row":
            row = {"batch": int(body[1]), "conc": int(body[2]), "steps": int(body[3]), "loss": float(body[4]),
                   "opt": float(body[5]), "sum": float(body[6]) if len(body) > 6 else 0.0, "fwd": {}, "bwd": {}}
            p["rows"].append(row)
        elif k == "time":
            row["fwd"][int(body[1])] = float(body[2])
            row["bwd"][int(body[1])] = float(body[3])
        else:
            sys.exit(f"{path}: unknown key '{k}'")
    return p


def numerics(p):
    """The precision and tf32 p's times are of (a profile without the lines: fp32, tf32 off)."""
    return p.get("precision", "fp32"), p.get("tf32", 0)


def save_profile(p, path, header):
    out = [f"# {h}" for h in header]
    out += ["# dptrain compute profile: seconds of one worker per node and step (docs/overhead-model.md)",
            f"model {p['model']}", f"device {p['device']}",
            f"input {p.get('input') or 'x'.join(map(str, input_shape(p['model'], p['input_floats'])))}",
            f"input_floats {p['input_floats']}",
            f"classes {p['classes']}", f"params {p['params']}", f"buffers {p['buffers']}",
            f"nodes {len(p['nodes'])}"]
    # as dptrain writes them; it reads a profile without the lines as fp32, tf32 off (the shipped ones)
    if numerics(p) != ("fp32", 0):
        out += [f"precision {numerics(p)[0]}", f"tf32 {numerics(p)[1]}"]
    out += ["# node INDEX NAME KERNELS_FWD KERNELS_BWD"]
    out += [f"node {i} {n['name']} {n['kf']} {n['kb']}" for i, n in enumerate(p["nodes"])]
    out += [f"buckets {len(p['buckets'])}", "# bucket INDEX FLOATS READY_AFTER_NODE"]
    out += [f"bucket {i} {f} {r}" for i, (f, r) in enumerate(p["buckets"])]
    out.append("# row BATCH CONCURRENT STEPS LOSS_S OPT_S LANE_SUM_S, then time NODE FWD_S BWD_S per node")
    for r in p["rows"]:
        out.append(f"row {r['batch']} {r['conc']} 0 {r['loss']:.6e} {r['opt']:.6e} {r['sum']:.6e}")
        out += [f"time {i} {r['fwd'][i]:.6e} {r['bwd'][i]:.6e}" for i in range(len(p["nodes"]))]
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def load_spec(name):
    path = name if os.sep in name else os.path.join(PRESETS, name + ".spec")
    if not os.path.isfile(path):
        hint = (" (this machine's CPU is measured, not shipped: derive_profiles.py cpu-spec writes "
                "build/cpu-here.spec; give that path)" if name == "cpu-here" else
                f"; the specs: {', '.join(sorted(f[:-5] for f in os.listdir(PRESETS) if f.endswith('.spec')))}, or a path")
        die(f"spec {name}: no file {os.path.relpath(path, os.getcwd())}{hint}")
    spec = {"name": os.path.basename(path).rsplit(".", 1)[0], "path": path}
    for line in open(path):
        body = line.split("#", 1)[0].split()
        if len(body) >= 2:
            spec[body[0]] = body[1]
    for k in ("fp32_tflops", "mem_bandwidth_GBps", "launch_us"):
        spec[k] = float(spec[k])
    spec["flops"] = spec["fp32_tflops"] * 1e12
    spec["bw"] = spec["mem_bandwidth_GBps"] * 1e9
    spec["launch"] = spec["launch_us"] * 1e-6
    spec.setdefault("kind", "gpu")
    return spec


# ---------------------------------------------------------------------------------------------
# the models' shapes (src/nn/models.c), and each node's FLOPs and bytes

def input_shape(model, input_floats):
    for c in (1, 3):
        hw = math.isqrt(input_floats // c)
        if c * hw * hw == input_floats:
            return (c, hw, hw)
    sys.exit(f"input of {input_floats} floats per sample: not CxHxH with C 1 or 3")


def model_nodes(model, shape, classes):
    """[(name, kind, in_shape, out_shape, weight_floats, extra)] in the order of models.c."""
    nodes = []

    def out_of(x):
        return shape if x is None else nodes[x][3]

    def add(name, kind, src, out, w=0, extra=None):
        if not name:
            name = {"avgpool": "avgpool"}.get(kind, kind) + str(len(nodes))
        nodes.append((name, kind, out_of(src), out, w, extra))
        return len(nodes) - 1

    def conv(name, x, co, k, s, pad, bias):
        c, h, w = out_of(x)
        ho, wo = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
        return add(name, "conv", x, (co, ho, wo), co * c * k * k + (co if bias else 0), {"k": k})

    def bn(name, x):
        c = out_of(x)[0]
        return add(name, "bn", x, out_of(x), 2 * c)

    def relu(x):
        return add(None, "relu", x, out_of(x))

    def maxpool(x, k, s, pad):
        c, h, w = out_of(x)
        return add(None, "maxpool", x, (c, (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1), 0, {"k": k})

    def flatten(x):
        c, h, w = out_of(x)
        return add(None, "flatten", x, (c * h * w, 1, 1))

    def linear(name, x, o):
        n = out_of(x)[0] * out_of(x)[1] * out_of(x)[2]
        return add(name, "linear", x, (o, 1, 1), n * o + o)

    if model in ("lenet", "lenet-bn"):
        b = model == "lenet-bn"
        x = conv("conv1", None, 6, 5, 1, 0, True)
        x = bn("bn1", x) if b else x
        x = maxpool(relu(x), 2, 2, 0)
        x = conv("conv2", x, 16, 5, 1, 0, True)
        x = bn("bn2", x) if b else x
        x = flatten(maxpool(relu(x), 2, 2, 0))
        x = linear("fc1", x, 120)
        x = relu(bn("bn3", x) if b else x)
        x = linear("fc2", x, 84)
        x = relu(bn("bn4", x) if b else x)
        linear("fc3", x, classes)
    elif model == "resnet18":
        x = conv("conv1", None, 64, 7, 2, 3, False)
        x = maxpool(relu(bn("bn1", x)), 3, 2, 1)
        for s, planes in enumerate((64, 128, 256, 512)):
            for blk in range(2):
                pre, stride, inp = f"layer{s + 1}.{blk}", 2 if s > 0 and blk == 0 else 1, x
                y = relu(bn(pre + ".bn1", conv(pre + ".conv1", inp, planes, 3, stride, 1, False)))
                y = bn(pre + ".bn2", conv(pre + ".conv2", y, planes, 3, 1, 1, False))
                short = inp
                if stride != 1 or out_of(inp)[0] != planes:
                    short = bn(pre + ".downsample.1", conv(pre + ".downsample.0", inp, planes, 1, stride, 0, False))
                x = relu(add(None, "add", y, out_of(y)))
                del short
        c, h, w = out_of(x)
        x = add(None, "avgpool", x, (c, 1, 1))
        x = flatten(x)
        linear("fc", x, classes)
    else:
        sys.exit(f"model {model}: not known to this script (lenet, lenet-bn, resnet18)")
    return nodes


def size(s):
    return s[0] * s[1] * s[2]


def node_work(kind, i, o, w, extra):
    """(fwd, bwd): each (FLOPs per sample, bytes per sample, bytes per step). fp32: 4 bytes a float."""
    n_in, n_out = size(i), size(o)
    if kind in ("conv", "linear"):
        k = extra["k"] if extra else 1
        macs = n_out * i[0] * k * k
        return ((2 * macs + n_out, 4 * (n_in + n_out), 4 * w),          # y = W x + b
                (4 * macs + n_out, 4 * (n_in + 2 * n_out + n_in), 8 * w))  # dx and dW; reads x, dy; writes dx
    if kind == "bn":   # mean/var pass, normalise+affine pass; backward: two reductions, one write
        return ((8 * n_in, 4 * 3 * n_in, 4 * w), (12 * n_in, 4 * 5 * n_in, 8 * w))
    if kind == "relu":
        return ((n_in, 8 * n_in, 0), (n_in, 12 * n_in, 0))
    if kind == "maxpool":
        k = extra["k"]
        return ((n_out * k * k, 4 * (n_in + n_out), 0), (n_out, 4 * (2 * n_in + n_out), 0))
    if kind == "avgpool":
        return ((n_in, 4 * (n_in + n_out), 0), (n_in, 4 * (n_in + n_out), 0))
    if kind == "add":
        return ((n_out, 12 * n_out, 0), (n_out, 12 * n_out, 0))
    if kind == "flatten":
        return ((0, 8 * n_in, 0), (0, 8 * n_in, 0))
    raise ValueError(kind)


def roofline(work, batch, spec):
    flops, bytes_sample, bytes_step = work
    return max(flops * batch / spec["flops"], (bytes_sample * batch + bytes_step) / spec["bw"])


def profile_work(p):
    """Per node: kind, ordinal among its kind, (fwd, bwd) work; plus the loss, SGD and lane sum."""
    shape = input_shape(p["model"], p["input_floats"])
    built = model_nodes(p["model"], shape, p["classes"])
    names = [n["name"] for n in p["nodes"]]
    if [b[0] for b in built] != names:
        sys.exit(f"{p['path']}: nodes {names} are not {p['model']}'s as this script builds it "
                 f"({[b[0] for b in built]})")
    seen, out = {}, []
    for name, kind, i, o, w, extra in built:
        out.append({"kind": kind, "ord": seen.get(kind, 0), "work": node_work(kind, i, o, w, extra)})
        seen[kind] = seen.get(kind, 0) + 1
    K, P = p["classes"], p["params"]
    extra = {"loss": (8 * K, 4 * (2 * K + 1), 0),   # softmax, log, its gradient
             "opt": (6 * P, 0, 20 * P),       # momentum SGD: p, g, m read; p, m written (per step)
             "sum": (P, 0, 12 * P)}           # one lane's gradients added into another's
    return out, shape, extra


# ---------------------------------------------------------------------------------------------
# the transfer

def fit_line(xs, ts, floor):
    """t = a + s x, least squares, a >= 0, s >= 0; one point (or one x): a = min(t, floor)."""
    n = len(xs)
    if n == 1 or max(xs) - min(xs) < 1e-15 * max(xs):
        t = sum(ts) / n
        a = min(t, floor)
        x = sum(xs) / n
        return a, (t - a) / x if x > 0 else 0.0
    mx, mt = sum(xs) / n, sum(ts) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    s = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sxx
    a = mt - s * mx
    if a < 0:
        a, s = 0.0, sum(t * x for x, t in zip(xs, ts)) / sum(x * x for x in xs)
    if s < 0:
        a, s = mt, 0.0
    return a, s


def fits_of(p, spec):
    """Per node and direction, per loss/opt/sum: (a, s) from p's rows, roofline on `spec`."""
    work, _, extra = profile_work(p)
    rows = [r for r in p["rows"] if r["conc"] == 1] or p["rows"]
    gpu = spec["kind"] == "gpu"
    fits = []
    for i, nw in enumerate(work):
        f = {}
        for d, key, kern in ((0, "fwd", p["nodes"][i]["kf"]), (1, "bwd", p["nodes"][i]["kb"])):
            xs = [roofline(nw["work"][d], r["batch"], spec) for r in rows]
            ts = [r[key][i] for r in rows]
            f[key] = fit_line(xs, ts, kern * spec["launch"] if gpu else 0.0) + (kern,)
        fits.append({"kind": nw["kind"], "ord": nw["ord"], **f})
    other = {}
    for key in ("loss", "opt", "sum"):
        xs = [roofline(extra[key], r["batch"], spec) if key == "loss" else roofline(extra[key], 1, spec) for r in rows]
        ts = [r[key] for r in rows]
        other[key] = fit_line(xs, ts, spec["launch"] if gpu else 0.0) + (1,)
    return fits, other


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def derive(sources, src_spec, tgt_spec, skeleton, batches, device_name):
    """The target profile: skeleton's model and shape, rows at `batches`. Per node and direction
    (and the loss, SGD step and lane sum): t = a + s x roofline(target), (a, s) fitted on the first
    source's rows against roofline(source). The one formula of every derived profile and check."""
    if src_spec["kind"] != tgt_spec["kind"]:
        die(f"--from {src_spec['name']} is a {src_spec['kind']}, --to {tgt_spec['name']} a "
                 f"{tgt_spec['kind']}: the fixed cost per node (a function call on a CPU, launches on a GPU) does "
                 f"not carry from one kind to the other; derive from a profile measured on a {tgt_spec['kind']}")
    for p in sources:
        if numerics(p) != numerics(skeleton):
            die(f"{p['path']}: precision {numerics(p)[0]}, tf32 {numerics(p)[1]}, but the skeleton's are "
                f"{numerics(skeleton)[0]}, {numerics(skeleton)[1]}: its times are of another computation")
    fitted = [(p, *fits_of(p, src_spec)) for p in sources]
    primary = fitted[0][1]
    by_ord = {(f["kind"], f["ord"]): f for f in primary}
    per_kind = {}
    for _, fits, _ in fitted:
        for f in fits:
            per_kind.setdefault(f["kind"], []).append(f)
    work, shape, extra = profile_work(skeleton)
    used_fallback = set()
    node_fits = []
    for i, nw in enumerate(work):
        kf, kb = skeleton["nodes"][i]["kf"], skeleton["nodes"][i]["kb"]
        f = by_ord.get((nw["kind"], nw["ord"]))
        if f is not None:
            node_fits.append({"fwd": (f["fwd"][0], f["fwd"][1]), "bwd": (f["bwd"][0], f["bwd"][1])})
            continue
        same = per_kind.get(nw["kind"])
        if not same:
            sys.exit(f"no source profile has a {nw['kind']} node for {skeleton['nodes'][i]['name']}")
        used_fallback.add(nw["kind"])
        node_fits.append({key: (median([g[key][0] / g[key][2] for g in same]) * k, median([g[key][1] for g in same]))
                          for key, k in (("fwd", kf), ("bwd", kb))})
    other = fitted[0][2]
    out = dict(skeleton)
    out["device"] = device_name
    out["rows"] = []
    for b in batches:
        row = {"batch": b, "conc": 1, "fwd": {}, "bwd": {}}
        for i, nw in enumerate(work):
            for d, key in ((0, "fwd"), (1, "bwd")):
                a, s = node_fits[i][key]
                row[key][i] = a + s * roofline(nw["work"][d], b, tgt_spec)
        for key in ("loss", "opt", "sum"):
            a, s, _ = other[key]
            row[key] = a + s * roofline(extra[key], b if key == "loss" else 1, tgt_spec)
        out["rows"].append(row)
    return out, sorted(used_fallback)


def step_seconds(p, batch):
    """A worker's step at `batch` from p's rows (exact rows only): nodes + loss + SGD step."""
    for r in p["rows"]:
        if r["batch"] == batch and r["conc"] == 1:
            return sum(r["fwd"].values()) + sum(r["bwd"].values()) + r["loss"] + r["opt"]
    return None


# ---------------------------------------------------------------------------------------------
# commands

def cmd_derive(args):
    sources = [load_profile(s) for s in args.source.split(",")]
    skel = load_profile(args.skeleton) if args.skeleton else sources[0]
    src_spec, tgt_spec = load_spec(args.src), load_spec(args.to)
    out, fb = derive(sources, src_spec, tgt_spec, skel, BATCHES, args.device or tgt_spec.get("device", tgt_spec["name"]))
    shape = "x".join(map(str, input_shape(skel["model"], skel["input_floats"])))
    header = [f"DERIVED, not measured: {skel['model']} {shape} on {tgt_spec.get('device', tgt_spec['name'])} by the "
              f"roofline transfer of examples/reports/derive_profiles.py",
              f"from {', '.join(os.path.relpath(s['path'], ROOT) for s in sources)} (spec {src_spec['name']}.spec) "
              f"to spec {tgt_spec['name']}.spec" + (f"; {', '.join(fb)} nodes from the other sources' medians" if fb else ""),
              "per node: t = a + s x roofline(target), a and s fitted on the source's rows against "
              "roofline(source); docs/overhead-model.md"]
    save_profile(out, args.out, header)
    print(f"wrote {args.out}")


def check_rows(derived, measured):
    rows = []
    for r in measured["rows"]:
        b = r["batch"]
        m, d = step_seconds(measured, b), step_seconds(derived, b)
        if m is None or d is None:
            continue
        nodes = []
        for i, n in enumerate(measured["nodes"]):
            dm = r["fwd"][i] + r["bwd"][i]
            dd = next(x for x in derived["rows"] if x["batch"] == b)
            nodes.append((n["name"], dm, dd["fwd"][i] + dd["bwd"][i]))
        rows.append((b, m, d, nodes))
    return rows


def slope(p, batches):
    pts = [(b, step_seconds(p, b)) for b in batches if step_seconds(p, b) is not None]
    a, s = fit_line([float(b) for b, _ in pts], [t for _, t in pts], 0.0)
    return a, s


def cmd_check(args):
    """The profile derived from --source (as `shipped` derives) against one measured on the target."""
    sources = [load_profile(x) for x in args.source.split(",")]
    meas = load_profile(args.measured)
    skel = load_profile(args.skeleton) if args.skeleton else meas
    src, tgt = load_spec(args.src), load_spec(args.to)
    der, fb = derive(sources, src, tgt, skel, sorted({r["batch"] for r in meas["rows"] if r["conc"] == 1}), "derived")
    rows = sorted(check_rows(der, meas), key=lambda r: r[0])
    if not rows:
        die(f"--measured {args.measured}: no row of concurrency 1 to compare")
    bs = [b for b, *_ in rows]
    am, sm = slope(meas, bs)
    ad, sd = slope(der, bs)
    shape = "x".join(map(str, input_shape(meas["model"], meas["input_floats"])))
    names = ", ".join(os.path.basename(x["path"]) for x in sources)
    lines = [f"Transfer {src['name']} -> {tgt['name']}: {meas['model']} {shape} derived from {names} "
             f"(spec {src['name']} -> {tgt['name']}), against {os.path.basename(args.measured)} (measured on "
             f"{meas.get('device', '?')})", "",
             "| batch | measured step ms | derived step ms | error |", "|---:|---:|---:|---:|"]
    for b, m, d, _ in rows:
        lines.append(f"| {b} | {m * 1e3:.3f} | {d * 1e3:.3f} | {100 * (d - m) / m:+.1f} % |")
    if len(rows) > 1:
        lines += ["", f"Step time as a line in the batch (least squares over these rows): measured {am * 1e6:.0f} us + "
                  f"{sm * 1e6:.3f} us per sample; derived {ad * 1e6:.0f} us + {sd * 1e6:.3f} us per sample."]
    big = max(rows, key=lambda r: r[0])
    lines += ["", f"Per node at batch {big[0]} (forward + backward, us):", "",
              "| node | measured | derived | error |", "|---|---:|---:|---:|"]
    for name, m, d in big[3]:
        lines.append(f"| {name} | {m * 1e6:.1f} | {d * 1e6:.1f} | {100 * (d - m) / m if m else 0:+.1f} % |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"from": src["name"], "to": tgt["name"], "sources": [x["path"] for x in sources],
                       "measured": args.measured, "fallback_kinds": fb,
                       "rows": [{"batch": b, "measured_s": m, "derived_s": d,
                                 "nodes": [{"name": n, "measured_s": nm, "derived_s": nd} for n, nm, nd in nodes]}
                                for b, m, d, nodes in rows]}, f, indent=1)


def run_dptrain(dptrain, args, out_profile):
    cmd = [dptrain, "predict", *args, "--topology", "pcie4", "--threads", "1", "--save-profile", out_profile]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}")
    return cmd


# The profiles the report scripts use: (target spec, model, synthetic shape, sources).
SHIPPED = [
    ("t4", "lenet", "3x32x32", ["h100-lenet"]),          # report 001: LeNet on CIFAR-10, a T4
    ("rtx3090", "lenet", "1x28x28", ["h100-lenet"]),     # report 002: MNIST, 8x RTX 3090
    ("rtx4090", "lenet-bn", "3x32x32", ["h100-lenet", "h100-resnet18"]),  # report 000: LeNet-BN, 4x RTX 4090
    ("rtx4090", "resnet18", "3x224x224", ["h100-resnet18"]),              # report 004 on pcie4
    ("h100", "lenet-bn", "3x32x32", ["h100-lenet", "h100-resnet18"]),     # report 000's model on H100s (for 003/000)
]


def cmd_shipped(args):
    """Every derived profile the reports use, from the measured H100 ones; skeletons by dptrain."""
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for tgt, model, shape, srcs in SHIPPED:
            skel = os.path.join(tmp, f"skel-{model}-{shape}.profile")
            if not os.path.exists(skel):
                if model == "resnet18":   # the measured profile is this model and shape
                    skel = os.path.join(PRESETS, "h100-resnet18.profile")
                else:
                    run_dptrain(args.dptrain, ["--model", model, "--dataset", "synthetic", "--shape", shape,
                                               "--samples", "64", "--batch-size", "8"], skel)
            ns = argparse.Namespace(source=",".join(os.path.join(PRESETS, s + ".profile") for s in srcs),
                                    skeleton=skel, src="h100", to=tgt, device=None,
                                    out=os.path.join(args.out, f"{tgt}-{model}.profile"))
            cmd_derive(ns)


def cpu_id():
    """/proc/cpuinfo's first processor as bench_cpu_spec writes it: vendor/family/model/name."""
    f = {}
    try:
        for line in open("/proc/cpuinfo"):
            if not line.strip():
                break
            k, _, v = line.partition(":")
            f.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    name = "".join("-" if c in " \t#" else c for c in f.get("model name", "unknown"))
    return f"{f.get('vendor_id', 'unknown')}/{f.get('cpu family', '?')}/{f.get('model', '?')}/{name}"


def ensure_cpu_spec(path, bench, force=False):
    """This machine's CPU spec at `path`: measured by `bench` unless the file is there and names
    this CPU (so a build tree copied to another machine measures again)."""
    if not force and os.path.isfile(path):
        try:
            if load_spec(path).get("cpu") == cpu_id():
                return path
        except (KeyError, ValueError):
            pass
    if not os.access(bench, os.X_OK):
        sys.exit(f"derive_profiles.py: --bench {bench}: not built; build the tree (cmake --build build) first")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    r = subprocess.run([bench, "--out", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"derive_profiles.py: {bench} --out {path} failed ({r.returncode}): {r.stdout.strip()}")
    print(r.stdout.strip(), file=sys.stderr)
    return path


def cmd_cpu_spec(args):
    print(ensure_cpu_spec(args.out, args.bench, force=args.again))


def cmd_checks(args):
    """The shape transfer on this CPU, over `rounds` pairs of CPU profiles measured now: LeNet
    1x28x28 -> 3x32x32 (the step of the CIFAR-10 profiles t4-lenet, rtx4090-lenet-bn that is not a
    change of device), by derive() as `shipped` calls it, against the 3x32x32 profile measured in
    the same round (every other round measures 3x32x32 first, so that a drift of the machine's speed
    within a round does not always favour one shape). The error per row and per node at the largest
    batch: median [min, max] over the rounds."""
    spec_path = ensure_cpu_spec(args.cpu_spec, args.bench)
    spec = load_spec(spec_path)
    load0 = os.getloadavg()[0]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    errs, parts, cmds, node_errs = {}, [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            mn, cf = os.path.join(tmp, f"cpu-mnist-{k}.profile"), os.path.join(tmp, f"cpu-cifar-{k}.profile")
            pair = [(["--model", "lenet", "--dataset", "synthetic", "--shape", "1x28x28",
                      "--samples", "640", "--batch-size", "64"], mn),
                    (["--model", "lenet", "--dataset", "synthetic", "--shape", "3x32x32",
                      "--samples", "640", "--batch-size", "64"], cf)]
            ran = {out: run_dptrain(args.dptrain, a, out) for a, out in (pair if k % 2 == 0 else pair[::-1])}
            c1, c2 = ran[mn], ran[cf]
            if k == 0:
                cmds = [" ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else os.path.basename(c)
                                 if c.startswith(tmp) else c for c in cmd) for cmd in (c1, c2)]
            sp, mp = load_profile(mn), load_profile(cf)
            der, _ = derive([sp], spec, spec, mp, sorted({r["batch"] for r in mp["rows"]}), "derived")
            rows = check_rows(der, mp)
            for bt, m, d, _ in rows:
                errs.setdefault(bt, []).append((m, d))
            for name, m, d in max(rows, key=lambda r: r[0])[3]:
                node_errs.setdefault(name, []).append(100 * (d - m) / m if m else 0.0)
            bs = [r[0] for r in rows]
            parts.append((*slope(mp, bs), *slope(der, bs)))
    fmt = lambda v: f"{statistics.median(v):+.0f} % [{min(v):+.0f}, {max(v):+.0f}]"
    lines = [f"Measured {started} on {spec.get('device', '?')} ({spec['cpu']}), one core: "
             f"{spec['fp32_tflops'] * 1e3:.1f} GFLOP/s, {spec['mem_bandwidth_GBps']:.1f} GB/s "
             f"({os.path.relpath(spec_path, ROOT) if spec_path.startswith(ROOT) else spec_path}); "
             f"load average {load0:.2f} at the start.", "",
             f"Profiles measured by (each of {args.rounds} rounds):", "", "```", *cmds, "```", "",
             "**LeNet 1x28x28 -> 3x32x32 on this CPU: derived from the 1x28x28 profile, against the 3x32x32 "
             "profile measured in the same round**", "",
             "| batch | measured step ms (median) | derived step ms (median) | error: median [min, max] over rounds |",
             "|---:|---:|---:|---:|"]
    for bt in sorted(errs):
        v = errs[bt]
        lines.append(f"| {bt} | {statistics.median(m for m, _ in v) * 1e3:.3f} | "
                     f"{statistics.median(d for _, d in v) * 1e3:.3f} | {fmt([100 * (d - m) / m for m, d in v])} |")
    med = lambda i: statistics.median(p[i] for p in parts)
    se = [100 * (sd - sm) / sm for am, sm, ad, sd in parts if sm > 0]
    lines += ["", f"As a line in the batch (step = fixed + per-sample x batch, least squares over the rows; "
                  f"medians over rounds): measured {med(0) * 1e6:.0f} us + {med(1) * 1e6:.3f} us per sample, "
                  f"derived {med(2) * 1e6:.0f} us + {med(3) * 1e6:.3f} us per sample; error of the per-sample "
                  f"part {fmt(se) if se else '-'}.", "",
              f"Per node at batch {max(errs)} (forward + backward): error, median [min, max] over rounds", "",
              "| node | error |", "|---|---:|"]
    lines += [f"| {name} | {fmt(v)} |" for name, v in node_errs.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)


def main():
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("derive", help="one derived profile")
    d.add_argument("--source", required=True, help="measured profile(s), comma-separated; the first matches nodes")
    d.add_argument("--skeleton", help="a profile of the target model and shape (dptrain predict --save-profile)")
    d.add_argument("--from", dest="src", required=True, help="the source's spec (sim/presets/NAME.spec or a path)")
    d.add_argument("--to", required=True, help="the target's spec")
    d.add_argument("--device", help="the device name written into the profile")
    d.add_argument("--out", required=True)
    c = sub.add_parser("check", help="a derived profile against one measured on the target device")
    c.add_argument("--source", required=True, help="the source device's measured profile(s), comma-separated, as derive")
    c.add_argument("--measured", required=True, type=existing_file, help="the target's measured profile")
    c.add_argument("--skeleton", help="the target model's skeleton (default: the measured profile)")
    c.add_argument("--from", dest="src", required=True, help="the source's spec")
    c.add_argument("--to", required=True, help="the target's spec")
    c.add_argument("--markdown")
    c.add_argument("--json", help="the rows, measured and derived seconds, as JSON")
    s = sub.add_parser("shipped", help="write every derived profile the report scripts use")
    s.add_argument("--dptrain", default=os.path.join(BUILD, "dptrain"))
    s.add_argument("--out", default=PRESETS)
    k = sub.add_parser("checks", help="the shape transfer's error on this CPU (28x28 -> 32x32), repeated")
    k.add_argument("--dptrain", default=os.path.join(BUILD, "dptrain"))
    k.add_argument("--bench", default=os.path.join(BUILD, "bench_cpu_spec"))
    k.add_argument("--cpu-spec", default=os.path.join(BUILD, "cpu-here.spec"),
                   help="this CPU's spec; measured there first if absent or of another CPU")
    k.add_argument("--rounds", type=uint(1), default=3)
    k.add_argument("--markdown")
    q = sub.add_parser("cpu-spec", help="measure this machine's CPU into a spec (if not done)")
    q.add_argument("--bench", default=os.path.join(BUILD, "bench_cpu_spec"))
    q.add_argument("--out", default=os.path.join(BUILD, "cpu-here.spec"))
    q.add_argument("--again", action="store_true", help="measure even if the spec names this CPU")
    a = ap.parse_args()
    {"derive": cmd_derive, "check": cmd_check, "shipped": cmd_shipped, "checks": cmd_checks,
     "cpu-spec": cmd_cpu_spec}[a.cmd](a)


if __name__ == "__main__":
    main()
