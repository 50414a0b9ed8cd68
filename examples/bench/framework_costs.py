#!/usr/bin/env python3
"""PyTorch's per-step costs of DataParallel and DistributedDataParallel beyond the step of one
device, written as a .framework file for `dptrain predict --measured-epoch S --framework F`
(docs/overhead-model.md, "Predicting from a measured single-device time").

Each cost is a difference of two medians of the same training step (zero_grad, forward,
cross-entropy, backward, SGD step) on this machine, the plain model against the wrapped one:

  DDP (one process, backend gloo on the CPU, nccl on a GPU: the reducer, its autograd hooks and
  its bucket launches, with no peer to wait for, so no wire time):
    ddp_step_us + 1 x ddp_bucket_us = DDP(one bucket) - plain
    ddp_bucket_us                   = (DDP(a bucket per tensor) - DDP(one bucket)) / (tensors - 1)
  DataParallel at N replicas (N = 2, 4, 8; two samples per replica, so compute is small):
    dp_step_us + N x (dp_device_us + tensors x dp_tensor_us) = DataParallel(N) - plain,
    fitted by least squares over N and three models with 10, 30 and 64 tensors.
    With N GPUs this is nn.DataParallel itself. Otherwise (the CPU, one GPU) it is
    DataParallel.forward's own code on one device: its replicate (each tensor copied per replica,
    gradients summed back through the copies as Broadcast's backward does), one thread per replica
    as parallel_apply starts, the input split and the outputs joined; what a multi-GPU run adds
    beyond that (CUDA streams, cross-device copies) is not in it, and the file says so.

usage: framework_costs.py [--device cpu|cuda] [--out FILE] [--reps N] [--quick]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, uint  # noqa: E402


def parse():
    p = Parser(prog="framework_costs.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the steps run (default cpu; cuda: DataParallel is measured for real on 2+ GPUs)")
    p.add_argument("--out", default="", help="the .framework file to write (default: print it)")
    p.add_argument("--reps", type=uint(3), default=5, help="timed repetitions of each case (median; default 5)")
    p.add_argument("--quick", action="store_true", help="fewer steps per repetition (a smoke run)")
    return p.parse_args()


ARGS = parse()

import datetime  # noqa: E402
import platform  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
T_START = time.time()


def say(msg):
    sys.stderr.write("framework_costs.py: %5.1f s: %s\n" % (time.time() - T_START, msg))

try:
    import torch  # noqa: E402
    import torch.distributed as dist  # noqa: E402
    import torch.nn as nn  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
except ImportError:
    sys.stderr.write("framework_costs.py: no torch in %s; run it with a python that has PyTorch "
                     "(examples/bench/framework_costs.sh --python PY, or tests/torch2_env.sh makes one)\n"
                     % sys.executable)
    sys.exit(2)


class LeNet(nn.Module):
    """10 parameter tensors, no buffers."""

    def __init__(self, bn=False):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 6, 5), nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)
        self.bn = bn
        if bn:  # LeNet-BN: 18 parameter and 12 buffer tensors
            self.b1, self.b2, self.b3, self.b4 = nn.BatchNorm2d(6), nn.BatchNorm2d(16), nn.BatchNorm1d(120), \
                nn.BatchNorm1d(84)

    def forward(self, x):
        i = (lambda m, v: m(v)) if self.bn else (lambda m, v: v)
        x = F.max_pool2d(F.relu(i(getattr(self, "b1", None), self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(i(getattr(self, "b2", None), self.conv2(x))), 2)
        x = x.flatten(1)
        x = F.relu(i(getattr(self, "b3", None), self.fc1(x)))
        x = F.relu(i(getattr(self, "b4", None), self.fc2(x)))
        return self.fc3(x)


class Stack(nn.Module):
    """32 small linear layers: 64 parameter tensors (the tensor count apart from the compute)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(3 * 32 * 32, 16)
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(30))
        self.out = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.inp(x.flatten(1)))
        for m in self.layers:
            x = F.relu(m(x))
        return self.out(x)


MODELS = {"lenet": lambda: LeNet(False), "lenet-bn": lambda: LeNet(True), "stack": Stack}
DEV = torch.device(ARGS.device)
# one intra-op thread: the costs measured are the host's Python and dispatch, and on a busy machine a
# team of threads waits at every operator's barrier (LeNet's step: 10 ms on one thread, 150-600 ms on
# two, on a 2-core machine under load)
torch.set_num_threads(1)
STEPS = 5 if ARGS.quick else 20
REPS = 3 if ARGS.quick else ARGS.reps


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def tensors_of(m):
    return len(list(m.parameters())) + len(list(m.buffers()))


