#!/usr/bin/env python3
"""The five reports' experiments (issue 20), run here and predicted on the reports' hardware.

Called by examples/reports/00N_*.sh (which parse the flags and check the prerequisites):
  reports.py --report 000 --size quick|full|smoke --out DIR [--data DIR] --dptrain PATH [--mpirun PATH]

Per report it runs dptrain (sim backend, and MPI on this CPU), asks the overhead model for the
report's hardware (a topology preset and a GPU compute profile from sim/presets), and writes
DIR/table.md (printed too), DIR/plot.png, DIR/results.json and every run's log and command under
DIR/logs/. Standard library + matplotlib.
"""
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRESETS = os.path.join(ROOT, "sim", "presets")
sys.path.insert(0, os.path.join(ROOT, "examples", "lib"))
from scriptargs import Parser, need_modules  # noqa: E402
FASHION = "/usr/share/datasets/fashion-mnist"


# ---------------------------------------------------------------------------------------------
# running dptrain

class Ctx:
    def __init__(self, a):
        self.report, self.size, self.out, self.data = a.report, a.size, a.out, a.data or ""
        self.dptrain, self.mpirun = a.dptrain, a.mpirun or ""
        self.logs = os.path.join(self.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.commands = []
        self.t0 = time.time()

    def pick(self, full, quick, smoke):
        return {"full": full, "quick": quick, "smoke": smoke}[self.size]

    def _run(self, cmd, env=None):
        self.commands.append(" ".join(shlex.quote(c) for c in cmd))
        print(f"[{time.time() - self.t0:6.0f} s] {self.commands[-1]}", file=sys.stderr, flush=True)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"reports.py: this command failed (exit {r.returncode}):\n  {self.commands[-1]}\n{r.stdout[-3000:]}")
        return r.stdout

    def train(self, name, args, mpi_np=0, save=False):
        """One training run; its log parsed: epochs, step times, final accuracy, traffic. With save, its
        final parameters are written to logs/NAME.safetensors (run["ckpt"]) for comparing on tensors."""
        log = os.path.join(self.logs, name + ".jsonl")
        base = [self.dptrain, "train", *args, "--log", log, "--no-progress", "--quiet"]
        ckpt = os.path.join(self.logs, name + ".safetensors") if save else None
        if ckpt:
            base += ["--save", ckpt]
        if self.size == "smoke":
            base += ["--max-steps", "8"]
            if "--samples" in base:   # less synthetic data to make (a sanitized build runs this too)
                i = base.index("--samples") + 1
                base[i] = str(min(int(base[i]), 2000))
        env = None
        if mpi_np:
            env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            cmd = [self.mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(mpi_np), *base,
                   "--backend", "mpi", "--threads", "1"]
        else:
            cmd = base
        t = time.time()
        self._run(cmd, env)
        run = {"name": name, "cmd": self.commands[-1], "wall_s": time.time() - t, "epochs": [], "steps": [],
               "final_acc": None, "config": None, "ckpt": ckpt}
        for line in open(log):
            o = json.loads(line)
            ev = o.get("event")
            if ev == "epoch":
                run["epochs"].append(o)
            elif ev == "step":
                run["steps"].append(o["seconds"])
            elif ev == "final":
                run["final_acc"] = o["test_acc"]
            elif ev == "config":
                run["config"] = o
        return run

    def predict(self, name, args, topology, compute, replicas=0, extra=()):
        """dptrain predict with a compute profile: {(mode, devices): the predict object}."""
        log = os.path.join(self.logs, name + ".jsonl")
        cmd = [self.dptrain, "predict", *args, "--topology", topology, "--compute", compute, "--log", log, "--quiet"]
        if replicas:
            cmd += ["--replicas", str(replicas)]
        cmd += list(extra)
        self._run(cmd)
        out = {}
        for line in open(log):
            o = json.loads(line)
            if o.get("event") == "predict":
                out[(o["mode"], o["devices"])] = o
        return out


# ---------------------------------------------------------------------------------------------
# data sets

def cifar_args(ctx):
    if ctx.data:
        return ["--dataset", "cifar10", "--data", ctx.data], f"CIFAR-10 from {ctx.data}", True
    return (["--dataset", "synthetic", "--shape", "3x32x32", "--samples", "50000"],
            "synthetic data of CIFAR-10's shape and size (50,000 3x32x32 images; timing only: accuracy is chance)",
            False)


def mnist_args(ctx):
    if ctx.data:
        return ["--dataset", "mnist", "--data", ctx.data], f"MNIST from {ctx.data}", True
    if os.path.isdir(FASHION):
        return (["--dataset", "fashion-mnist"],
                "Fashion-MNIST (MNIST's shape and size, 60,000 1x28x28; its accuracy is not MNIST's)", True)
    return (["--dataset", "synthetic", "--shape", "1x28x28", "--samples", "60000"],
            "synthetic data of MNIST's shape and size (60,000 1x28x28; timing only: accuracy is chance)", False)


def accuracy_args(ctx, cifar):
    """Real data for the accuracy runs: the report's when given, Fashion-MNIST otherwise."""
    if ctx.data:
        return (["--dataset", "cifar10" if cifar else "mnist", "--data", ctx.data],
                ("CIFAR-10" if cifar else "MNIST") + f" from {ctx.data}")
    if os.path.isdir(FASHION):
        return ["--dataset", "fashion-mnist"], "Fashion-MNIST (real images standing in for the report's data set)"
    return (["--dataset", "synthetic", "--shape", "3x32x32" if cifar else "1x28x28", "--samples", "10000"],
            "synthetic data (no real data set here: the accuracy effects cannot show)")


def topology_copy(ctx, preset, name, **changes):
    """A preset with some keys changed, written into the output directory."""
    lines = []
    for line in open(os.path.join(PRESETS, preset)):
        key = line.split("#", 1)[0].split()
        if key and key[0] in changes:
            line = f"{key[0]} {changes[key[0]]}   # changed from the {preset} preset by reports.py\n"
        elif key and key[0] == "name":
            line = f"name {name}\n"
        lines.append(line)
    path = os.path.join(ctx.out, name)
    with open(path, "w") as f:
        f.writelines(lines)
    return path


# ---------------------------------------------------------------------------------------------
# checkpoints compared on their tensors

