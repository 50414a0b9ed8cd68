#!/usr/bin/env python3
"""PyTorch reference for dptrain: LeNet on Fashion-MNIST, trained the way `dptrain train` trains it.

    python3 examples/pytorch/lenet_reference.py [--epochs 10] [--batch-size 64] [--lr 0.01]
        [--momentum 0.9] [--seed 0] [--threads 2] [--blas-threads 1] [--data DIR] [--log FILE] [--log-steps]

Needs Debian's python3-torch (PyTorch 1.13) and python3-numpy; torchvision is not used.

- Data: the four gzip (or plain) IDX files from --data (default /usr/share/datasets/fashion-mnist), read
  with gzip + numpy, the whole set in memory as float32 tensors, normalised as (pixel/255 - 0.2860)/0.3530.
- Model: conv 1->6 5x5, ReLU, maxpool 2, conv 6->16 5x5, ReLU, maxpool 2, flatten, fc 256->120, ReLU,
  120->84, ReLU, 84->10; PyTorch's default initialisation after torch.manual_seed(seed).
- Training: CrossEntropyLoss (mean over the batch), SGD (lr, momentum), one torch.Generator seeded with
  seed draws a new randperm every epoch, the last partial batch is kept. No DataLoader: batches are
  indexed out of the in-memory tensors, so `seconds` is the training loop only (shuffle included).
- After every epoch: test loss and accuracy on the 10000 test images (eval mode, batches of 1000, not
  timed), a human line on stdout and, with --log, a JSON line with the field names of dptrain's log
  (docs/logs.md): {"event":"epoch","epoch","steps","lr","train_loss","train_acc","test_loss","test_acc",
  "seconds","eval_seconds","images_per_s"}, plus "cpu_s" (this process's CPU time in the training loop) and
  "other_cores" (CPU used meanwhile by other processes, from /proc/stat, in cores: above ~0.1 the epoch
  time is not from a quiet machine). The log starts with {"event":"config",...} (including which
  BLAS library the process loaded and the thread settings) and ends with {"event":"final","test_acc","per_class":[...]}.
  --log-steps adds one {"event":"step","epoch","step","loss","lr"} line per optimizer step.
- Threads: --threads T sets torch's OpenMP pool (convolutions run in oneDNN on it); OpenBLAS, used for the
  fully connected layers, has its own pool, 1 thread unless --blas-threads or OPENBLAS_NUM_THREADS says
  otherwise (reason in the comment above the thread settings).

train_loss is the mean per-sample loss over the epoch (each batch's mean loss weighted by its size),
train_acc the fraction of training samples classified correctly by the model as it was at their step.
"""
import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scriptargs import Parser, number, uint  # noqa: E402

MEAN, STD = 0.2860, 0.3530
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def parse_args(argv=None):
    p = Parser(
        description="PyTorch reference for dptrain: LeNet on Fashion-MNIST (same data, model, "
        "optimizer, shuffling and log fields as `dptrain train --model lenet --dataset fashion-mnist`).")
    p.add_argument("--data", default=DEFAULT_DATA, help="directory of the IDX files (default %(default)s)")
    p.add_argument("--epochs", type=uint(1), default=10, help="default %(default)s")
    p.add_argument("--batch-size", type=uint(1), default=64, help="default %(default)s")
    p.add_argument("--lr", type=number(0, above=True), default=0.01, help="default %(default)s")
    p.add_argument("--momentum", type=number(0, below=1), default=0.9, help="default %(default)s")
    p.add_argument("--seed", type=uint(0), default=0, help="default %(default)s")
    p.add_argument("--threads", type=uint(1), default=2,
                   help="torch.set_num_threads (OpenMP threads of torch and oneDNN; OMP_NUM_THREADS too "
                   "unless set) (default %(default)s)")
    p.add_argument("--blas-threads", type=uint(1), default=None, metavar="N",
                   help="OPENBLAS_NUM_THREADS for the separate OpenBLAS pool (default: the environment's "
                   "OPENBLAS_NUM_THREADS if set, else 1: OpenBLAS's pool is separate from torch's, see the "
                   "comment in the script)")
    p.add_argument("--log", metavar="FILE", help="write JSON lines (config, epoch, final) to FILE")
    p.add_argument("--log-steps", action="store_true", help="also log one 'step' line per optimizer step")
    return p.parse_args(argv)