def step_time(model, batch, params=None):
    """Median seconds of one training step over REPS repetitions of STEPS steps."""
    opt = torch.optim.SGD(params if params is not None else model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 32, 32, device=DEV)
    y = torch.randint(0, 10, (batch,), device=DEV)

    def one():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(3):
        one()
    times = []
    for _ in range(REPS):
        sync()
        t0 = time.perf_counter()
        for _ in range(STEPS):
            one()
        sync()
        times.append((time.perf_counter() - t0) / STEPS)
    return statistics.median(times)


class OneDeviceDataParallel(nn.Module):
    """DataParallel.forward's path with every replica on one device: its own replicate (Broadcast
    replaced by per-replica copies whose backward sums the gradients back, as Broadcast's does), one
    thread per replica as parallel_apply runs them, the input split and the outputs joined."""

    def __init__(self, module, n):
        super().__init__()
        self.module, self.n = module, n

    def forward(self, x):
        import importlib
        rep_mod = importlib.import_module("torch.nn.parallel.replicate")
        real = rep_mod._broadcast_coalesced_reshape

        def copies(tensors, devices, detach=False):
            if not tensors:
                return []
            return [[t.detach().clone() if detach else t.clone() for t in tensors] for _ in devices]

        rep_mod._broadcast_coalesced_reshape = copies
        try:
            replicas = rep_mod.replicate(self.module, list(range(self.n)))
        finally:
            rep_mod._broadcast_coalesced_reshape = real
        inputs = x.chunk(self.n)
        results, lock, grad = {}, threading.Lock(), torch.is_grad_enabled()

        def worker(i):
            try:
                with torch.set_grad_enabled(grad):
                    out = replicas[i](inputs[i])
            except Exception as e:  # as parallel_apply: raised in the caller
                out = e
            with lock:
                results[i] = out

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(self.n):
            if isinstance(results[i], Exception):
                raise results[i]
        return torch.cat([results[i] for i in range(self.n)])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def least_squares(A, y):
    """The 3 coefficients minimising |A x - y|: the normal equations, by Gaussian elimination."""
    M = [[sum(r[i] * r[j] for r in A) for j in range(3)] + [sum(r[i] * v for r, v in zip(A, y))] for i in range(3)]
    for i in range(3):
        piv = max(range(i, 3), key=lambda k: abs(M[k][i]))
        M[i], M[piv] = M[piv], M[i]
        for k in range(3):
            if k != i:
                f = M[k][i] / M[i][i]
                M[k] = [a - f * b for a, b in zip(M[k], M[i])]
    return [M[i][3] / M[i][i] for i in range(3)]