def safetensors_tensors(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file (8-byte header length, JSON header, data)."""
    import struct
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    head = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    return {k: (v["dtype"], tuple(v["shape"]), data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__"}


def compare_tensors(a, b):
    """Two checkpoints' tensors: (True, 0.0) when every tensor has the same bytes; otherwise (False, the
    largest max|x - y| / max|x| of a tensor, over the F32 tensors that differ: their difference against
    the tensor's scale, not a near-zero element's)."""
    import array
    ta, tb = safetensors_tensors(a), safetensors_tensors(b)
    if sorted(ta) != sorted(tb):
        raise SystemExit(f"reports.py: {a} and {b} hold different tensors")
    same, worst = True, 0.0
    for k in ta:
        if ta[k] == tb[k]:
            continue
        same = False
        if ta[k][0] != "F32" or ta[k][1] != tb[k][1]:
            worst = math.inf
            continue
        x, y = array.array("f", ta[k][2]), array.array("f", tb[k][2])
        scale = max(max(map(abs, x)), max(map(abs, y)))
        diff = max(abs(u - v) for u, v in zip(x, y))
        worst = max(worst, diff / scale if scale > 0 else math.inf)
    return same, worst


def bits_text(a, b):
    same, worst = compare_tensors(a["ckpt"], b["ckpt"])
    return "the same bits (every checkpoint tensor)" if same else f"not the same bits (largest difference {worst:.1e} of a tensor's largest value)"


# ---------------------------------------------------------------------------------------------
# figures

def epoch_stats(run):
    """Seconds per epoch: median, min, max over epochs 2.. (all when fewer than 3), and how many."""
    s = [e["seconds"] for e in run["epochs"]]
    use = s[1:] if len(s) >= 3 else s
    return statistics.median(use), min(use), max(use), len(use)


def step_stats(run, skip=10):
    """Seconds per step: median and the 10th-90th percentile of the steps after the first `skip`."""
    s = sorted(run["steps"][skip:] if len(run["steps"]) > 2 * skip else run["steps"])
    q = lambda f: s[min(len(s) - 1, int(f * (len(s) - 1) + 0.5))]
    return statistics.median(s), q(0.1), q(0.9), len(s)


def fmt_epoch(run, scale=1.0, unit="s/epoch"):
    m, lo, hi, n = epoch_stats(run)
    if n == 1:
        return f"{m * scale:.2f} {unit} (from 1 epoch)"
    return f"{m * scale:.2f} {unit} [{lo * scale:.2f}-{hi * scale:.2f} over {n} epochs]"


def fmt_step(run):
    m, lo, hi, n = step_stats(run)
    return f"{m * 1e3:.2f} ms/step [p10-p90 {lo * 1e3:.2f}-{hi * 1e3:.2f}, {n} steps]"


def acc(run):
    return f"{100 * run['final_acc']:.2f} %" if run["final_acc"] is not None else "-"


def loader_share(run):
    w = sum(e["data_wait_s"] for e in run["epochs"])
    t = sum(e["seconds"] for e in run["epochs"])
    return w / t if t else 0.0


def breakdown(p):
    """The model's split of one predicted step, in ms."""
    ms = lambda k: 1e3 * p[k]
    if p["mode"] == "dp" and p["devices"] > 1:
        return (f"DP serial chain {ms('serial_s'):.3f} + compute {ms('compute_s'):.3f} + host {ms('host_s'):.3f} ms "
                f"(one thread launches for {p['devices']} devices)")
    if p["devices"] > 1:
        return (f"compute {ms('compute_s'):.3f} + exposed comm {ms('exposed_comm_s'):.3f} (of {ms('comm_s'):.3f}) "
                f"+ host {ms('host_s'):.3f} ms")
    return f"compute {ms('compute_s'):.3f} + host {ms('host_s'):.3f} ms"


def pred_text(p, epochs=None, steps_scale=1.0, unit="s/epoch"):
    e = p["epoch_s"] * steps_scale
    t = f"{e:.2f} {unit} ({1e3 * p['step_s']:.3f} ms/step)"
    if epochs:
        t += f", {e * epochs:.1f} s for {epochs} epochs"
    return t


