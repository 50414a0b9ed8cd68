#!/usr/bin/env python3
"""The simplest PyTorch training loop for LeNet on Fashion-MNIST (no logging, no evaluation), to check
that lenet_reference.py's epoch time is PyTorch's own and not the script's. Prints seconds per epoch.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 examples/pytorch/plain_loop.py [threads] [epochs] [data dir]
"""
import gzip
import sys
import time

import numpy as np
import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
data = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/datasets/fashion-mnist"
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