def measure():
    torch.manual_seed(0)
    rows = {}
    n_gpus = torch.cuda.device_count() if DEV.type == "cuda" else 0
    # DDP, one process: the reducer's costs without a peer
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(free_port())
    say("torch %s imported; DDP with one process" % torch.__version__)
    dist.init_process_group("nccl" if DEV.type == "cuda" else "gloo", rank=0, world_size=1)
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp_fixed, ddp_bucket = [], []
    for name in ("lenet", "lenet-bn"):
        m = MODELS[name]().to(DEV)
        k = len(list(m.parameters()))
        ids = [DEV.index or 0] if DEV.type == "cuda" else None
        one = DDP(MODELS[name]().to(DEV), device_ids=ids, bucket_cap_mb=25)
        each = DDP(MODELS[name]().to(DEV), device_ids=ids, bucket_cap_mb=1e-6)
        each_buckets = k  # a cap below every tensor: one bucket per parameter tensor
        plain, t1, tk = [], [], []
        for _ in range(3):  # interleaved: the machine's load changes alike for all three
            plain.append(step_time(m, 8))
            t1.append(step_time(one, 8))
            tk.append(step_time(each, 8))
        p, a, b = statistics.median(plain), statistics.median(t1), statistics.median(tk)
        per_bucket = max(0.0, (b - a) / (each_buckets - 1))
        ddp_bucket.append(per_bucket)
        ddp_fixed.append(max(0.0, a - p - per_bucket))
        say("DDP %s done" % name)
        rows["ddp " + name] = "plain %.1f us, DDP one bucket %.1f us, DDP %d buckets %.1f us" % (
            1e6 * p, 1e6 * a, each_buckets, 1e6 * b)
    dist.destroy_process_group()
    # DataParallel at N replicas, one sample each
    obs = []  # (N, tensors, added seconds)
    real_dp = n_gpus >= 2
    for name in ("lenet", "lenet-bn", "stack"):
        for n in (2, 4, 8):
            if real_dp and n > n_gpus:
                continue
            m = MODELS[name]().to(DEV)
            if real_dp:
                wrapped = nn.DataParallel(m, device_ids=list(range(n)))
            else:
                wrapped = OneDeviceDataParallel(m, n)
            plain, dp = [], []
            for _ in range(3):
                plain.append(step_time(m, 2 * n))  # two samples a replica: BatchNorm needs two
                dp.append(step_time(wrapped, 2 * n, m.parameters()))
            add = statistics.median(dp) - statistics.median(plain)
            obs.append((n, tensors_of(m), add))
            say("DataParallel %s N=%d done" % (name, n))
            rows["dp %s N=%d" % (name, n)] = "plain %.1f us, DataParallel %.1f us" % (
                1e6 * statistics.median(plain), 1e6 * statistics.median(dp))
    # least squares: add = a + N * b + N * tensors * c
    A = [[1.0, n, n * t] for n, t, _ in obs]
    y = [v for _, _, v in obs]
    a, b, c = least_squares(A, y)
    fit = [r[0] * a + r[1] * b + r[2] * c for r in A]
    worst = max(abs(f - v) / v for f, v in zip(fit, y)) if all(v > 0 for v in y) else float("nan")
    return {"ddp_step_us": 1e6 * statistics.median(ddp_fixed), "ddp_bucket_us": 1e6 * statistics.median(ddp_bucket),
            "dp_step_us": 1e6 * max(0.0, a), "dp_device_us": 1e6 * max(0.0, b), "dp_tensor_us": 1e6 * max(0.0, c)
            }, rows, real_dp, n_gpus, worst


def main():
    t0 = time.time()
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    costs, rows, real_dp, n_gpus, worst = measure()
    if DEV.type == "cuda":
        where = "%s x%d" % (torch.cuda.get_device_name(0), n_gpus)
    else:
        where = "%s, %d cores" % (platform.processor() or platform.machine(), os.cpu_count() or 0)
        try:
            for line in open("/proc/cpuinfo"):
                if line.startswith("model name"):
                    where = "%s, %d cores" % (line.split(":", 1)[1].strip(), os.cpu_count() or 0)
                    break
        except OSError:
            pass
    name = "pytorch-%s" % ARGS.device
    cmd = "examples/bench/framework_costs.sh --device %s%s" % (ARGS.device, " --quick" if ARGS.quick else "")
    dp_how = ("nn.DataParallel on %d GPUs" % n_gpus if real_dp else
              "DataParallel.forward's replicate, one thread per replica, split and join, all on one %s (no CUDA "
              "streams or cross-device copies: those need 2+ GPUs)" % ARGS.device)
    lines = [
        "# PyTorch %s's per-step costs of DataParallel and DDP beyond one device's step, for dptrain predict "
        "--framework" % torch.__version__,
        "# (docs/overhead-model.md, 'Predicting from a measured single-device time').",
        "# measured by: %s" % cmd,
        "# on: %s; %s UTC; %.0f s; load average %.1f at the start, %.1f at the end (a busy machine's costs are "
        "larger)" % (where, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), time.time() - t0,
                     load0, os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")),
        "# DDP: one process (%s), LeNet and LeNet-BN at batch 8, one bucket against one per tensor: the reducer "
        "without wire time" % ("nccl" if ARGS.device == "cuda" else "gloo"),
        "# DP: %s; fitted over N = 2, 4, 8 and 10, 30, 64 tensors (largest misfit %.0f %%)" % (dp_how, 100 * worst),
        "# one intra-op thread; each a difference of medians of 3 x %d x %d steps, interleaved with the plain step:"
        % (REPS, STEPS),
    ]
    lines += ["#   %s: %s" % (k, v) for k, v in rows.items()]
    lines += ["name %s" % name]
    lines += ["%s %.2f" % (k, v) for k, v in costs.items()]
    text = "\n".join(lines) + "\n"
    if ARGS.out:
        with open(ARGS.out, "w") as f:
            f.write(text)
        print("framework_costs.py: wrote %s" % ARGS.out)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
