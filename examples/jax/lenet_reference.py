#!/usr/bin/env python3
"""JAX on the CPU, a peer of examples/bench/cpu_speed.sh: LeNet on Fashion-MNIST as dptrain and
examples/pytorch/lenet_reference.py train it (conv 1->6 5x5, ReLU, maxpool 2, conv 6->16 5x5, ReLU,
maxpool 2, fc 256->120->84->10; PyTorch's default initialisation; cross-entropy, the mean over the batch;
SGD lr 0.01 momentum 0.9; a new permutation every epoch, the last partial batch kept): the step (gather
of the batch, forward, backward, SGD) one jit-compiled XLA computation, the training set on the device.
(An epoch's steps in one lax.scan, one dispatch per epoch, was 3-4x slower with jax 0.10 on the CPU.)

    python3 examples/jax/lenet_reference.py [--data DIR] [--epochs 3] [--batch-size 64] [--seed 0] [--log FILE]

Threads: XLA's CPU backend runs on all the cores the process may use; run it under taskset to give it
fewer. One JSON line per epoch: {"event":"epoch","epoch","seconds","images_per_s","cpu_s"}; "seconds" is
the training loop (the permutation included), the first epoch includes the compilation.
"""
import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, need_modules, uint  # noqa: E402

MEAN, STD = 0.2860, 0.3530


def parse_args():
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=uint(1), default=3)
    p.add_argument("--batch-size", type=uint(1), default=64)
    p.add_argument("--seed", type=uint(0), default=0)
    p.add_argument("--log", metavar="FILE")
    a = p.parse_args()
    if not os.path.isdir(a.data):
        p.error("argument --data: '%s' is not a directory" % a.data)
    return a


# the arguments are checked before numpy and jax are loaded: a bad one is answered at once
if __name__ == "__main__":
    ARGS = parse_args()
    need_modules("lenet_reference.py", "numpy", "jax", hint="install JAX (examples/bench/cpu_speed.sh --install)")
import numpy as np  # noqa: E402


def read(data, name, offset):
    for cand in (name + ".gz", name):
        path = os.path.join(data, cand)
        if os.path.isfile(path):
            with (gzip.open if cand.endswith(".gz") else open)(path, "rb") as f:
                return np.frombuffer(f.read(), np.uint8, offset=offset)
    sys.exit("lenet_reference.py: %s(.gz) not found in %s" % (name, data))


def main(a):
    import jax
    import jax.numpy as jnp

    x = read(a.data, "train-images-idx3-ubyte", 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    y = read(a.data, "train-labels-idx1-ubyte", 8).astype(np.int32)
    X, Y = jnp.asarray((x - MEAN) / STD), jnp.asarray(y)
    n = X.shape[0]

    rng = np.random.default_rng(a.seed)

    def uniform(shape, fan_in):  # PyTorch's default: weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        bound = 1.0 / np.sqrt(fan_in)
        return jnp.asarray(rng.uniform(-bound, bound, shape).astype(np.float32))

    params = {
        "c1w": uniform((6, 1, 5, 5), 25), "c1b": uniform((6,), 25),
        "c2w": uniform((16, 6, 5, 5), 150), "c2b": uniform((16,), 150),
        "f1w": uniform((120, 256), 256), "f1b": uniform((120,), 256),
        "f2w": uniform((84, 120), 120), "f2b": uniform((84,), 120),
        "f3w": uniform((10, 84), 84), "f3b": uniform((10,), 84),
    }
    mom = jax.tree_util.tree_map(jnp.zeros_like, params)

    def conv(v, w, b):
        out = jax.lax.conv_general_dilated(v, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return out + b[None, :, None, None]

    def pool(v):
        return jax.lax.reduce_window(v, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def forward(p, v):
        v = pool(jax.nn.relu(conv(v, p["c1w"], p["c1b"])))
        v = pool(jax.nn.relu(conv(v, p["c2w"], p["c2b"])))
        v = v.reshape(v.shape[0], -1)
        v = jax.nn.relu(v @ p["f1w"].T + p["f1b"])
        v = jax.nn.relu(v @ p["f2w"].T + p["f2b"])
        return v @ p["f3w"].T + p["f3b"]

    def loss_fn(p, xb, yb):
        logits = forward(p, xb)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], axis=1))

    @jax.jit
    def step(p, m, Xa, Ya, idx):  # the data as arguments: as closure constants they made it slower
        loss, g = jax.value_and_grad(loss_fn)(p, Xa[idx], Ya[idx])
        m = jax.tree_util.tree_map(lambda mi, gi: 0.9 * mi + gi, m, g)  # PyTorch's SGD momentum, dampening 0
        p = jax.tree_util.tree_map(lambda pi, mi: pi - 0.01 * mi, p, m)
        return p, m, loss

    log = open(a.log, "w") if a.log else None

    def emit(obj):
        line = json.dumps(obj)
        print(line, flush=True)
        if log:
            log.write(line + "\n")
            log.flush()

    emit({"event": "config", "impl": "jax", "jax_version": jax.__version__, "devices": str(jax.devices()),
          "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None})
    B = a.batch_size
    for epoch in range(1, a.epochs + 1):
        cpu0, t0 = time.process_time(), time.perf_counter()
        perm = rng.permutation(n).astype(np.int32)
        for i in range(0, n, B):
            params, mom, loss = step(params, mom, X, Y, jnp.asarray(perm[i:i + B]))
        loss.block_until_ready()
        seconds = time.perf_counter() - t0
        emit({"event": "epoch", "epoch": epoch, "seconds": seconds, "images_per_s": n / seconds,
              "cpu_s": time.process_time() - cpu0, "loss": float(loss)})
    if log:
        log.close()


if __name__ == "__main__":
    main(ARGS)
