#!/usr/bin/env python3
"""PyTorch <-> dptrain checkpoints (safetensors, see safetensors_io.py). The PyTorch twins of dptrain's
models (src/nn/models.c) with its tensor names: LeNet (conv1, conv2, fc1, fc2, fc3), LeNet-BN (plus bn1..bn4)
and ResNet-18 built by hand as torchvision's (conv1, bn1, layer1.0.conv1, ..., fc).

    interop.py eval   --model lenet --ckpt FILE [--data DIR]     test accuracy on Fashion-MNIST
    interop.py logits --model M --ckpt FILE --shape CxHxW --classes K --input RAW --batch B --out RAW
    interop.py init   --model lenet --seed S --out FILE          PyTorch's initialisation, as safetensors
    interop.py train  --init FILE --steps K [--batch-size 64 --lr 0.01 --momentum 0.9 --data DIR] --out FILE
                      K SGD steps on Fashion-MNIST in file order (dptrain --no-shuffle)
    interop.py train-dp --model lenet-bn --init FILE --replicas N --steps K [...] --out FILE
                      the same as nn.DataParallel over N devices does it (dptrain --mode dp --replicas N)

examples/pytorch/lenet_reference.py names LeNet's layers features.0 / classifier.1 ...; the model here
uses dptrain's names so that load_state_dict(strict=True) takes a dptrain checkpoint as it is.
Used by tests/test_pytorch_interop.c.
"""
import copy
import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, dims, need_modules, number, uint  # noqa: E402


def parse_args():
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("cmd", choices=["eval", "logits", "init", "train", "train-dp"])
    p.add_argument("--replicas", type=uint(1), default=2)
    p.add_argument("--model", default="lenet")
    p.add_argument("--ckpt")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--shape", type=dims, default="1x28x28")
    p.add_argument("--classes", type=uint(2), default=10)
    p.add_argument("--input")
    p.add_argument("--batch", type=uint(1), default=4)
    p.add_argument("--out")
    p.add_argument("--seed", type=uint(0), default=0)
    p.add_argument("--init")
    p.add_argument("--steps", type=uint(1), default=5)
    p.add_argument("--batch-size", type=uint(1), default=64)
    p.add_argument("--lr", type=number(0, above=True), default=0.01)
    p.add_argument("--momentum", type=number(0, below=1), default=0.9)
    return p.parse_args()


# run as a script: the arguments are checked before numpy and torch are loaded
if __name__ == "__main__":
    ARGS = parse_args()
    need_modules("interop.py", "numpy", "torch", hint="apt-get install python3-torch python3-numpy")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import load_file, save_file, torch_state_dict  # noqa: E402

MEAN, STD = 0.2860, 0.3530


class LeNet(nn.Module):
    def __init__(self, in_c=1, hw=28, n_classes=10, bn=False):
        super().__init__()
        self.bn = bn
        self.conv1 = nn.Conv2d(in_c, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        side = ((hw - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(16 * side * side, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, n_classes)
        if bn:
            self.bn1, self.bn2 = nn.BatchNorm2d(6), nn.BatchNorm2d(16)
            self.bn3, self.bn4 = nn.BatchNorm1d(120), nn.BatchNorm1d(84)

    def forward(self, x):
        b = self.bn
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x)) if b else self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x)) if b else self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.bn3(self.fc1(x)) if b else self.fc1(x))
        x = F.relu(self.bn4(self.fc2(x)) if b else self.fc2(x))
        return self.fc3(x)


