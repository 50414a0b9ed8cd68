#!/usr/bin/env python3
"""The simplest PyTorch training loop for LeNet on Fashion-MNIST (no logging, no evaluation), to check
that lenet_reference.py's epoch time is PyTorch's own and not the script's. Prints seconds per epoch.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 examples/pytorch/plain_loop.py [threads] [epochs] [data dir]
"""
import gzip
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, need_modules, uint  # noqa: E402

p = Parser(description=__doc__.splitlines()[0])
p.add_argument("threads", nargs="?", type=uint(1), default=2)
p.add_argument("epochs", nargs="?", type=uint(1), default=3)
p.add_argument("data", nargs="?", default="/usr/share/datasets/fashion-mnist")
a = p.parse_args()
if not os.path.isdir(a.data):
    p.error("argument data: '%s' is not a directory" % a.data)
threads, epochs, data = a.threads, a.epochs, a.data
need_modules("plain_loop.py", "numpy", "torch", hint="apt-get install python3-torch python3-numpy")
import numpy as np  # noqa: E402
import torch  # noqa: E402
torch.set_num_threads(threads)


def idx(name, offset):
    with gzip.open(f"{data}/{name}") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


X = torch.from_numpy(idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255)
X = (X - 0.2860) / 0.3530
Y = torch.from_numpy(idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64))
nn = torch.nn
model = nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84),
                      nn.ReLU(), nn.Linear(84, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(1, epochs + 1):
    t0 = time.time()
    perm = torch.randperm(len(X))
    for i in range(0, len(X), 64):
        b = perm[i:i + 64]
        opt.zero_grad()
        loss_fn(model(X[b]), Y[b]).backward()
        opt.step()
    print(f"epoch {epoch}: {time.time() - t0:.2f} s", flush=True)
