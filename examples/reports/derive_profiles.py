#!/usr/bin/env python3
"""Derive a GPU compute profile from a measured one by a roofline transfer (docs/reports.md).

The transfer, per node (forward and backward separately), the loss, the SGD step and the lane sum:

  1. From the model's shapes (re-built here as src/nn/models.c builds them), the node's FLOPs and
     bytes: per sample, plus per step (its weights). On a device with peak P FLOP/s and memory
     bandwidth B, its roofline time at batch b is x(b) = max(F b / P, (M b + W) / B).
  2. From the source profile's rows (batch b_j, seconds t_j), a least-squares line
     t = a + s x_src(b): a is the node's fixed cost per step (launch, and a kernel too small to fill
     the device), s is 1 / (the fraction of the roofline the node reaches).
  3. On the target: t = fixed + s x_tgt(b). The efficiency 1/s carries over. fixed = the source's
     a when both devices are GPUs (or both CPUs); from a CPU to a GPU it is the node's kernels x the
     target's launch_us (a CPU's intercept is a function call, not a launch).
  A target node with no counterpart in the first source (same layer kind, same ordinal: LeNet-BN's
  BatchNorms from a LeNet profile) takes the median a per kernel and the median s of that kind's
  nodes in all sources (the BatchNorms of ResNet-18).

Device specifications are files `sim/presets/<name>.spec` (`key value  # source`): fp32_tflops,
mem_bandwidth_GBps, launch_us, kind (gpu or cpu).

  derive_profiles.py derive --source A.profile[,B.profile] --from h100 --to t4 --skeleton S.profile --out F
  derive_profiles.py check  --source CPU.profile --measured H100.profile --from cpu-here --to h100 [--markdown F]
  derive_profiles.py shipped --dptrain build/dptrain [--out sim/presets]   # every profile the reports use
  derive_profiles.py checks [--rounds 3] [--markdown F]   # the transfer's error, measured (docs/reports.md)

Standard library only.
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRESETS = os.path.join(ROOT, "sim", "presets")
sys.path.insert(0, os.path.join(ROOT, "examples", "lib"))
from scriptargs import Parser, existing_file, uint  # noqa: E402
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


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
        if k in ("model", "device", "input"):
            p[k] = body[1]
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


def save_profile(p, path, header):
    out = [f"# {h}" for h in header]
    out += ["# dptrain compute profile: seconds of one worker per node and step (docs/overhead-model.md)",
            f"model {p['model']}", f"device {p['device']}",
            f"input {p.get('input') or 'x'.join(map(str, input_shape(p['model'], p['input_floats'])))}",
            f"input_floats {p['input_floats']}",
            f"classes {p['classes']}", f"params {p['params']}", f"buffers {p['buffers']}",
            f"nodes {len(p['nodes'])}", "# node INDEX NAME KERNELS_FWD KERNELS_BWD"]
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
    """The target profile: skeleton's model and shape, rows at `batches`."""
    fitted = [(p, *fits_of(p, src_spec)) for p in sources]
    primary = fitted[0][1]
    by_ord = {(f["kind"], f["ord"]): f for f in primary}
    per_kind = {}
    for _, fits, _ in fitted:
        for f in fits:
            per_kind.setdefault(f["kind"], []).append(f)
    work, shape, extra = profile_work(skeleton)
    cpu_to_gpu = src_spec["kind"] == "cpu" and tgt_spec["kind"] == "gpu"
    used_fallback = set()

    def fixed(a, kern):
        return kern * tgt_spec["launch"] if cpu_to_gpu else a

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
                kern = skeleton["nodes"][i]["kf" if d == 0 else "kb"]
                a, s = node_fits[i][key]
                row[key][i] = fixed(a, kern) + s * roofline(nw["work"][d], b, tgt_spec)
        for key in ("loss", "opt", "sum"):
            a, s, _ = other[key]
            row[key] = fixed(a, 1) + s * roofline(extra[key], b if key == "loss" else 1, tgt_spec)
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
              "per node: t = fixed + s x roofline(target); s fitted on the source's rows; docs/reports.md"]
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
    cpu, gpu = load_profile(args.source), load_profile(args.measured)
    src, tgt = load_spec(args.src), load_spec(args.to)
    der, _ = derive([cpu], src, tgt, gpu, sorted({r["batch"] for r in gpu["rows"]}), "derived")
    rows = check_rows(der, gpu)
    bs = [b for b, *_ in rows]
    am, sm = slope(gpu, bs)
    ad, sd = slope(der, bs)
    lines = [f"Transfer {src['name']} -> {tgt['name']}: {cpu['model']} "
             f"{'x'.join(map(str, input_shape(cpu['model'], cpu['input_floats'])))}, derived from "
             f"{os.path.basename(args.source)}, against {os.path.basename(args.measured)} "
             f"({gpu['model']} {'x'.join(map(str, input_shape(gpu['model'], gpu['input_floats'])))})", "",
             "| batch | measured step ms | derived step ms | error |", "|---:|---:|---:|---:|"]
    for b, m, d, _ in rows:
        lines.append(f"| {b} | {m * 1e3:.3f} | {d * 1e3:.3f} | {100 * (d - m) / m:+.0f} % |")
    lines += ["", f"Step time as a line in the batch (least squares over these rows): measured {am * 1e6:.0f} us + "
              f"{sm * 1e6:.3f} us per sample; derived {ad * 1e6:.0f} us + {sd * 1e6:.3f} us per sample "
              f"(fixed part {100 * (ad - am) / am:+.0f} %, per-sample part {100 * (sd - sm) / sm if sm else 0:+.0f} %).",
              "", f"Per node at batch {max(bs) if rows else '-'} (forward + backward, us):", "",
              "| node | measured | derived | error |", "|---|---:|---:|---:|"]
    if rows:
        big = max(rows, key=lambda r: r[0])
        for name, m, d in big[3]:
            lines.append(f"| {name} | {m * 1e6:.1f} | {d * 1e6:.1f} | {100 * (d - m) / m:+.0f} % |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)


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


def cmd_checks(args):
    """Both checks, each over `rounds` CPU profiles measured now: the error per row as the median
    [min, max] over the rounds. 1: CPU -> H100 (the transfer between two real devices). 2: the shape
    transfer on one device (LeNet 1x28x28 -> 3x32x32 on this CPU), as the CIFAR-10 profiles use it."""
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        errs = {"h100": {}, "shape": {}}
        parts = {"h100": [], "shape": []}
        cmds = []
        for k in range(args.rounds):
            mn, cf = os.path.join(tmp, f"cpu-mnist-{k}.profile"), os.path.join(tmp, f"cpu-cifar-{k}.profile")
            c1 = run_dptrain(args.dptrain, ["--model", "lenet", "--dataset", "synthetic", "--shape", "1x28x28",
                                            "--samples", "640", "--batch-size", "64"], mn)
            c2 = run_dptrain(args.dptrain, ["--model", "lenet", "--dataset", "synthetic", "--shape", "3x32x32",
                                            "--samples", "640", "--batch-size", "64"], cf)
            if k == 0:
                cmds = [" ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else os.path.basename(c) if c.startswith(tmp) else c for c in c1),
                        " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else os.path.basename(c) if c.startswith(tmp) else c for c in c2)]
            for key, src, meas, a, b in (("h100", mn, os.path.join(PRESETS, "h100-lenet.profile"), "cpu-here", "h100"),
                                         ("shape", mn, cf, "cpu-here", "cpu-here")):
                sp, mp = load_profile(src), load_profile(meas)
                der, _ = derive([sp], load_spec(a), load_spec(b), mp, sorted({r["batch"] for r in mp["rows"]}), "d")
                rows = check_rows(der, mp)
                for bt, m, d, _ in rows:
                    errs[key].setdefault(bt, []).append((m, d))
                bs = [r[0] for r in rows]
                am, sm = slope(mp, bs)
                ad, sd = slope(der, bs)
                parts[key].append((am, sm, ad, sd))
    lines += ["Profiles measured here by (each of " + str(args.rounds) + " rounds):", "", "```", *cmds, "```", ""]
    titles = {"h100": "CPU -> H100: LeNet 1x28x28 derived from this CPU's profile (cpu-here.spec -> h100.spec) "
                      "against sim/presets/h100-lenet.profile (measured on an H100)",
              "shape": "1x28x28 -> 3x32x32 on this CPU: LeNet on CIFAR-10's shape derived from LeNet on MNIST's "
                       "(cpu-here.spec both ways) against the 3x32x32 profile measured in the same round"}
    fmt = lambda v: f"{statistics.median(v):+.0f} % [{min(v):+.0f}, {max(v):+.0f}]"
    for key in ("h100", "shape"):
        lines += [f"**{titles[key]}**", "", "| batch | measured step ms (median) | derived step ms (median) | error: median [min, max] over rounds |",
                  "|---:|---:|---:|---:|"]
        for bt in sorted(errs[key]):
            v = errs[key][bt]
            e = [100 * (d - m) / m for m, d in v]
            lines.append(f"| {bt} | {statistics.median(m for m, _ in v) * 1e3:.3f} | "
                         f"{statistics.median(d for _, d in v) * 1e3:.3f} | {fmt(e)} |")
        med = lambda i: statistics.median(p[i] for p in parts[key])
        se = [100 * (sd - sm) / sm for am, sm, ad, sd in parts[key] if sm > 0]
        lines += ["", f"As a line in the batch (step = fixed + per-sample x batch, least squares over the rows; "
                      f"medians over rounds): measured {med(0) * 1e6:.0f} us + {med(1) * 1e6:.3f} us per sample, "
                      f"derived {med(2) * 1e6:.0f} us + {med(3) * 1e6:.3f} us per sample; error of the per-sample "
                      f"part {fmt(se) if se else '-'}.", ""]
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
    c = sub.add_parser("check", help="the transfer's error between two measured devices")
    c.add_argument("--source", required=True, help="the source device's measured profile")
    c.add_argument("--measured", required=True, type=existing_file, help="the target's measured profile (its model and shape are derived)")
    c.add_argument("--from", dest="src", default="cpu-here")
    c.add_argument("--to", default="h100")
    c.add_argument("--markdown")
    s = sub.add_parser("shipped", help="write every derived profile the report scripts use")
    s.add_argument("--dptrain", default=os.path.join(ROOT, "build", "dptrain"))
    s.add_argument("--out", default=PRESETS)
    k = sub.add_parser("checks", help="the transfer's error: CPU -> H100, and 28x28 -> 32x32 on this CPU, repeated")
    k.add_argument("--dptrain", default=os.path.join(ROOT, "build", "dptrain"))
    k.add_argument("--rounds", type=uint(1), default=3)
    k.add_argument("--markdown")
    a = ap.parse_args()
    {"derive": cmd_derive, "check": cmd_check, "shipped": cmd_shipped, "checks": cmd_checks}[a.cmd](a)


if __name__ == "__main__":
    main()