# Thread pools, set before torch (and through it OpenMP and OpenBLAS) is loaded. Debian's torch is built
# against the generic libblas.so.3 (BLAS_INFO=generic), which the alternatives system points at OpenBLAS's
# pthread build: its thread pool is separate from torch's OpenMP pool and torch.set_num_threads does not
# reach it. OpenBLAS's default (one thread per core) on top of `--threads` OpenMP threads puts twice as many
# spinning threads as cores on the machine; on the 2-core test machine (AMD EPYC, KVM, otherwise idle) that
# made an epoch about 2x slower: 12-16 s against 6-7 s with OPENBLAS_NUM_THREADS=1, --threads 2 in both
# (interleaved runs). So the default here is 1: convolutions (oneDNN) and the element-wise ops use
# `--threads` OpenMP threads, the small fully connected GEMMs one.
ARGS = parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))
if ARGS.blas_threads is not None:
    os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.blas_threads)
else:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

try:
    import numpy as np  # noqa: E402
    import torch  # noqa: E402
    import torch.nn as nn  # noqa: E402
except ImportError as e:
    sys.exit("lenet_reference.py: cannot import numpy/torch with %s (%s). On Debian: apt-get install python3-torch "
             "python3-numpy, and run it with /usr/bin/python3 if another python3 comes first in PATH."
             % (sys.executable, e))


def read_idx(path):
    """Reads an IDX file (gzip or plain) into a numpy array of its declared shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError("%s: not an unsigned-byte IDX file (magic %s)" % (path, raw[:4].hex()))
    ndim = raw[3]
    header = 4 + 4 * ndim
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    n = int(np.prod(shape))
    if len(raw) != header + n:
        raise ValueError("%s: %d bytes, expected %d for shape %s" % (path, len(raw), header + n, shape))
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def find_file(data_dir, name):
    for cand in (name + ".gz", name):
        path = os.path.join(data_dir, cand)
        if os.path.isfile(path):
            return path
    sys.exit("lenet_reference.py: %s(.gz) not found in %s (Debian package dataset-fashion-mnist, or --data DIR)"
             % (name, data_dir))


def load_fashion_mnist(data_dir):
    arrays = {k: read_idx(find_file(data_dir, v)) for k, v in FILES.items()}

    def images(a):
        x = torch.from_numpy(a.astype(np.float32)).div_(255.0).sub_(MEAN).div_(STD)
        return x.unsqueeze(1).contiguous()  # N x 1 x 28 x 28

    def labels(a):
        return torch.from_numpy(a.astype(np.int64))

    xtr, ytr = images(arrays["train_images"]), labels(arrays["train_labels"])
    xte, yte = images(arrays["test_images"]), labels(arrays["test_labels"])
    if xtr.shape[0] != ytr.shape[0] or xte.shape[0] != yte.shape[0]:
        sys.exit("lenet_reference.py: image and label counts differ in %s" % data_dir)
    return xtr, ytr, xte, yte


class LeNet(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * 4 * 4, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, n_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


def blas_info():
    """Which BLAS this process uses: torch's build setting and the libraries actually mapped."""
    info = {}
    cfg = torch.__config__.show()
    for key in ("BLAS_INFO", "LAPACK_INFO"):
        pos = cfg.find(key + "=")
        if pos >= 0:
            info["torch_" + key.lower()] = cfg[pos + len(key) + 1:].split(",")[0].strip()
    info["torch_mkldnn"] = torch.backends.mkldnn.is_available()
    torch.mm(torch.ones(64, 64), torch.ones(64, 64))  # make sure the BLAS is loaded and used once
    libs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if ("blas" in base or "mkl_" in base or "blis" in base) and path not in libs:
                    libs.append(path)
    except OSError:
        pass
    info["blas_libraries"] = [os.path.realpath(p) for p in libs]
    try:
        import ctypes
        for p in libs:
            lib = ctypes.CDLL(p)
            if hasattr(lib, "openblas_get_config"):
                lib.openblas_get_config.restype = ctypes.c_char_p
                info["blas"] = lib.openblas_get_config().decode().strip()
                if hasattr(lib, "openblas_get_num_threads"):
                    info["blas_threads"] = lib.openblas_get_num_threads()
                break
    except Exception:  # best effort only
        pass
    if "blas" not in info and info["blas_libraries"]:
        info["blas"] = os.path.basename(info["blas_libraries"][0])
    return info


