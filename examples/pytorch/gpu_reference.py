#!/usr/bin/env python3
"""PyTorch on a GPU, the peer of examples/bench/gpu_vs_pytorch.sh: the same models as dptrain
(interop.py's LeNet, LeNet-BN, ResNet-18), the same SGD, timed the same way. Prints one JSON line
per case: {"case":..,"way":..,"seconds":..,"images_per_s":..}.

    python3 examples/pytorch/gpu_reference.py --data DIR [--cases lenet,lenet-bn,resnet18] [--epochs 3]

Ways: "eager" (the whole training set on the GPU, batches sliced there, one launch per kernel) and
"graph" (forward, backward and SGD captured once as a CUDA graph and replayed per step, the
fastest plain PyTorch). ResNet-18: fp32, TF32, and bf16 autocast with channels_last (PyTorch's best
plain setting on a Hopper GPU), eager (a 256-image step is long enough). Each case is timed --repeats
times after a warm-up; the line holds the median and the range ("min", "max") of those timings."""
import gzip
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, choices_list, need_modules, nothing_measured, uint  # noqa: E402


def parse_args():
    a = Parser(description=__doc__.split("\n")[0])
    a.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a.add_argument("--cases", type=choices_list("lenet", "lenet-bn", "resnet18"), default="lenet,lenet-bn,resnet18")
    a.add_argument("--epochs", type=uint(1), default=3, help="timed epochs (after one warm-up epoch)")
    a.add_argument("--resnet-steps", type=uint(1), default=10, help="steps per timed repeat")
    a.add_argument("--resnet-repeats", type=uint(1), default=5)
    a.add_argument("--resnet-ways", type=choices_list("fp32", "tf32", "bf16"), default="fp32,tf32,bf16")
    o = a.parse_args()
    if "lenet" in o.cases and not os.path.isfile(os.path.join(o.data, "train-images-idx3-ubyte.gz")):
        a.error("argument --data: no train-images-idx3-ubyte.gz in '%s' (Fashion-MNIST, for the lenet case)" % o.data)
    return o


# the arguments are checked before numpy and torch are loaded: a bad one is answered at once
if __name__ == "__main__":
    ARGS = parse_args()
    need_modules("gpu_reference.py", "numpy", "torch", hint="apt-get install python3-torch python3-numpy")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop import MEAN, STD, build  # noqa: E402


def fashion(data):
    with gzip.open(os.path.join(data, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    with gzip.open(os.path.join(data, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return torch.from_numpy((x - MEAN) / STD), torch.from_numpy(y)


def epoch_eager(model, opt, X, Y, batch):
    n = X.shape[0]
    perm = torch.randperm(n, device=X.device)
    for i in range(0, n, batch):
        idx = perm[i:i + batch]
        loss = F.cross_entropy(model(X[idx]), Y[idx])
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
    return loss


def graph_step(model, opt, batch, shape, dev):
    """Captures one full-batch step on static buffers (PyTorch's documented whole-network capture)."""
    sx = torch.zeros((batch,) + shape, device=dev)
    sy = torch.zeros(batch, dtype=torch.int64, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up on a side stream, as the docs require
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(sx), sy).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss = F.cross_entropy(model(sx), sy)
        loss.backward()
        opt.step()
    return g, sx, sy, loss


def epoch_graph(g, sx, sy, X, Y, batch):
    n = X.shape[0]
    perm = torch.randperm(n, device=X.device)
    for i in range(0, n - batch + 1, batch):  # full batches (the last partial one would need its own graph)
        idx = perm[i:i + batch]
        sx.copy_(X[idx])
        sy.copy_(Y[idx])
        g.replay()


def timed(fn, repeats):
    """Every repeat's seconds (the first call of fn is the caller's warm-up, not timed here)."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times


def report(case, way, times, images):
    med = statistics.median(times)
    print(json.dumps({"case": case, "way": way, "seconds": round(med, 4), "min": round(min(times), 4),
                      "max": round(max(times), 4), "repeats": len(times),
                      "images_per_s": round(images / med, 1)}), flush=True)


def small(case, X, Y, epochs, dev):
    shape = tuple(X.shape[1:])
    torch.manual_seed(0)
    model = build(case, shape[0], shape[1], 10).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    epoch_eager(model, opt, X, Y, 64)  # warm-up: allocations, cuDNN's autotuning
    report(case, "eager", timed(lambda: epoch_eager(model, opt, X, Y, 64), epochs), X.shape[0])
    torch.manual_seed(0)
    model = build(case, shape[0], shape[1], 10).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g, sx, sy, _ = graph_step(model, opt, 64, shape, dev)
    epoch_graph(g, sx, sy, X, Y, 64)
    report(case, "graph", timed(lambda: epoch_graph(g, sx, sy, X, Y, 64), epochs), (X.shape[0] // 64) * 64)


def resnet(steps, repeats, dev, way):
    """way: fp32, tf32, or bf16 (autocast to bf16, channels_last, fp32 master weights: AMP)."""
    tf32 = way != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(0)
    model = build("resnet18", 3, 224, 10).to(dev)
    x = torch.randn(256, 3, 224, 224, device=dev)
    y = torch.randint(0, 10, (256,), device=dev)
    if way == "bf16":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4, nesterov=True)

    def run():
        for _ in range(steps):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=way == "bf16"):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
    run()  # warm-up: cuDNN's autotuning and allocations
    report("resnet18", way, timed(run, repeats), steps * 256)


def main():
    o = ARGS
    if not torch.cuda.is_available():
        nothing_measured("gpu_reference.py", "PyTorch %s sees no CUDA device" % torch.__version__)
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    cases = o.cases
    if "lenet" in cases:
        X, Y = fashion(o.data)
        small("lenet", X.to(dev), Y.to(dev), o.epochs, dev)
    if "lenet-bn" in cases:
        g = torch.Generator().manual_seed(0)
        X = torch.randn(50000, 3, 32, 32, generator=g)
        Y = torch.randint(0, 10, (50000,), generator=g)
        small("lenet-bn", X.to(dev), Y.to(dev), o.epochs, dev)
    if "resnet18" in cases:
        for way in o.resnet_ways:
            resnet(o.resnet_steps, o.resnet_repeats, dev, way)


if __name__ == "__main__":
    main()
