#!/usr/bin/env python3
"""PyTorch on the CPU, the peer of examples/bench/cpu_speed.sh: the same models as dptrain (interop.py's
LeNet, LeNet-BN, ResNet-18), the same SGD, with the settings that decide PyTorch's CPU speed as flags.

    cpu_reference.py lenet    [--data DIR] [--epochs 3] [--batch-size 64] SETTINGS [--log FILE]
    cpu_reference.py resnet18 [--batch-size 32] [--shape 3x224x224] [--classes 1000] [--steps 5]
                              [--warmup 2] SETTINGS [--log FILE]
    cpu_reference.py overhead SETTINGS         per-op costs (see below)

SETTINGS: --threads T (torch.set_num_threads; OMP_NUM_THREADS too unless set), --blas-threads N
(OPENBLAS_NUM_THREADS / MKL_NUM_THREADS, the BLAS's own pool where it has one: Debian's torch 1.13 calls
the system's OpenBLAS, whose pthread pool torch.set_num_threads does not reach; default 1), --mkldnn
on|off (torch.backends.mkldnn.enabled: oneDNN's convolutions, or PyTorch's own), --channels-last
(model and inputs in NHWC), --compile (torch.compile of the model, PyTorch 2 only; the first epoch or
warm-up steps pay for the compilation).

lenet: LeNet on Fashion-MNIST as examples/pytorch/lenet_reference.py trains it (whole set in memory,
normalised, a torch.randperm per epoch, batches indexed out of the tensors, CrossEntropyLoss, SGD lr 0.01
momentum 0.9); "seconds" is the training loop (shuffle included), no evaluation. One JSON line per epoch:
{"event":"epoch","epoch","seconds","images_per_s","cpu_s"}.
resnet18: ResNet-18 on random images and labels, one JSON line per timed step {"event":"step","seconds"}.
Both start with {"event":"config",...}: the torch version, the settings, the BLAS and oneDNN in use.
overhead: what one small op costs (torch.add of two 1-element tensors), one LeNet forward + backward +
SGD step at batch 1 and at batch 64, and the same step's time split by the autograd profiler into
operators: where a LeNet step's time goes apart from arithmetic.
"""
import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, dims, need_modules, uint  # noqa: E402


def parse_args(argv=None):
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["lenet", "resnet18", "overhead"])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--model", default=None, choices=["lenet", "lenet-bn"], help="lenet: lenet or lenet-bn (default lenet)")
    p.add_argument("--epochs", type=uint(1), default=3)
    p.add_argument("--batch-size", type=uint(1), default=None, help="default 64 (lenet), 32 (resnet18)")
    p.add_argument("--shape", type=dims, default="3x224x224", help="resnet18 input CxHxW")
    p.add_argument("--classes", type=uint(2), default=1000, help="resnet18 classes")
    p.add_argument("--steps", type=uint(1), default=5, help="resnet18 timed steps")
    p.add_argument("--warmup", type=uint(0), default=2, help="resnet18 steps before timing")
    p.add_argument("--seed", type=uint(0), default=0)
    p.add_argument("--threads", type=uint(1), default=2)
    p.add_argument("--blas-threads", type=uint(1), default=1)
    p.add_argument("--mkldnn", choices=["on", "off"], default="on")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--log", metavar="FILE")
    a = p.parse_args(argv)
    if a.what == "lenet" and not os.path.isdir(a.data):
        p.error("argument --data: '%s' is not a directory" % a.data)
    return a