class BasicBlock(nn.Module):
    def __init__(self, inp, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inp != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet18(nn.Module):
    """torchvision.models.resnet18's structure and state_dict names."""

    def __init__(self, in_c=3, n_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_c, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inp = 64
        for i, planes in enumerate([64, 128, 256, 512]):
            stride = 1 if i == 0 else 2
            setattr(self, "layer%d" % (i + 1), nn.Sequential(BasicBlock(inp, planes, stride),
                                                              BasicBlock(planes, planes, 1)))
            inp = planes
        self.fc = nn.Linear(512, n_classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build(name, c, hw, k):
    if name == "resnet18":
        return ResNet18(c, k)
    return LeNet(c, hw, k, bn=(name == "lenet-bn"))


def read_idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def fashion(data, split):
    def find(n):
        for c in (n + ".gz", n):
            if os.path.isfile(os.path.join(data, c)):
                return os.path.join(data, c)
        sys.exit("interop.py: %s(.gz) not found in %s" % (n, data))
    x = read_idx(find("%s-images-idx3-ubyte" % split)).astype(np.float32)
    y = read_idx(find("%s-labels-idx1-ubyte" % split)).astype(np.int64)
    x = torch.from_numpy(x).div_(255.0).sub_(MEAN).div_(STD).unsqueeze(1).contiguous()
    return x, torch.from_numpy(y)


def load_model(a, c=1, hw=28, k=10):
    m = build(a.model, c, hw, k)
    tensors, _ = load_file(a.ckpt)
    m.load_state_dict(torch_state_dict(tensors), strict=True)
    return m.eval()


def main():
    a = ARGS
    torch.set_num_threads(1)
    c, h, w = (int(v) for v in a.shape.split("x"))
    if a.cmd == "eval":
        m = load_model(a)
        x, y = fashion(a.data, "t10k")
        with torch.no_grad():
            correct = sum(int((m(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum()) for i in range(0, len(y), 1000))
        print("test accuracy %.4f (%d/%d)" % (correct / len(y), correct, len(y)))
    elif a.cmd == "logits":
        m = load_model(a, c, h, a.classes)
        x = torch.from_numpy(np.fromfile(a.input, dtype="<f4").reshape(a.batch, c, h, w).copy())
        with torch.no_grad():
            m(x).numpy().astype("<f4").tofile(a.out)
    elif a.cmd == "init":
        torch.manual_seed(a.seed)
        save_file(a.out, build(a.model, c, h, a.classes).state_dict())
    elif a.cmd == "train-dp":
        m = build(a.model, c, h, a.classes)
        m.load_state_dict(torch_state_dict(load_file(a.init)[0]), strict=True)
        m.train()
        opt = torch.optim.SGD(m.parameters(), lr=a.lr, momentum=a.momentum)
        x, y = fashion(a.data, "train")
        for s in range(a.steps):
            xb, yb = x[s * a.batch_size:(s + 1) * a.batch_size], y[s * a.batch_size:(s + 1) * a.batch_size]
            opt.zero_grad()
            # nn.DataParallel without the GPUs: the batch scattered in torch.chunk's contiguous pieces, one
            # replica each; replica 0 shares the module's parameters and buffers (its BN statistics are kept),
            # the others are copies whose gradients are summed into the module's
            pieces = xb.chunk(a.replicas)
            reps = [m] + [copy.deepcopy(m) for _ in pieces[1:]]
            F.cross_entropy(torch.cat([r(xp) for r, xp in zip(reps, pieces)]), yb).backward()
            for r in reps[1:]:
                for p0, q in zip(m.parameters(), r.parameters()):
                    p0.grad += q.grad
            opt.step()
        save_file(a.out, m.state_dict())
    else:
        m = LeNet()
        m.load_state_dict(torch_state_dict(load_file(a.init)[0]), strict=True)
        opt = torch.optim.SGD(m.parameters(), lr=a.lr, momentum=a.momentum)
        x, y = fashion(a.data, "train")
        for s in range(a.steps):
            lo = s * a.batch_size
            opt.zero_grad()
            F.cross_entropy(m(x[lo:lo + a.batch_size]), y[lo:lo + a.batch_size]).backward()
            opt.step()
        save_file(a.out, m.state_dict())


if __name__ == "__main__":
    main()