def machine():
    cpu = "?"
    try:
        for line in subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    load = os.getloadavg()
    return (f"{cpu}, {os.cpu_count()} cores ({platform.system()} {platform.release()}); "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")


# ---------------------------------------------------------------------------------------------
# report 000: LeNet-BN on CIFAR-10, 4x RTX 4090: single, DP, DDP (torchrun, 80 epochs, lr not scaled)

def report_000(ctx):
    data, data_note, real = cifar_args(ctx)
    common = ["--model", "lenet-bn", *data, "--lr", "0.001", "--momentum", "0.9", "--workers", "4"]
    e10 = ctx.pick(10, 3, 1)
    e80 = ctx.pick(80, 3, 1)
    single = ctx.train("single", [*common, "--batch-size", "64", "--epochs", str(e10)])
    dp = ctx.train("dp4", [*common, "--batch-size", "64", "--epochs", str(e10), "--replicas", "4", "--mode", "dp"])
    ddp = ctx.train("ddp4", [*common, "--batch-size", "256", "--epochs", str(e80), "--replicas", "4"])
    mpi = {}
    if ctx.mpirun:
        me = ctx.pick(3, 1, 1)
        mpi["dp"] = ctx.train("mpi-dp4", [*common, "--batch-size", "64", "--epochs", str(me), "--mode", "dp"], 4)
        mpi["ddp"] = ctx.train("mpi-ddp4", [*common, "--batch-size", "256", "--epochs", str(me)], 4)
    prof = os.path.join(PRESETS, "rtx4090-lenet-bn.profile")
    p64 = ctx.predict("predict-b64", ["--model", "lenet-bn", *data, "--batch-size", "64"], "pcie4", prof)
    p256 = ctx.predict("predict-b256", ["--model", "lenet-bn", *data, "--batch-size", "256"], "pcie4", prof)
    m = lambda r, k: (f"{fmt_epoch(r)}, {acc(r)}" + (f"; MPI 4 ranks: {fmt_epoch(mpi[k])}" if k in mpi else ""))
    rows = [
        {"setup": "1 GPU, batch 64, 10 epochs", "report": "3.29 s/epoch, 65.39 %",
         "measured": m(single, None), "predicted": pred_text(p64[("ddp", 1)], 10),
         "breakdown": breakdown(p64[("ddp", 1)]), "r": 3.29, "p": p64[("ddp", 1)]["epoch_s"], "run": single},
        {"setup": "4 GPUs nn.DataParallel, batch 64, 10 epochs", "report": "25.3 s/epoch, 66.80 %",
         "measured": m(dp, "dp"), "predicted": pred_text(p64[("dp", 4)], 10),
         "breakdown": breakdown(p64[("dp", 4)]), "r": 25.3, "p": p64[("dp", 4)]["epoch_s"], "run": dp},
        {"setup": "4 GPUs DDP (torchrun), 64 per GPU = global 256, 80 epochs, lr 0.001", "report": "1.80 s/epoch, 64.16 %",
         "measured": m(ddp, "ddp"), "predicted": pred_text(p256[("ddp", 4)], 80),
         "breakdown": breakdown(p256[("ddp", 4)]), "r": 1.80, "p": p256[("ddp", 4)]["epoch_s"], "run": ddp},
    ]
    # what no report could do: the accuracy gap taken apart, one effect per run
    adata, anote = accuracy_args(ctx, True)
    ae = ctx.pick(10, 3, 1)
    acom = ["--model", "lenet-bn", *adata, "--lr", "0.001", "--momentum", "0.9", "--epochs", str(ae)]
    a1 = ctx.train("acc-1", [*acom, "--batch-size", "64"], save=True)
    a4 = ctx.train("acc-ddp4", [*acom, "--batch-size", "64", "--replicas", "4"])
    a4s = ctx.train("acc-ddp4-syncbn", [*acom, "--batch-size", "64", "--replicas", "4", "--sync-bn"], save=True)
    # the report's DDP run: per-replica BatchNorm (no SyncBatchNorm in its code), 64 per GPU
    a256 = ctx.train("acc-ddp4-b256", [*acom, "--batch-size", "256", "--replicas", "4"])
    a256s = ctx.train("acc-ddp4-b256-lrx4", [*acom, "--batch-size", "256", "--replicas", "4",
                                             "--lr-scale", "linear", "--lr-ref-batch", "64"])
    a256d = ctx.train("acc-ddp4-b256-droplast", [*acom, "--batch-size", "256", "--replicas", "4", "--drop-last"])
    syncbn_bits = bits_text(a4s, a1)
    last = lambda r: r["epochs"][-1]["train_loss"]
    extra = [
        {"effect": "per-replica BN statistics (16 samples each) vs one device's 64",
         "runs": "1 device vs DDP 4 replicas, global batch 64",
         "result": f"{acc(a1)} vs {acc(a4)}; train loss {last(a1):.4f} vs {last(a4):.4f}"},
        {"effect": "the same with --sync-bn (statistics over the global batch)",
         "runs": "DDP 4 replicas --sync-bn, global batch 64",
         "result": f"{acc(a4s)}; train loss {last(a4s):.4f}; checkpoint against one device's: {syncbn_bits}"},
        {"effect": "global batch 4x larger, lr not scaled (the report's DDP run: 64 per GPU, its own BatchNorm "
                   "statistics per GPU)",
         "runs": f"DDP 4, global 256, lr 0.001, {ae} epochs",
         "result": f"{acc(a256)}; train loss {last(a256):.4f} (global 64: {last(a4):.4f})"},
        {"effect": "lr scaled with the batch (linear rule: 0.004)",
         "runs": "the same with --lr-scale linear --lr-ref-batch 64",
         "result": f"{acc(a256s)}; train loss {last(a256s):.4f}"},
        {"effect": "the last partial batch (kept: the default, as PyTorch's DataLoader)",
         "runs": "global 256 with --drop-last",
         "result": f"{acc(a256d)} vs {acc(a256)} kept; train loss {last(a256d):.4f} vs {last(a256):.4f}; steps per "
                   f"epoch {len(a256d['steps']) // len(a256d['epochs'])} vs {len(a256['steps']) // len(a256['epochs'])}"},
    ]
    curves = {"1 replica, batch 64": a1, "DDP 4, batch 64, per-replica BN": a4,
              "DDP 4, batch 64, --sync-bn" + (" (= 1 replica's bits)" if "the same bits" in syncbn_bits else ""): a4s,
              "DDP 4, batch 256, lr 0.001 (the report's)": a256, "DDP 4, batch 256, lr 0.004": a256s}
    return {"title": "000: LeNet-BN on CIFAR-10, 4x RTX 4090: one GPU, nn.DataParallel, DDP",
            "data": data_note, "accuracy_data": anote, "hardware": "pcie4 preset (4x RTX 4090, no P2P) + "
            "sim/presets/rtx4090-lenet-bn.profile (derived from the H100's)", "rows": rows,
            "unit": "s/epoch", "extra": extra, "curves": curves, "real": real}


# ---------------------------------------------------------------------------------------------
# report 001: LeNet on CIFAR-10, batch 4, one T4; DataParallel "simulated"; the 4-GPU guess

def report_001(ctx):
    data, data_note, real = cifar_args(ctx)
    common = ["--model", "lenet", *data, "--batch-size", "4", "--lr", "0.1", "--momentum", "0.9",
              "--lr-steps", "10,20", "--workers", "2"]
    if ctx.size == "full":
        lim = ["--epochs", "25"]
    else:
        lim = ["--epochs", "1", "--max-steps", str(ctx.pick(0, 3000, 8))]
    std = ctx.train("standard", [*common, *lim])
    sdp = ctx.train("dp4-one-device", [*common, *lim, "--replicas", "4", "--mode", "dp"])
    sddp = ctx.train("ddp4-one-device", [*common, *lim, "--replicas", "4"])
    prof = os.path.join(PRESETS, "t4-lenet.profile")
    pargs = ["--model", "lenet", *data, "--batch-size", "4"]
    pt = ctx.predict("predict-pcie3", pargs, "pcie3", prof)
    free = topology_copy(ctx, "pcie3", "pcie3-comm-free", bus_bandwidth_GBps=1e6, latency_us=0, host_call_us=0,
                         host_bandwidth_GBps=1e6, host_latency_us=0, p2p=1)
    pf = ctx.predict("predict-comm-free", pargs, free, prof)
    # the report's "simulated" DataParallel: 4 logical replicas on the one T4. The model's case of
    # replicas sharing a device (the sim's own): shared_memory_bus with 1 device, so the 4 replicas'
    # kernels take turns on it; the split and the merge are copies within the T4's memory (320 GB/s
    # read + write: 160 GB/s, t4.spec); one lane and one thread per replica, as on a GPU
    shared = topology_copy(ctx, "pcie3", "t4-shared-by-4", devices=1, shared_memory_bus=1, p2p=1,
                           bus_bandwidth_GBps=160, latency_us=4, host_bandwidth_GBps=160, host_latency_us=4)
    ps = ctx.predict("predict-t4-shared", pargs, shared, prof, replicas=4, extra=["--chunks", "1", "--threads", "1"])
    steps = 12500   # 50,000 / 4
    ms = lambda r: step_stats(r)[0] * 1e3
    tot = lambda p: p["step_s"] * steps * 25
    sim = ps[("dp", 4)]
    rows = [
        {"setup": "1 T4, batch 4, 25 epochs", "report": "19.24 ms/batch, 504.28 s, 87.36 % (its own figures "
         "disagree: 19.24 ms x 12,500 batches x 25 epochs = 6,013 s; 504.28 s is 1.61 ms a batch)",
         "measured": f"1 replica: {fmt_step(std)}, {acc(std)}", "predicted": f"{1e3 * pt[('ddp', 1)]['step_s']:.3f} ms/step, "
         f"{tot(pt[('ddp', 1)]):.0f} s", "breakdown": breakdown(pt[("ddp", 1)]),
         "r": 19.24, "p": 1e3 * pt[("ddp", 1)]["step_s"], "run": std, "m": ms(std), "cpu": "1 replica"},
        {"setup": "\"simulated\" DataParallel: 4 replicas sharing the one T4, split and merge",
         "report": "34.80 ms/batch, 573.91 s, 87.74 %",
         "measured": f"DP over 4 replicas in one process on this CPU: {fmt_step(sdp)}, {acc(sdp)}",
         "predicted": f"{1e3 * sim['step_s']:.3f} ms/step ({sim['speedup']:.2f}x of one T4), {tot(sim):.0f} s",
         "breakdown": f"4 replicas taking turns on one T4: compute {1e3 * sim['compute_s']:.3f} + split and merge "
                      f"{1e3 * sim['serial_s']:.3f} + host {1e3 * sim['host_s']:.3f} ms",
         "r": 34.80, "p": 1e3 * sim["step_s"], "run": sdp, "m": ms(sdp), "cpu": "DP, 4 replicas in one process"},
        {"setup": "4 real T4s, communication assumed free (the report's 34.80 / 4)", "report": "8.70 ms/batch, 2.21x, 228.18 s",
         "measured": f"DDP over 4 replicas in one process on this CPU: {fmt_step(sddp)}",
         "predicted": f"DDP {1e3 * pf[('ddp', 4)]['step_s']:.3f} ms/step ({pf[('ddp', 4)]['speedup']:.2f}x), "
                      f"DP {1e3 * pf[('dp', 4)]['step_s']:.3f} ms/step ({pf[('dp', 4)]['speedup']:.2f}x)",
         "breakdown": "comm free: " + breakdown(pf[("ddp", 4)]), "r": 8.70, "p": 1e3 * pf[("ddp", 4)]["step_s"],
         "run": sddp, "m": ms(sddp), "cpu": "DDP, 4 replicas in one process"},
        {"setup": "DDP on 4 real T4s, with communication (pcie3)", "report": "-",
         "measured": "-", "predicted": f"{1e3 * pt[('ddp', 4)]['step_s']:.3f} ms/step ({pt[('ddp', 4)]['speedup']:.2f}x), "
         f"{tot(pt[('ddp', 4)]):.0f} s", "breakdown": breakdown(pt[("ddp", 4)]),
         "r": None, "p": 1e3 * pt[("ddp", 4)]["step_s"]},
        {"setup": "DataParallel on 4 real T4s, with communication (pcie3)", "report": "-",
         "measured": "-", "predicted": f"{1e3 * pt[('dp', 4)]['step_s']:.3f} ms/step ({pt[('dp', 4)]['speedup']:.2f}x), "
         f"{tot(pt[('dp', 4)]):.0f} s", "breakdown": breakdown(pt[("dp", 4)]),
         "r": None, "p": 1e3 * pt[("dp", 4)]["step_s"]},
    ]
    one = pt[("ddp", 1)]
    extra = [{"effect": "4 devices with communication instead of \"communication assumed free\"",
              "runs": "dptrain predict on pcie3 (4x T4) vs the same with free links",
              "result": f"DDP {pt[('ddp', 4)]['speedup']:.2f}x and DP {pt[('dp', 4)]['speedup']:.2f}x of one T4 "
                        f"({1e3 * one['step_s']:.3f} ms); with free links DDP {pf[('ddp', 4)]['speedup']:.2f}x: "
                        f"a batch of 4 is one sample per GPU, whose step is the kernels' fixed cost, not 1/4 of a batch"}]
    return {"title": "001: LeNet on CIFAR-10, batch 4, one T4; DataParallel on one GPU; the 4-GPU estimate",
            "data": data_note,
            "assumed": ["the model: dptrain's LeNet (conv 6 and 16 channels, fc 120-84-10); the report's "
                        "\"improved, VGG-style\" LeNet names its 5x5 kernels and fc widths, not its channels",
                        "2 loader workers (the report does not say)"], "hardware": "pcie3 preset (4x T4 on PCIe 3.0, estimates); for the simulated DP the "
            "same T4 shared by 4 replicas (t4-shared-by-4, written beside the table); sim/presets/t4-lenet.profile "
            "(derived)", "rows": rows, "unit": "ms/step", "extra": extra, "real": real}


# ---------------------------------------------------------------------------------------------
# report 002: MNIST, DDP over NCCL on 1/2/4/8 RTX 3090, batch 64 per process; Gloo on 8

def report_002(ctx):
    data, data_note, real = mnist_args(ctx)
    common = ["--model", "lenet", *data, "--lr", "0.01", "--momentum", "0.9", "--workers", "1"]
    ep = ctx.pick(10, 3, 1)
    prof = os.path.join(PRESETS, "rtx3090-lenet.profile")
    topo = topology_copy(ctx, "pcie4", "pcie4-8x3090", devices=8, device="RTX-3090")
    rep = {1: 200.97, 2: 117.07, 4: 170.21, 8: 228.03}
    # the report's table as written: its speed-up column and accuracy per row
    col = {1: "1.00", 2: "1.67", 4: "2.22", 8: "2.86"}
    racc = {1: "99.56", 2: "99.43", 4: "99.46", 8: "99.37"}
    gloo = [(1, 331.55, "1.25", "99.55"), (2, 128.20, "1.25", "99.49"), (8, 126.65, "0.83", "99.34")]
    speed = lambda t, c: f"speed-up column {c}; its times give {rep[1] / t:.2f}"
    rows, preds, fixed = [], {}, None
    for n in (1, 2, 4, 8):
        b = 64 * n
        run = ctx.train(f"ddp{n}", [*common, "--batch-size", str(b), "--epochs", str(ep), "--replicas", str(n)])
        mtxt = fmt_epoch(run, 10, "s")
        if ctx.mpirun and n <= ctx.pick(2, 2, 1):
            mr = ctx.train(f"mpi-ddp{n}", [*common, "--batch-size", str(b), "--epochs", str(ctx.pick(3, 2, 1))], n)
            mtxt += f"; MPI {n} rank{'s' if n > 1 else ''}: {fmt_epoch(mr, 10, 's')}"
        p = ctx.predict(f"predict-b{b}", ["--model", "lenet", *data, "--batch-size", str(b)], topo, prof)
        preds[n] = p[("ddp", n)]
        rows.append({"setup": f"{n} GPU{'s' if n > 1 else ''}, NCCL, 64 per GPU (global {b}), 10 epochs",
                     "report": f"{rep[n]:.2f} s, {racc[n]} % ({speed(rep[n], col[n])})",
                     "measured": mtxt + f" (median epoch x 10), {acc(run)}",
                     "predicted": f"{preds[n]['epoch_s'] * 10:.2f} s for 10 epochs ({1e3 * preds[n]['step_s']:.3f} ms/step)",
                     "breakdown": breakdown(preds[n]), "r": rep[n], "p": preds[n]["epoch_s"] * 10, "run": run,
                     "m": epoch_stats(run)[0] * 10, "cpu": f"DDP, {n} replica{'s' if n > 1 else ''} in one process"})
    for n, t, c, a in gloo:
        rows.append({"setup": f"{n} GPU{'s' if n > 1 else ''}, Gloo, 64 per GPU (global {64 * n}), 10 epochs",
                     "report": f"{t:.2f} s, {a} % ({speed(t, c)})",
                     "measured": "- (the same steps as NCCL's row: dptrain has no Gloo)",
                     "predicted": "not modelled (no Gloo topology preset)", "breakdown": "-", "r": t, "p": None})
    fixed = ctx.predict("predict-global64", ["--model", "lenet", *data, "--batch-size", "64"], topo, prof)
    share = lambda n: 100 * preds[n]["epoch_s"] * 10 / rep[n]
    extra = [{"effect": "why 4 and 8 GPUs were slower than 2",
              "runs": "dptrain predict on 8x RTX 3090 (pcie4, no P2P), 64 per GPU and, the other reading, 64 in all",
              "result": "64 per GPU: the model's 10 epochs are " + ", ".join(
                  f"{preds[n]['epoch_s'] * 10:.1f} s on {n}" for n in (1, 2, 4, 8)) +
              f": {min(share(n) for n in (1, 2, 4, 8)):.1f}-{max(share(n) for n in (1, 2, 4, 8)):.1f} % of the report's "
              "times, falling with N: the rest is outside the training step the model covers (data loading, process "
              "start-up, evaluation), and the model cannot say which of those grew with N. 64 in all: step " + ", ".join(
                  f"{1e3 * fixed[('ddp', n)]['step_s']:.3f} ms on {n} (exposed comm {1e3 * fixed[('ddp', n)]['exposed_comm_s']:.3f})"
                  for n in (1, 2, 4, 8)) + ": a LeNet step is the kernels' fixed cost, and 2(N-1) ring steps "
              "through host memory grow with N"}]
    return {"title": "002: MNIST, DDP on 1/2/4/8 RTX 3090 (NCCL), Gloo on 1/2/8", "data": data_note,
            "assumed": ["the model: dptrain's LeNet (the report names none)",
                        "SGD lr 0.01, momentum 0.9 (the report names no optimizer)", "1 loader worker",
                        "batch 64 per process (the DataLoader's batch under DistributedSampler)"],
            "hardware": "pcie4 preset with 8 devices (RTX 3090 without NVLink, no P2P) + sim/presets/rtx3090-lenet.profile "
            "(derived)", "rows": rows, "unit": "s (10 epochs)", "extra": extra, "real": real}


# ---------------------------------------------------------------------------------------------
# report 003: MNIST CNN on 8x H100: baseline, DDP, DP; loader workers 0/2/4

def report_003(ctx):
    data, data_note, real = mnist_args(ctx)
    common = ["--model", "lenet", *data, "--batch-size", "32", "--lr", "0.01", "--momentum", "0.9", "--augment"]
    ep = ctx.pick(10, 3, 1)
    e = ["--epochs", str(ep)]
    prof = os.path.join(PRESETS, "h100-lenet.profile")
    p = ctx.predict("predict-b32", ["--model", "lenet", *data, "--batch-size", "32"], "nvlink4", prof)
    spec = [("baseline, 0 workers", "72.80 s (99.08 %)", 72.80, ["--workers", "0"], ("ddp", 1)),
            ("baseline, 2 workers", "34.96 s (99.10 %)", 34.96, ["--workers", "2"], ("ddp", 1)),
            ("baseline, 4 workers", "18.47 s (99.07 %)", 18.47, ["--workers", "4"], ("ddp", 1)),
            ("DDP, 1 process, 0 workers", "75.58 s (99.09 %)", 75.58, ["--workers", "0"], ("ddp", 1)),
            ("DDP, 1 process, 4 workers", "20.27 s (99.09 %)", 20.27, ["--workers", "4"], ("ddp", 1)),
            ("DDP, 8 GPUs (torchrun), 4 workers", "26.11 s (98.93 %)", 26.11, ["--workers", "4", "--replicas", "8"],
             ("ddp", 8)),
            ("DataParallel, 8 GPUs", "160.88 s (98.94 %)", 160.88, ["--workers", "4", "--replicas", "8", "--mode", "dp"],
             ("dp", 8))]
    # the report's own per-iteration load and update times (ms) for the baseline's worker counts
    lu = {"baseline, 0 workers": (6.4, 1.1), "baseline, 2 workers": (4.3, 1.2), "baseline, 4 workers": (0.5, 1.2)}
    iters = 60000 // 32 * 10
    rows, runs = [], {}
    for i, (setup, rtext, rv, args, key) in enumerate(spec):
        bound = ""
        if setup in lu:
            ld, up = lu[setup]
            rtext += (f"; its per-iteration load {ld} + update {up} ms x {iters:,} iterations = "
                      f"{(ld + up) * iters / 1e3:.1f} s, not {rv:.2f} s")
            bound = (f"; by the report's own figures (load {ld} ms, update {up} ms an iteration) "
                     + ("loader-bound" if ld > up else "not loader-bound: the update takes longer"))
        reused = setup.startswith("DDP, 1 process") and ctx.size != "full"
        if reused:
            # in dptrain one replica is the same run, DDP or not: the baseline's is reused
            run = runs[setup.replace("DDP, 1 process", "baseline")]
        else:
            run = ctx.train(f"run{i}", [*common, *e, *args])
        runs[setup] = run
        pr = p[key]
        ls = loader_share(run)
        rows.append({"setup": setup + ", batch 32, 10 epochs", "report": rtext,
                     "measured": ("the baseline's run (one replica): " if reused else "")
                                 + f"{fmt_epoch(run, 10, 's')} (median epoch x 10), {acc(run)}; waiting for data "
                                 f"{100 * ls:.0f} % of the loop",
                     "predicted": f"{pr['epoch_s'] * 10:.2f} s for 10 epochs ({1e3 * pr['step_s']:.3f} ms/step)",
                     "breakdown": breakdown(pr) + f"; the report's time is {rv / (pr['epoch_s'] * 10):.0f}x this: "
                                  f"{100 * (1 - pr['epoch_s'] * 10 / rv):.0f} % outside the step"
                                  + bound,
                     "r": rv, "p": pr["epoch_s"] * 10, "run": run, "m": epoch_stats(run)[0] * 10,
                     "cpu": setup.replace("baseline", "1 replica").replace("DDP, 1 process", "DDP, 1 replica")
                                 .replace("8 GPUs (torchrun)", "8 replicas").replace("DataParallel, 8 GPUs",
                                                                                      "DataParallel, 8 replicas")
                            + (" (the baseline's run)" if reused else "")})
    # the accuracy spread: seeds, and DDP 8 = 1 replica bitwise
    adata, anote = accuracy_args(ctx, False)
    ae = ctx.pick(10, 2, 1)
    acom = ["--model", "lenet", *adata, "--batch-size", "32", "--lr", "0.01", "--momentum", "0.9", "--augment",
            "--epochs", str(ae), "--workers", "2"]
    seeds = [ctx.train(f"acc-seed{s}", [*acom, "--seed", str(s)], save=s == 0) for s in range(ctx.pick(3, 3, 2))]
    d8 = ctx.train("acc-ddp8-seed0", [*acom, "--seed", "0", "--replicas", "8"], save=True)
    p8 = ctx.train("acc-dp8-seed0", [*acom, "--seed", "0", "--replicas", "8", "--mode", "dp"], save=True)
    p1 = ctx.train("acc-dp1-seed0", [*acom, "--seed", "0", "--replicas", "1", "--mode", "dp"], save=True)
    accs = [100 * r["final_acc"] for r in seeds]
    extra = [{"effect": "the accuracy differences (99.19 / 98.93 / 98.94 %)",
              "runs": f"one replica, seeds 0..{len(seeds) - 1}; DDP and DP over 8 replicas, seed 0 ({ae} epochs)",
              "result": f"seeds: {', '.join(f'{a:.2f}' for a in accs)} % (spread {max(accs) - min(accs):.2f} points); "
                        f"DDP 8: {acc(d8)}, DP 8: {acc(p8)}. Checkpoints, tensor by tensor: DDP 8 against one "
                        f"replica: {bits_text(d8, seeds[0])}; DP 8 against one replica: {bits_text(p8, seeds[0])}; "
                        f"DP 8 against DP on one replica (--mode dp --replicas 1): {bits_text(p8, p1)}"},
             {"effect": "the last partial batch", "runs": "-",
              "result": "60,000 / 32 = 1875 full batches (4 per GPU on 8): none here"}]
    return {"title": "003: MNIST CNN on 8x H100: baseline, DDP, DataParallel; loader workers", "data": data_note,
            "assumed": ["the model: dptrain's LeNet (the report's CNN is not shown)",
                        "SGD lr 0.01, momentum 0.9 (the report names no optimizer)",
                        "random affine augmentation as dptrain's --augment (the report's parameters are not shown)"],
            "accuracy_data": anote, "hardware": "nvlink4 preset (8x H100 SXM) + sim/presets/h100-lenet.profile "
            "(measured on an H100)", "rows": rows, "unit": "s (10 epochs)", "extra": extra, "real": real}


# ---------------------------------------------------------------------------------------------
# report 004: ResNet-18 on random 3x224x224, batch 256: DP vs DDP, traffic per step

def mb(v):
    return f"{v / 1e6:.2f} MB" if v >= 1e4 else f"{v / 1e3:.2f} kB"


def model_traffic(mode, n, params, buffers, batch, inputs, classes):
    """Bytes per step and device by the overhead model's formulas (docs/overhead-model.md, sim/model.c):
    the busiest device's link, ring all-reduce 2(N-1)/N S, pipelined broadcast and reduce S."""
    b = -(-batch // n)
    if mode == "ddp":
        return {"allreduce": 2 * (n - 1) / n * 4 * params, "broadcast": 4 * buffers}
    return {"broadcast": 4 * (params + buffers), "scatter": (n - 1) * 4 * b * (inputs + classes),
            "gather": (n - 1) * 4 * b * (classes + 1), "reduce": 4 * params}


def report_004(ctx):
    batch = ctx.pick(256, 16, 8)
    steps = ctx.pick(3, 2, 1)
    n = 4
    common = ["--model", "resnet18", "--dataset", "synthetic", "--shape", "3x224x224", "--samples",
              str(batch * steps), "--batch-size", str(batch), "--lr", "0.02", "--momentum", "0.9",
              "--weight-decay", "1e-4", "--nesterov", "--epochs", "1", "--workers", "1"]
    runs = {m: ctx.train(f"{m}{n}", [*common, "--replicas", str(n), "--mode", m]) for m in ("dp", "ddp")}
    # the blog's code: DataParallel takes BATCH_SIZE = 256 in all; its DDP script makes 256 per process
    # (torchrun, one process a GPU), so a global 256 x N; 100 steps an epoch either way
    pa = lambda g: ["--model", "resnet18", "--dataset", "synthetic", "--shape", "3x224x224", "--samples",
                    str(g), "--batch-size", str(g)]
    prof = os.path.join(PRESETS, "h100-resnet18.profile")
    pdp = ctx.predict("predict-dp-b256", pa(256), "nvlink4", prof)
    pddp = {d: ctx.predict(f"predict-ddp-b{256 * d}", pa(256 * d), "nvlink4", prof, replicas=d) for d in (4, 8)}
    cfg = runs["ddp"]["config"]
    params = cfg["params"]
    words = open(prof).read().split()
    buffers = int(words[words.index("buffers") + 1])
    rows, traffic = [], {}
    claims = {"dp": "the master alone does loss, gradient reduction and update, and re-broadcasts the weights "
                    "every step",
              "ddp": "all-reduce overlapped with backward; every GPU steps"}
    one = pdp[("ddp", 1)]
    for m in ("dp", "ddp"):
        ep = runs[m]["epochs"][-1]
        st = ep["steps"]
        sim = {k: (ep.get(f"{k}_bytes", 0) / st, ep.get(f"{k}_link_bytes", 0) / st)
               for k in ("allreduce", "broadcast", "reduce", "allgather", "gather", "scatter") if ep.get(f"{k}_calls")}
        mod = model_traffic(m, n, params, buffers, batch, 3 * 224 * 224, 10)
        traffic[m] = {"sim": sim, "model": mod}
        simtxt = ", ".join(f"{k} {mb(v[1])} (payload {mb(v[0])})" for k, v in sim.items())
        modtxt = ", ".join(f"{k} {mb(v)}" for k, v in mod.items())
        for dev in (4, 8):
            q = pdp[("dp", dev)] if m == "dp" else pddp[dev][("ddp", dev)]
            g = 256 if m == "dp" else 256 * dev
            per = f"{g // dev} per GPU" if m == "dp" else "256 per process"
            rows.append({"setup": f"{'DataParallel' if m == 'dp' else 'DDP'}, {dev} GPUs, batch {g} in all ({per})",
                         "report": claims[m],
                         "measured": (f"{n} replicas, batch {batch} in all: {fmt_step(runs[m])}; traffic per step and "
                                      f"replica, busiest link: {simtxt}; the model's: {modtxt}") if dev == n else "-",
                         "predicted": f"{1e3 * q['step_s']:.1f} ms/step, {q['step_s'] * 100:.2f} s per 100-step "
                                      f"epoch; {g * one['step_s'] / (256 * q['step_s']):.2f}x one GPU's images per "
                                      f"second (one GPU: {1e3 * one['step_s']:.1f} ms per 256)",
                         "breakdown": breakdown(q), "r": None, "p": 1e3 * q["step_s"],
                         "cpu": f"{'DataParallel' if m == 'dp' else 'DDP'}, {n} replicas in one process"})
    extra = [{"effect": "DP's and DDP's traffic per step, measured in the sim beside the model's",
              "runs": f"sim, {n} replicas, batch {batch}, DP and DDP",
              "result": "busiest link per step: " + "; ".join(f"{m.upper()}: sim " + ", ".join(f"{k} {mb(v[1])}" for k, v in t["sim"].items())
                                  + " / model " + ", ".join(f"{k} {mb(v)}" for k, v in t["model"].items())
                                  for m, t in traffic.items())}]
    return {"title": "004: ResNet-18 on random 3x224x224, batch 256: DataParallel vs DDP",
            "data": f"synthetic 3x224x224 (the report's own random data), {steps} step(s) of batch {batch} per run here",
            "assumed": ["the hardware: the blog names no GPU; predicted on 8x H100 SXM over NVLink (nvlink4), the "
                        "GPU whose ResNet-18 profile is measured (sim/presets/h100-resnet18.profile)"],
            "hardware": "none named by the blog (see the assumption)",
            "pred_label": "dptrain's model on 8x H100 SXM (assumed)", "rows": rows, "unit": "ms/step", "extra": extra,
            "traffic": traffic, "real": True}


REPORTS = {"000": report_000, "001": report_001, "002": report_002, "003": report_003, "004": report_004}


# ---------------------------------------------------------------------------------------------
# output

def table_md(ctx, res):
    L = [f"## {res['title']}", "",
         f"Data here: {res['data']}. Report's hardware: {res['hardware']}.", ""]
    if res.get("assumed"):
        L += ["Assumed (not in the report): " + "; ".join(res["assumed"]) + ".", ""]
    L += [
         "| setup | the report | dptrain measured here | dptrain predicted on the report's hardware | the model's breakdown (per step) |",
         "|---|---|---|---|---|"]
    for r in res["rows"]:
        L.append(f"| {r['setup']} | {r['report']} | {r['measured']} | {r['predicted']} | {r['breakdown']} |")
    L += ["", "What no report could do" + (f" (accuracy runs on {res['accuracy_data']})" if res.get("accuracy_data") else "")
          + ":", "", "| effect | runs | result |", "|---|---|---|"]
    for e in res["extra"]:
        L.append(f"| {e['effect']} | {e['runs']} | {e['result']} |")
    L += ["", f"Size: {ctx.size}. Machine: {machine()}. Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC. "
          f"Wall time: {time.time() - ctx.t0:.0f} s. Measured figures: medians with [min-max] over epochs 2.. "
          f"(all epochs when fewer than 3), or over steps 11.. with the 10th-90th percentile; "
          f"the commands are in commands.txt.", ""]
    return "\n".join(L)


AXIS = {"s/epoch": "seconds per epoch", "ms/step": "milliseconds per step (one batch)",
        "s (10 epochs)": "seconds for 10 epochs", "ms/step (ResNet-18)": "milliseconds per step"}


def cpu_name(m=None):
    m = m or machine()
    return m.split(" (")[0].split(";")[0]


def _label_bars(ax, bars, fmt):
    """Each bar's value at its end, inside the axes."""
    for bar in bars:
        w = bar.get_width()
        if w > 0:
            ax.annotate(fmt(w), (w, bar.get_y() + bar.get_height() / 2), xytext=(3, 0), textcoords="offset points",
                        va="center", fontsize=7)


def plot(ctx, res, path):
    """Two panels: the report's figures beside the model's prediction on its hardware (linear axis, the
    values on the bars); and what dptrain did on this CPU (times, accuracy curves, or traffic)."""
    import textwrap
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = res["rows"]
    unit = AXIS.get(res["unit"], res["unit"])
    fmt = lambda v: f"{v:.3g}"
    height = max(4.8, 0.62 * len(rows) + 2.2)
    fig, axes = plt.subplots(1, 2, figsize=(14, height), gridspec_kw={"width_ratios": [1.15, 1]})
    ax = axes[0]
    wrap = lambda t: textwrap.fill(t, 34)
    y = list(range(len(rows)))
    h = 0.38
    rv = [r["r"] if r.get("r") is not None else 0 for r in rows]
    pv = [r["p"] if r.get("p") is not None else 0 for r in rows]
    if any(rv):
        _label_bars(ax, ax.barh([v - h / 2 for v in y], rv, h, label="the report (PyTorch, its GPUs)", color="#999999"), fmt)
    if any(pv):
        _label_bars(ax, ax.barh([v + h / 2 for v in y], pv, h, label=res.get("pred_label", "dptrain's model on the "
                                "report's hardware"), color="#1f77b4"), fmt)
    for i, r in enumerate(rows):   # say why a bar is missing
        if r.get("r") is None and any(rv):
            ax.annotate("no time in the report", (0, i - h / 2), xytext=(3, 0), textcoords="offset points",
                        va="center", fontsize=7, color="#555555")
        if r.get("p") is None:
            ax.annotate("not predicted", (0, i + h / 2), xytext=(3, 0), textcoords="offset points", va="center",
                        fontsize=7, color="#555555")
    ax.set_yticks(y)
    ax.set_yticklabels([wrap(r["setup"]) for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.18 * max(rv + pv))
    ax.set_xlabel(unit + " (linear axis from 0)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("the report's figure and the model's prediction" if any(rv) else
                 "the report gives no times: the model's prediction alone", fontsize=9)
    ax = axes[1]
    here = f"this CPU ({cpu_name(res.get('machine'))})"
    if "traffic" in res:
        cats, simv, modv = [], [], []
        for m, t in res["traffic"].items():
            for k in list(dict.fromkeys(list(t["sim"]) + list(t["model"]))):
                cats.append(f"{'DP' if m == 'dp' else 'DDP'} {k}")
                simv.append(t["sim"].get(k, (0, 0))[1] / 1e6)
                modv.append(t["model"].get(k, 0) / 1e6)
        ys = list(range(len(cats)))
        mbfmt = lambda v: f"{v:.3g} MB" if v >= 1 else f"{v * 1e3:.3g} kB"
        _label_bars(ax, ax.barh([v - h / 2 for v in ys], simv, h, label=f"counted by the sim on {here}",
                                color="#2ca02c"), mbfmt)
        _label_bars(ax, ax.barh([v + h / 2 for v in ys], modv, h, label="the model's formula", color="#1f77b4",
                                hatch="//", alpha=0.75), mbfmt)
        ax.set_yticks(ys)
        ax.set_yticklabels(cats, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.25 * max(simv + modv))
        ax.set_xlabel("MB per step over the busiest replica's link (linear axis from 0)")
        ax.legend(fontsize=7, loc="lower right")
        ax.set_title("traffic per step: counted in the sim and by the model's formula", fontsize=9)
    elif res.get("curves"):
        # lines that coincide (the same bits) stay visible: each its own marker and dash, the first hollow
        styles = [("o", "-", 10), ("s", "--", 6), ("^", ":", 6), ("D", "-.", 5), ("v", "--", 6)]
        for i, (name, run) in enumerate(res["curves"].items()):
            mk, ls, sz = styles[i % len(styles)]
            ax.plot([e["epoch"] for e in run["epochs"]], [100 * e["test_acc"] for e in run["epochs"]], marker=mk,
                    linestyle=ls, markersize=sz, fillstyle="none" if i == 0 else "full", label=name)
        from matplotlib.ticker import MaxNLocator
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy, %")
        ax.legend(fontsize=7)
        ax.set_title(textwrap.fill(f"accuracy effects, dptrain on {here}, "
                                   f"{res.get('accuracy_data', '').split(' (')[0]}", 70, break_on_hyphens=False),
                     fontsize=9)
    else:
        mrows = [r for r in rows if r.get("m") is not None]
        bars = ax.barh(range(len(mrows)), [r["m"] for r in mrows], color="#2ca02c")
        _label_bars(ax, bars, fmt)
        ax.set_yticks(range(len(mrows)))
        ax.set_yticklabels([wrap(r.get("cpu", r["setup"])) for r in mrows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.18 * max(r["m"] for r in mrows))
        ax.set_xlabel(unit + " (linear axis from 0)")
        ax.set_title(textwrap.fill(f"dptrain measured on {here}: the same setups as replicas in one process", 70),
                     fontsize=9)
    fig.suptitle(res["title"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_data(res):
    """What plot() needs, without the runs' full logs (kept in results.json for --replot)."""
    strip = lambda r: {k: v for k, v in r.items() if k not in ("run",)}
    d = {k: res[k] for k in ("title", "unit", "traffic", "accuracy_data", "pred_label") if k in res}
    d["rows"] = [strip(r) for r in res["rows"]]
    if res.get("curves"):
        d["curves"] = {name: {"epochs": [{"epoch": e["epoch"], "test_acc": e["test_acc"]} for e in run["epochs"]]}
                       for name, run in res["curves"].items()}
    d["machine"] = machine()
    return d


def main():
    ap = Parser(description="the report scripts' runs, table and plot (examples/reports/NNN_*.sh call it); "
                            "--replot DIR draws DIR/plot.png again from DIR/results.json")
    ap.add_argument("--report", choices=sorted(REPORTS))
    ap.add_argument("--size", default="full", choices=("full", "quick", "smoke"))
    ap.add_argument("--out")
    ap.add_argument("--data", default="")
    ap.add_argument("--dptrain", default=os.path.join(ROOT, "build", "dptrain"))
    ap.add_argument("--mpirun", default="")
    ap.add_argument("--replot", metavar="DIR")
    a = ap.parse_args()
    if a.replot:
        path = os.path.join(a.replot, "results.json")
        try:
            res = json.load(open(path))["plot"]
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"--replot {a.replot}: no plot data in {path} ({e}); run the report script into it first")
        need_modules("reports.py", "matplotlib", hint="Debian: apt-get install -y python3-matplotlib")
        plot(None, res, os.path.join(a.replot, "plot.png"))
        print(f"wrote {a.replot}/plot.png")
        return
    if not a.report or not a.out:
        ap.error("--report and --out are required (or --replot DIR)")
    ctx = Ctx(a)
    res = REPORTS[a.report](ctx)
    md = table_md(ctx, res)
    with open(os.path.join(ctx.out, "table.md"), "w") as f:
        f.write(md)
    with open(os.path.join(ctx.out, "commands.txt"), "w") as f:
        f.write("\n".join(ctx.commands) + "\n")
    strip = lambda r: {k: v for k, v in r.items() if k not in ("run",)}
    with open(os.path.join(ctx.out, "results.json"), "w") as f:
        json.dump({"report": a.report, "size": a.size, "rows": [strip(r) for r in res["rows"]], "extra": res["extra"],
                   "data": res["data"], "hardware": res["hardware"], "assumed": res.get("assumed", []),
                   "machine": machine(), "plot": plot_data(res)}, f, indent=1)
    plot(ctx, res, os.path.join(ctx.out, "plot.png"))
    print(md)
    print(f"wrote {ctx.out}/table.md, plot.png, results.json, commands.txt, logs/")


if __name__ == "__main__":
    main()