ARGS = parse_args()
need_modules("cpu_reference.py", "numpy", "torch", hint="apt-get install python3-torch python3-numpy")
# the BLAS reads its thread count when it is loaded: before torch
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.blas_threads)
os.environ["MKL_NUM_THREADS"] = str(ARGS.blas_threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop import MEAN, STD, build  # noqa: E402


def settings_info(a):
    cfg = torch.__config__.show()
    info = {"event": "config", "torch_version": torch.__version__, "python": sys.version.split()[0],
            "threads": a.threads, "torch_threads": torch.get_num_threads(), "blas_threads": a.blas_threads,
            "mkldnn": a.mkldnn, "channels_last": a.channels_last, "compile": a.compile,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    for key in ("BLAS_INFO", "CPU capability usage"):
        pos = cfg.find(key)
        if pos >= 0:
            info[key.lower().replace(" ", "_")] = cfg[pos + len(key) + 1:].split(",")[0].split("\n")[0].strip(" =:")
    pos = cfg.find("MKL-DNN v")
    if pos >= 0:
        info["onednn"] = cfg[pos + 8:].split()[0]
    return info


def setup(a):
    torch.set_num_threads(a.threads)
    torch.backends.mkldnn.enabled = a.mkldnn == "on"
    torch.manual_seed(a.seed)


def prepare(a, model):
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    run = model
    if a.compile:
        if not hasattr(torch, "compile"):
            sys.exit("cpu_reference.py: --compile needs PyTorch 2 (this is %s)" % torch.__version__)
        run = torch.compile(model)
    return model, run, fmt


def emit(log, obj):
    line = json.dumps(obj)
    print(line, flush=True)
    if log:
        log.write(line + "\n")
        log.flush()


def fashion(data):
    def read(name, offset):
        for cand in (name + ".gz", name):
            path = os.path.join(data, cand)
            if os.path.isfile(path):
                with (gzip.open if cand.endswith(".gz") else open)(path, "rb") as f:
                    return np.frombuffer(f.read(), np.uint8, offset=offset)
        sys.exit("cpu_reference.py: %s(.gz) not found in %s" % (name, data))
    x = read("train-images-idx3-ubyte", 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    y = read("train-labels-idx1-ubyte", 8).astype(np.int64)
    return torch.from_numpy((x - MEAN) / STD).contiguous(), torch.from_numpy(y)


def lenet(a, log):
    X, Y = fashion(a.data)
    model, run, fmt = prepare(a, build(a.model or "lenet", 1, 28, 10))
    if a.channels_last:
        X = X.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator()
    gen.manual_seed(a.seed)
    n, batch = X.shape[0], a.batch_size or 64
    model.train()
    for epoch in range(1, a.epochs + 1):
        cpu0, t0 = time.process_time(), time.perf_counter()
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            loss = F.cross_entropy(run(X[idx]), Y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        seconds = time.perf_counter() - t0
        emit(log, {"event": "epoch", "epoch": epoch, "seconds": seconds, "images_per_s": n / seconds,
                   "cpu_s": time.process_time() - cpu0, "loss": float(loss)})


def resnet18(a, log):
    c, h, w = (int(v) for v in a.shape.split("x"))
    batch = a.batch_size or 32
    model, run, fmt = prepare(a, build("resnet18", c, h, a.classes))
    x = torch.randn(batch, c, h, w).contiguous(memory_format=fmt)
    y = torch.randint(0, a.classes, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    for step in range(-a.warmup, a.steps):
        t0 = time.perf_counter()
        loss = F.cross_entropy(run(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seconds = time.perf_counter() - t0
        if step >= 0:
            emit(log, {"event": "step", "step": step + 1, "seconds": seconds, "images_per_s": batch / seconds})


def overhead(a, log):
    def timed(fn, reps):
        fn()
        best = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            best.append((time.perf_counter() - t0) / reps)
        best.sort()
        return best[2]  # the median of 5

    u, v = torch.ones(1), torch.ones(1)
    emit(log, {"event": "overhead", "what": "torch.add of 1-element tensors", "us": 1e6 * timed(lambda: torch.add(u, v), 20000)})
    model, run, fmt = prepare(a, build("lenet", 1, 28, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for batch in (1, 64):
        x = torch.randn(batch, 1, 28, 28).contiguous(memory_format=fmt)
        y = torch.randint(0, 10, (batch,))

        def step():
            loss = F.cross_entropy(run(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        emit(log, {"event": "overhead", "what": "LeNet step, batch %d" % batch, "us": 1e6 * timed(step, 200)})
    from torch.autograd import profiler
    x = torch.randn(64, 1, 28, 28).contiguous(memory_format=fmt)
    y = torch.randint(0, 10, (64,))
    with profiler.profile() as prof:
        for _ in range(50):
            loss = F.cross_entropy(run(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]
    for e in rows:
        emit(log, {"event": "op", "name": e.key, "calls_per_step": e.count / 50,
                   "self_us_per_step": e.self_cpu_time_total / 50})


def main(a):
    setup(a)
    log = open(a.log, "w") if a.log else None
    emit(log, settings_info(a))
    {"lenet": lenet, "resnet18": resnet18, "overhead": overhead}[a.what](a, log)
    if log:
        log.close()


if __name__ == "__main__":
    main(ARGS)