def machine_busy_s():
    """Busy CPU seconds of the whole machine since boot, from /proc/stat (None where there is none)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (v[0] + v[1] + v[2] + sum(v[5:8])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@torch.no_grad()
def evaluate(model, x, y, n_classes=10, batch=1000):
    model.eval()
    loss_sum, correct = 0.0, 0
    per_class_correct = torch.zeros(n_classes, dtype=torch.int64)
    crit = nn.CrossEntropyLoss(reduction="sum")
    for i in range(0, x.shape[0], batch):
        xb, yb = x[i:i + batch], y[i:i + batch]
        out = model(xb)
        loss_sum += crit(out, yb).item()
        hit = out.argmax(1) == yb
        correct += int(hit.sum())
        per_class_correct += torch.bincount(yb[hit], minlength=n_classes)
    model.train()
    counts = torch.bincount(y, minlength=n_classes)
    return loss_sum / x.shape[0], correct / x.shape[0], per_class_correct.tolist(), counts.tolist()


def main(a):
    torch.set_num_threads(a.threads)
    xtr, ytr, xte, yte = load_fashion_mnist(a.data)  # before the log is opened: a refused run leaves none
    log = open(a.log, "w") if a.log else None

    def emit(obj):
        if log:
            log.write(json.dumps(obj) + "\n")
            log.flush()

    n_train = xtr.shape[0]
    torch.manual_seed(a.seed)
    model = LeNet()
    n_params = sum(p.numel() for p in model.parameters())
    crit = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    gen = torch.Generator()
    gen.manual_seed(a.seed)

    config = {
        "event": "config", "impl": "pytorch", "torch_version": torch.__version__,
        "python": sys.version.split()[0], "model": "lenet", "params": n_params, "dataset": "fashion-mnist",
        "data": a.data, "train_samples": n_train, "test_samples": xte.shape[0], "batch_size": a.batch_size,
        "epochs": a.epochs, "lr": a.lr, "momentum": a.momentum, "weight_decay": 0.0, "nesterov": False,
        "seed": a.seed, "threads": a.threads, "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
    }
    config.update(blas_info())
    emit(config)
    print("pytorch %s, LeNet (%d params), fashion-mnist %d/%d, batch %d, lr %g, momentum %g, seed %d, "
          "threads %d, BLAS: %s" % (torch.__version__, n_params, n_train, xte.shape[0], a.batch_size, a.lr,
                                    a.momentum, a.seed, a.threads, config.get("blas", "unknown")), flush=True)

    model.train()
    step = 0
    for epoch in range(1, a.epochs + 1):
        loss_sum = torch.zeros((), dtype=torch.float64)
        correct = torch.zeros((), dtype=torch.int64)
        steps = 0
        busy0, cpu0 = machine_busy_s(), time.process_time()
        t0 = time.perf_counter()
        perm = torch.randperm(n_train, generator=gen)
        for i in range(0, n_train, a.batch_size):
            idx = perm[i:i + a.batch_size]
            xb, yb = xtr[idx], ytr[idx]
            out = model(xb)
            loss = crit(out, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            step += 1
            with torch.no_grad():
                loss_sum += loss.detach().double() * yb.shape[0]
                correct += (out.argmax(1) == yb).sum()
            if a.log_steps:
                emit({"event": "step", "epoch": epoch, "step": step, "loss": float("%.9g" % loss.item()),
                      "lr": a.lr})
        seconds = time.perf_counter() - t0
        cpu_s, busy1 = time.process_time() - cpu0, machine_busy_s()
        t1 = time.perf_counter()
        test_loss, test_acc, per_class_correct, per_class_count = evaluate(model, xte, yte)
        eval_seconds = time.perf_counter() - t1
        rec = {
            "event": "epoch", "epoch": epoch, "steps": steps, "lr": a.lr,
            "train_loss": loss_sum.item() / n_train, "train_acc": correct.item() / n_train,
            "test_loss": test_loss, "test_acc": test_acc, "seconds": seconds, "eval_seconds": eval_seconds,
            "images_per_s": n_train / seconds, "cpu_s": cpu_s,
        }
        if busy0 is not None and busy1 is not None:
            rec["other_cores"] = max(0.0, (busy1 - busy0 - cpu_s) / seconds)
        emit(rec)
        print("epoch %2d  train_loss %.4f  train_acc %.4f  test_loss %.4f  test_acc %.4f  %.2f s  %.0f img/s%s"
              % (epoch, rec["train_loss"], rec["train_acc"], test_loss, test_acc, seconds, rec["images_per_s"],
                 "  (other processes: %.2f cores)" % rec["other_cores"] if rec.get("other_cores", 0) >= 0.1 else ""),
              flush=True)

    per_class = [{"class": k, "acc": (c / n if n else 0.0), "correct": c, "count": n}
                 for k, (c, n) in enumerate(zip(per_class_correct, per_class_count))]
    emit({"event": "final", "test_acc": test_acc, "per_class": per_class})
    print("final test_acc %.4f; per class: %s" % (test_acc, " ".join("%d:%.3f" % (p["class"], p["acc"])
                                                                       for p in per_class)))
    if log:
        log.close()


if __name__ == "__main__":
    main(ARGS)
