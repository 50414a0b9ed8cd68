#!/usr/bin/env python3
"""The driver of examples/bench/cpu_speed.sh (see its --help): dptrain's CPU speed against the machine's
FLOP limit, an older dptrain built in the same run, and PyTorch 2.x, PyTorch 1.13 and JAX, every program
interleaved with the others round by round. Standard library only."""
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = "cpu_speed.sh"
sys.path.insert(0, os.path.join(ROOT, "examples", "lib"))
from scriptargs import Parser, choices_list, number, uint  # noqa: E402


def die(msg, code=1):
    print("%s: %s" % (PROG, msg), file=sys.stderr)
    sys.exit(code)


def note(msg):
    print("%s: %s" % (PROG, msg), file=sys.stderr, flush=True)


def rel(path):
    """A path as the commands show it: relative to the repository where it is inside it."""
    p = os.path.abspath(path)
    return os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else p


def parse_args():
    p = Parser(prog=PROG, add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("-r", "--rounds", type=uint(1), default=5)
    p.add_argument("-e", "--epochs", type=uint(2), default=3, help="epoch 1 is dropped")
    p.add_argument("-t", "--threads", type=uint(1), default=2)
    p.add_argument("--base", default="a12b3f7")
    p.add_argument("--base-bin", default=None)
    p.add_argument("--sections", type=choices_list("lenet", "resnet", "threads", "shapes"),
                   default="lenet,resnet,threads,shapes")
    p.add_argument("--peers", type=choices_list("torch2", "torch1", "jax", "none"), default="torch2,torch1,jax")
    p.add_argument("--resnet-steps", type=uint(1), default=3)
    p.add_argument("--resnet-rounds", type=uint(1), default=3)
    p.add_argument("--threads-rounds", type=uint(1), default=3)
    p.add_argument("--no-tune", action="store_true")
    p.add_argument("--install", action="store_true")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--out", default=os.path.join(ROOT, "out", "cpu-speed"))
    p.add_argument("--wait-idle", type=number(0), default=0)
    p.add_argument("--seed", type=uint(0), default=0)
    p.add_argument("--keep-openblas-coretype", action="store_true")
    a = p.parse_args()
    if a.help:
        print(open(os.path.join(ROOT, "examples", "bench", "cpu_speed.sh")).read().split("# ---- help\n")[1]
              .split("# ---- end of help")[0].replace("# ", "").replace("#\n", "\n"), end="")
        sys.exit(0)
    a.peers = [s for s in a.peers if s != "none"]
    if a.base_bin is not None and not (os.path.isfile(a.base_bin) and os.access(a.base_bin, os.X_OK)):
        p.error("argument --base-bin: '%s' is not an executable file" % a.base_bin)
    return a


# ---------------------------------------------------------------- running and timing

KEEP_CORETYPE = False


def busy_s():
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (v[0] + v[1] + v[2] + sum(v[5:8])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def wait_idle(limit):
    end = time.time() + limit
    while time.time() < end:
        b0, t0 = busy_s(), time.time()
        time.sleep(1)
        if b0 is None or (busy_s() - b0) / (time.time() - t0) < 0.15:
            return


RETRIES = {"runs": 0, "repeated": 0, "limit": 0.25, "tries": 3}


def run(cmd, log_txt, env=None, wait=0, log=None):
    """Runs cmd (list), output to log_txt (and its JSON lines to log, if given); returns (exit status, CPU
    cores other processes used meanwhile). A run during which other processes took more than
    RETRIES["limit"] cores is repeated (at most RETRIES["tries"] runs in all), after waiting for the machine
    to be idle; the quietest one is kept."""
    RETRIES["runs"] += 1
    best = None
    for attempt in range(RETRIES["tries"]):
        if attempt:
            RETRIES["repeated"] += 1
            wait_idle(max(wait, 60))
        rc, others = run_once(cmd, log_txt, env, wait if not attempt else 0)
        if best is None or (others is not None and best[1] is not None and others < best[1]):
            best = (rc, others)
            for f in (log_txt, log):
                if f and os.path.exists(f):
                    shutil.copyfile(f, f + ".kept")
        if rc != 0 or others is None or others <= RETRIES["limit"]:
            break
    for f in (log_txt, log):
        if f and os.path.exists(f + ".kept"):
            os.replace(f + ".kept", f)
    return best


def run_once(cmd, log_txt, env=None, wait=0):
    if wait:
        wait_idle(wait)
    e = dict(os.environ)
    if not KEEP_CORETYPE:
        e.pop("OPENBLAS_CORETYPE", None)
    e.update(env or {})
    b0, t0 = busy_s(), time.time()
    r0 = os.times()
    with open(log_txt, "w") as f:
        f.write("$ %s\n" % " ".join(shlex.quote(c) for c in cmd))
        f.flush()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=e)
    r1 = os.times()
    wall = time.time() - t0
    own = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    others = None
    if b0 is not None and wall > 0:
        others = max(0.0, (busy_s() - b0 - own) / wall)
    return rc, others


def jsonl(path, event):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        o = json.loads(line)
                    except ValueError:
                        continue
                    if o.get("event") == event:
                        out.append(o)
    except OSError:
        pass
    return out


def stats(v):
    v = sorted(v)
    return statistics.median(v), v[0], v[-1]


def fmt(v, digits=3):
    if not v:
        return "n/a"
    m, lo, hi = stats(v)
    return "%.*f (%.*f-%.*f)" % (digits, m, digits, lo, digits, hi)


def tail(path, n=8):
    try:
        with open(path) as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


# ---------------------------------------------------------------- the programs

class Program:
    """One program of the comparison: how to run it, and the epoch (or step) times it gave."""

    def __init__(self, key, label, cmd, env=None, settings=""):
        self.key, self.label, self.cmd, self.env, self.settings = key, label, cmd, env or {}, settings
        self.times, self.rounds, self.others, self.failed = [], [], [], None

    def shown(self):
        envs = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in sorted(self.env.items()))
        return (envs + " " if envs else "") + " ".join(shlex.quote(rel(c) if os.path.isabs(c) and c.startswith(ROOT) else c)
                                                      for c in self.cmd)


def find_python(cands, check):
    for c in cands:
        if not c:
            continue
        path = shutil.which(c) or (c if os.path.exists(c) else None)
        if not path:
            continue
        try:
            out = subprocess.run([path, "-c", check], capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0:
            return path, out.stdout.strip()
    return None, None


TORCH_CHECK = "import torch, numpy; print(torch.__version__)"
JAX_CHECK = "import jax, numpy; print(jax.__version__)"


def peers_available(a):
    """{peer: (python, version) or (None, reason)}"""
    out = {}
    venv_t2, venv_jax = os.path.join(ROOT, "out", "torch2"), os.path.join(ROOT, "out", "jax")
    if "torch2" in a.peers:
        py, ver = find_python([os.environ.get("TORCH2_PYTHON"), os.path.join(venv_t2, "bin", "python")],
                              TORCH_CHECK + "; assert int(torch.__version__.split('.')[0]) >= 2")
        if not py and a.install:
            note("installing PyTorch 2 from PyPI into %s (about 1 GB once)" % rel(venv_t2))
            subprocess.call(["bash", os.path.join(ROOT, "tests", "torch2_env.sh"), venv_t2], stdout=subprocess.DEVNULL)
            subprocess.call([os.path.join(venv_t2, "bin", "pip"), "install", "--quiet", "numpy"])
            py, ver = find_python([os.path.join(venv_t2, "bin", "python")], TORCH_CHECK)
        out["torch2"] = (py, ver) if py else (None, "no python with torch 2 and numpy (set TORCH2_PYTHON, or --install)")
    if "torch1" in a.peers:
        py, ver = find_python([os.environ.get("TORCH1_PYTHON"), "/usr/bin/python3"],
                              TORCH_CHECK + "; assert torch.__version__.startswith('1.')")
        out["torch1"] = (py, ver) if py else (None, "no python with torch 1.x (apt-get install python3-torch, or set TORCH1_PYTHON)")
    if "jax" in a.peers:
        py, ver = find_python([os.environ.get("JAX_PYTHON"), os.path.join(venv_jax, "bin", "python")], JAX_CHECK)
        if not py and a.install:
            note("installing JAX from PyPI into %s" % rel(venv_jax))
            subprocess.call([sys.executable, "-m", "venv", venv_jax])
            subprocess.call([os.path.join(venv_jax, "bin", "pip"), "install", "--quiet", "jax", "numpy"])
            py, ver = find_python([os.path.join(venv_jax, "bin", "python")], JAX_CHECK)
        out["jax"] = (py, ver) if py else (None, "no python with jax (set JAX_PYTHON, or --install)")
    return out


def build_base(a):
    """(binary, description) of the --base commit built here, or (None, why not)."""
    if a.base_bin:
        if not os.access(a.base_bin, os.X_OK):
            die("--base-bin %s: not an executable" % a.base_bin, 2)
        return a.base_bin, "%s (given as --base-bin)" % a.base
    if a.base == "none":
        return None, "none"
    d = os.path.join(a.out, "base-%s" % re.sub(r"[^A-Za-z0-9_.-]", "_", a.base))
    src, bld = os.path.join(d, "src"), os.path.join(d, "build")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(src)
    note("building %s in %s (git archive, cmake with that commit's defaults)" % (a.base, rel(d)))
    arch = subprocess.run("git -C %s archive %s | tar -x -C %s" % (shlex.quote(ROOT), shlex.quote(a.base), shlex.quote(src)),
                          shell=True, capture_output=True, text=True)
    if arch.returncode != 0:
        return None, "%s: git archive failed: %s" % (a.base, arch.stderr.strip().splitlines()[-1:])
    logf = os.path.join(d, "build.log")
    with open(logf, "w") as f:
        rc = subprocess.call(["cmake", "-S", src, "-B", bld, "-DBUILD_TESTING=OFF"], stdout=f, stderr=subprocess.STDOUT)
        if rc == 0:
            rc = subprocess.call(["cmake", "--build", bld, "-j", str(os.cpu_count() or 2), "--target", "dptrain"],
                                 stdout=f, stderr=subprocess.STDOUT)
    binary = os.path.join(bld, "dptrain")
    if rc != 0 or not os.access(binary, os.X_OK):
        errs = [l for l in tail(logf, 200).splitlines() if "error" in l.lower()]
        return None, "%s does not build here: %s (log: %s)" % (a.base, (errs or ["see the log"])[0].strip(), rel(logf))
    flags = ""
    try:
        cache = open(os.path.join(bld, "CMakeCache.txt")).read()
        m = re.search(r"^DP_NATIVE:BOOL=(\w+)", cache, re.M)
        if m:
            flags = ", DP_NATIVE=%s" % m.group(1)
    except OSError:
        pass
    return binary, "%s built with its defaults (Release%s)" % (a.base, flags)


# ---------------------------------------------------------------- LeNet

LIMIT_CORES = []


def sgemm_envs(a):
    """bench_sgemm's environments: OpenBLAS's own choice of kernels for this CPU and, where the
    environment names one (OPENBLAS_CORETYPE), that one too; OPENBLAS_VERBOSE=2 prints the choice."""
    envs = [{"OPENBLAS_VERBOSE": "2"}]
    if os.environ.get("OPENBLAS_CORETYPE") and not KEEP_CORETYPE:
        envs.append({"OPENBLAS_VERBOSE": "2", "OPENBLAS_CORETYPE": os.environ["OPENBLAS_CORETYPE"]})
    return envs


def lenet_cmd_dptrain(binary, a, epochs, log):
    return [binary, "train", "--model", "lenet", "--dataset", "fashion-mnist", "--data", a.data, "--epochs", str(epochs),
            "--batch-size", "64", "--lr", "0.01", "--momentum", "0.9", "--seed", str(a.seed), "--threads", str(a.threads),
            "--quiet", "--log", log]


TORCH_LENET_CONFIGS = [
    # (name, flags, env): threads = T in every one; the BLAS's own pool 1 thread (Debian's torch calls the
    # system OpenBLAS, whose pool torch.set_num_threads does not reach). OpenMP's spinning: libgomp's
    # default, or bounded as dptrain bounds its own (a spinning thread takes the core a descheduled
    # partner needs when another process runs: PyTorch's steps then wait a whole time slice per operator)
    ("oneDNN convolutions (default)", [], {}),
    ("oneDNN, channels_last", ["--channels-last"], {}),
    ("oneDNN, GOMP_SPINCOUNT=3000 (dptrain's spin bound)", [], {"GOMP_SPINCOUNT": "3000"}),
    ("oneDNN, channels_last, GOMP_SPINCOUNT=3000", ["--channels-last"], {"GOMP_SPINCOUNT": "3000"}),
    ("PyTorch's own convolutions (mkldnn off)", ["--mkldnn", "off"], {}),
]
TORCH2_ONLY = [("torch.compile", ["--compile"], {})]
TORCH_RESNET_CONFIGS = [
    ("oneDNN (default)", [], {}),
    ("oneDNN, channels_last", ["--channels-last"], {}),
    ("PyTorch's own convolutions (mkldnn off)", ["--mkldnn", "off"], {}),
]


def torch_lenet_cmd(py, a, epochs, log, flags):
    return [py, os.path.join(ROOT, "examples", "pytorch", "cpu_reference.py"), "lenet", "--data", a.data, "--epochs",
            str(epochs), "--threads", str(a.threads), "--seed", str(a.seed), "--log", log] + flags


def jax_cmd(py, a, epochs, log):
    cmd = [py, os.path.join(ROOT, "examples", "jax", "lenet_reference.py"), "--data", a.data, "--epochs", str(epochs),
           "--seed", str(a.seed), "--log", log]
    if a.threads < (os.cpu_count() or a.threads):
        cmd = ["taskset", "-c", "0-%d" % (a.threads - 1)] + cmd
    return cmd


def epoch_steps(log):
    """Epoch records with "steps_in_epoch" (the log's "steps" counts from the run's start)."""
    out, prev = [], 0
    for e in jsonl(log, "epoch"):
        e = dict(e)
        e["steps_in_epoch"] = e.get("steps", 0) - prev
        prev = e.get("steps", 0)
        if e["steps_in_epoch"] > 0:
            out.append(e)
    return out


def epoch_seconds(log, drop=1):
    return [e["seconds"] for e in jsonl(log, "epoch") if e.get("epoch", 0) > drop]


def tune(a, name, configs, make_cmd, per_round_epochs, drop, rounds, outdir, pick):
    """Runs every config `rounds` times, interleaved; returns (best config, table rows)."""
    res = {c[0]: [] for c in configs}
    for r in range(1, rounds + 1):
        for i, (cname, flags, env) in enumerate(configs):
            log = os.path.join(outdir, "tune-%s-%d-r%d.jsonl" % (name, i, r))
            rc, _ = run(make_cmd(log, flags), log[:-6] + ".txt", env, a.wait_idle, log)
            got = pick(log)
            if rc != 0 or not got:
                note("tuning %s: '%s' failed (exit %d); last lines:\n%s" % (name, cname, rc, tail(log[:-6] + ".txt")))
                res[cname] = None
            elif res[cname] is not None:
                res[cname] += got
    # kept: the lowest median (runs disturbed by other processes were repeated, see run())
    ok = [(statistics.median(v), c) for c in configs for v in [res[c[0]]] if v]
    if not ok:
        return None, []
    best = min(ok, key=lambda t: t[0])[1]
    rows = [(c[0], fmt(res[c[0]]) if res[c[0]] else "failed", c[0] == best[0]) for c in configs]
    return best, rows


def profile_torch(a, out, overheads):
    """Where a PyTorch LeNet step's time goes (cpu_reference.py overhead), with the default settings
    and with the kept ones: a markdown table of the operators' self time per step."""
    cols, tables = [], []
    for ver, py, best in overheads:
        for name, flags, env in ([TORCH_LENET_CONFIGS[0]] + ([best] if best[0] != TORCH_LENET_CONFIGS[0][0] else [])):
            log = os.path.join(out, "overhead-%s-%d.jsonl" % (re.sub(r"[^0-9A-Za-z.]", "_", ver), len(cols)))
            cmd = [py, os.path.join(ROOT, "examples", "pytorch", "cpu_reference.py"), "overhead", "--threads",
                   str(a.threads), "--log", log] + flags
            rc, _ = run(cmd, log[:-6] + ".txt", env, a.wait_idle, log)
            if rc != 0:
                continue
            ops = {o["name"]: o["self_us_per_step"] for o in jsonl(log, "op")}
            ov = {o["what"]: o["us"] for o in jsonl(log, "overhead")}
            cols.append(("PyTorch %s, %s" % (ver, name), ops, ov))
    if not cols:
        return []
    names = []
    for _, ops, _ in cols:
        for n, _ in sorted(ops.items(), key=lambda kv: -kv[1])[:8]:
            if n not in names:
                names.append(n)
    md = ["### Where a PyTorch LeNet step's time goes\n",
          "`examples/pytorch/cpu_reference.py overhead --threads %d` (its settings' flags added): the cost of one small "
          "operator, a whole LeNet step (forward, backward, SGD) at batch 1 and 64, and the autograd profiler's self time "
          "per step of the operators that take the most, microseconds:\n" % a.threads]
    md.append("| | " + " | ".join(c[0] for c in cols) + " |")
    md.append("|---|" + "---:|" * len(cols))
    for what in ("torch.add of 1-element tensors", "LeNet step, batch 1", "LeNet step, batch 64"):
        md.append("| %s | " % what + " | ".join("%.1f" % c[2][what] if what in c[2] else "" for c in cols) + " |")
    for n in names:
        md.append("| %s | " % n + " | ".join("%.0f" % c[1][n] if n in c[1] else "" for c in cols) + " |")
    md.append("")
    return md


# sections in which dptrain itself measured nothing: the run fails (exit 1) after writing what it has
UNMEASURED = []


def section_lenet(a, md, dptrain, base, base_desc, peers, sgemm):
    out = os.path.join(a.out, "lenet")
    os.makedirs(out, exist_ok=True)
    T, E = a.threads, a.epochs
    progs = [Program("dptrain", "dptrain (this build)", lenet_cmd_dptrain(dptrain, a, E, "LOG"))]
    if base:
        progs.append(Program("base", "dptrain %s" % a.base, lenet_cmd_dptrain(base, a, E, "LOG")))
    tune_md, overheads = [], []
    for key, label in (("torch2", "PyTorch"), ("torch1", "PyTorch")):
        if key not in peers:
            continue
        py, ver = peers[key]
        if not py:
            tune_md.append("- %s: not measured: %s" % ({"torch2": "PyTorch 2.x", "torch1": "PyTorch 1.13"}[key], ver))
            continue
        configs = TORCH_LENET_CONFIGS + (TORCH2_ONLY if key == "torch2" else [])
        best = configs[0]
        if not a.no_tune:
            note("LeNet: trying %d settings of PyTorch %s (2 epochs each, 2 rounds)" % (len(configs), ver))
            best, rows = tune(a, "lenet-" + key, configs, lambda log, fl, py=py: torch_lenet_cmd(py, a, 2, log, fl),
                              2, 1, 2, out, lambda log: epoch_seconds(log, 1))
            if best is None:
                tune_md.append("- PyTorch %s: every setting failed (logs in %s)" % (ver, rel(out)))
                continue
            tune_md.append("PyTorch %s, LeNet epoch 2, s/epoch median (min-max) of 2 runs each, interleaved; kept: the "
                           "lowest median:\n" % ver)
            tune_md.append("| setting | s/epoch |\n|---|---|")
            tune_md += ["| %s%s | %s |" % (n, " (kept)" if kept else "", v) for n, v, kept in rows]
            tune_md.append("")
        progs.append(Program(key, "%s %s" % (label, ver), torch_lenet_cmd(py, a, E, "LOG", best[1]), best[2],
                             "threads %d, %s" % (T, best[0])))
        overheads.append((ver, py, best))
    if "jax" in peers:
        py, ver = peers["jax"]
        if py:
            progs.append(Program("jax", "JAX %s" % ver, jax_cmd(py, a, E, "LOG"), {},
                                 "jit-compiled step; XLA's own threads (%s)" % ("taskset to %d cores" % T if a.threads < (os.cpu_count() or T) else "all %d cores" % T)))
        else:
            tune_md.append("- JAX: not measured: %s" % ver)

    limits, flops = [], None
    for r in range(1, a.rounds + 1):
        note("LeNet round %d/%d" % (r, a.rounds))
        if sgemm:
            best = None
            for i, env in enumerate(sgemm_envs(a)):
                txt = os.path.join(out, "sgemm-r%d-%d.txt" % (r, i))
                rc, _ = run([sgemm, "--threads", str(T), "--seconds", "1"], txt, env, a.wait_idle)
                body = open(txt).read()
                m = re.search(r"^limit_gflops ([0-9.]+)", body, re.M)
                f = re.search(r"^epoch_flops ([0-9.e+]+)", body, re.M)
                core = re.search(r"^Core: (\S+)", body, re.M)
                if rc == 0 and m and f:
                    flops = float(f.group(1))
                    if best is None or float(m.group(1)) > best[0]:
                        best = (float(m.group(1)), core.group(1) if core else "?")
                else:
                    note("bench_sgemm failed (exit %d): %s" % (rc, tail(txt)))
            if best:
                limits.append(best[0])
                LIMIT_CORES.append(best[1])
        for p in progs:
            if p.failed:
                continue
            log = os.path.join(out, "%s-r%d.jsonl" % (p.key, r))
            cmd = [log if c == "LOG" else c for c in p.cmd]
            rc, others = run(cmd, log[:-6] + ".txt", p.env, a.wait_idle, log)
            got = epoch_seconds(log, 1)
            if rc != 0 or not got:
                p.failed = "exit %d: %s" % (rc, tail(log[:-6] + ".txt", 3).strip())
                note("%s failed in round %d: %s" % (p.label, r, p.failed))
                continue
            p.times += got
            p.rounds.append(statistics.median(got))
            if others is not None:
                p.others.append(others)

    if not any(p.times for p in progs if p.key == "dptrain"):
        UNMEASURED.append("lenet")
    md.append("## LeNet / Fashion-MNIST, batch 64, %d thread%s\n" % (T, "s" if T > 1 else ""))
    if flops and limits:
        lim_t = [flops / (l * 1e9) for l in limits]
        lim_med = statistics.median(lim_t)
    else:
        lim_t, lim_med = [], None
    md.append("| | s/epoch, median (min-max) | epoch / (FLOPs / limit) | other processes (cores, median) |")
    md.append("|---|---|---:|---:|")
    if lim_t:
        cores = sorted(set(LIMIT_CORES), key=LIMIT_CORES.count, reverse=True)
        md.append("| the limit: %.3g GFLOP at OpenBLAS's best sgemm rate, %s GFLOP/s (its %s kernels%s) | %s | 1.00 | |"
                  % (flops / 1e9, fmt(limits, 1), cores[0], ", in %d of %d rounds" % (LIMIT_CORES.count(cores[0]),
                     len(LIMIT_CORES)) if len(cores) > 1 else "", fmt(lim_t)))
    for p in progs:
        if not p.times:
            md.append("| %s | failed: %s | | |" % (p.label, p.failed))
            continue
        ratio = "%.2f" % (statistics.median(p.times) / lim_med) if lim_med else "n/a"
        oth = "%.2f" % statistics.median(p.others) if p.others else "?"
        md.append("| %s | %s | %s | %s |" % (p.label, fmt(p.times), ratio, oth))
    md.append("")
    d = {p.key: p for p in progs}
    if "base" in d and d["dptrain"].rounds and d["base"].rounds:
        n = min(len(d["dptrain"].rounds), len(d["base"].rounds))
        pair = [d["dptrain"].rounds[i] / d["base"].rounds[i] for i in range(n)]
        md.append("This build / %s: %.3f (ratio of the medians); round by round %s." % (
            a.base, statistics.median(d["dptrain"].times) / statistics.median(d["base"].times), fmt(pair)))
    if base_desc and "base" not in d:
        md.append("%s: %s." % (a.base, base_desc))
    md.append("")
    md.append("Runs: %d rounds, each: `bench_sgemm` (the limit), then every program for %d epochs, in the order of the "
              "table; epoch 1 of every run dropped (warm-up; PyTorch's torch.compile and JAX compile there). The limit is "
              "the best rate OpenBLAS's sgemm sustained over 0.1 s windows on %d thread%s, at 1024^3 or at one of LeNet's "
              "own GEMM shapes (`%s`); the FLOPs are counted from the model (forward, weight gradients and input "
              "gradients of every convolution and linear layer, 2 per multiply-add)." % (
                  a.rounds, E, T, "s" if T > 1 else "", rel(sgemm) + " --threads %d" % T if sgemm else "bench_sgemm"))
    md.append("")
    md.append("Settings and commands (LOG: each run's JSON lines):\n")
    for p in progs:
        md.append("- %s%s: `%s`" % (p.label, " (%s)" % p.settings if p.settings else "", p.shown()))
    if base_desc and "base" in d:
        md.append("- %s: %s" % (a.base, base_desc))
    md.append("")
    if overheads:
        md += profile_torch(a, out, overheads)
    if tune_md:
        md.append("### Peers' settings\n")
        md.append("Each PyTorch ran with torch.set_num_threads(%d), OMP_NUM_THREADS=%d and its BLAS's own pool at 1 thread; "
                  "the settings below were tried first, interleaved, and the fastest kept for the table.\n" % (T, T))
        md += tune_md
        md.append("")
    return {p.key: p for p in progs}, limits, flops


# ---------------------------------------------------------------- ResNet-18

def section_resnet(a, md, dptrain, base, peers):
    out = os.path.join(a.out, "resnet")
    os.makedirs(out, exist_ok=True)
    T, S, W = a.threads, a.resnet_steps, 1
    # two epochs of S steps: the first is the warm-up, the second's seconds / steps the step time (older
    # builds log no per-step time)
    dcmd = lambda b: [b, "train", "--model", "resnet18", "--dataset", "synthetic", "--shape", "3x224x224", "--classes",
                      "10", "--samples", str(32 * S), "--batch-size", "32", "--epochs", "2", "--lr", "0.01",
                      "--momentum", "0.9", "--threads", str(T), "--quiet", "--log", "LOG"]
    progs = [Program("dptrain", "dptrain (this build)", dcmd(dptrain))]
    if base:
        progs.append(Program("base", "dptrain %s" % a.base, dcmd(base)))
    tune_md = []
    for key in ("torch2", "torch1"):
        if key not in peers or not peers[key][0]:
            continue
        py, ver = peers[key]
        mk = lambda log, fl, py=py, s=S: [py, os.path.join(ROOT, "examples", "pytorch", "cpu_reference.py"), "resnet18",
                                         "--batch-size", "32", "--shape", "3x224x224", "--classes", "10", "--steps",
                                         str(s), "--warmup", str(W), "--threads", str(T), "--log", log] + fl
        best = TORCH_RESNET_CONFIGS[0]
        if not a.no_tune:
            note("ResNet-18: trying %d settings of PyTorch %s" % (len(TORCH_RESNET_CONFIGS), ver))
            best, rows = tune(a, "resnet-" + key, TORCH_RESNET_CONFIGS, lambda log, fl: mk(log, fl, s=2), 2, 0, 1, out,
                              lambda log: [e["seconds"] for e in jsonl(log, "step")])
            if best is None:
                continue
            tune_md.append("PyTorch %s, ResNet-18 step, s median (min-max) of 2 steps after a warm-up step:\n" % ver)
            tune_md.append("| setting | s/step |\n|---|---|")
            tune_md += ["| %s%s | %s |" % (n, " (kept)" if kept else "", v) for n, v, kept in rows]
            tune_md.append("")
        progs.append(Program(key, "PyTorch %s" % ver, mk("LOG", best[1]), best[2], "threads %d, %s" % (T, best[0])))
    for r in range(1, a.resnet_rounds + 1):
        note("ResNet-18 round %d/%d" % (r, a.resnet_rounds))
        for p in progs:
            if p.failed:
                continue
            log = os.path.join(out, "%s-r%d.jsonl" % (p.key, r))
            rc, others = run([log if c == "LOG" else c for c in p.cmd], log[:-6] + ".txt", p.env, a.wait_idle, log)
            if p.key in ("dptrain", "base"):
                got = [e["seconds"] / e["steps_in_epoch"] for e in epoch_steps(log) if e["epoch"] == 2]
            else:
                got = [s["seconds"] for s in jsonl(log, "step") if "seconds" in s]
            if rc != 0 or not got:
                p.failed = "exit %d: %s" % (rc, tail(log[:-6] + ".txt", 3).strip())
                note("%s failed: %s" % (p.label, p.failed))
                continue
            p.times += got
            if others is not None:
                p.others.append(others)
    if not any(p.times for p in progs if p.key == "dptrain"):
        UNMEASURED.append("resnet")
    md.append("## ResNet-18, batch 32, 3x224x224 (synthetic), %d thread%s\n" % (T, "s" if T > 1 else ""))
    md.append("| | s/step, median (min-max) | / PyTorch 2.x | / PyTorch 1.13 | other processes (cores) |")
    md.append("|---|---|---:|---:|---:|")
    d = {p.key: p for p in progs}
    for p in progs:
        if not p.times:
            md.append("| %s | failed: %s | | | |" % (p.label, p.failed))
            continue
        m = statistics.median(p.times)
        r2 = "%.2f" % (m / statistics.median(d["torch2"].times)) if "torch2" in d and d["torch2"].times else ""
        r1 = "%.2f" % (m / statistics.median(d["torch1"].times)) if "torch1" in d and d["torch1"].times else ""
        md.append("| %s | %s | %s | %s | %s |" % (p.label, fmt(p.times), r2, r1,
                                                   "%.2f" % statistics.median(p.others) if p.others else "?"))
    md.append("")
    md.append("%d rounds, interleaved; SGD lr 0.01 momentum 0.9, 10 classes; PyTorch: 1 warm-up step, then %d timed "
              "steps; dptrain: 2 epochs of %d steps, the step time is epoch 2's seconds / %d. Commands:\n"
              % (a.resnet_rounds, S, S, S))
    for p in progs:
        md.append("- %s%s: `%s`" % (p.label, " (%s)" % p.settings if p.settings else "", p.shown()))
    md.append("")
    if tune_md:
        md.append("### Peers' ResNet-18 settings\n")
        md += tune_md
    return d


# ---------------------------------------------------------------- threads

def section_threads(a, md, dptrain):
    out = os.path.join(a.out, "threads")
    os.makedirs(out, exist_ok=True)
    T = a.threads if a.threads > 1 else 2
    cases = [
        ("LeNet / Fashion-MNIST, batch 64", ["--model", "lenet", "--dataset", "fashion-mnist", "--data", a.data]),
        ("LeNet-BN, 50,000 synthetic 3x32x32, batch 64", ["--model", "lenet-bn", "--dataset", "synthetic", "--shape",
                                                          "3x32x32", "--samples", "50000"]),
        ("ResNet-18, 1,024 synthetic 3x32x32, batch 32", ["--model", "resnet18", "--dataset", "synthetic", "--shape",
                                                          "3x32x32", "--samples", "1024", "--batch-size", "32"]),
    ]
    res = {(i, t): [] for i in range(len(cases)) for t in (1, T)}
    cmds = {}
    for r in range(1, a.threads_rounds + 1):
        note("threads round %d/%d" % (r, a.threads_rounds))
        for i, (name, flags) in enumerate(cases):
            for t in (1, T):
                log = os.path.join(out, "c%d-t%d-r%d.jsonl" % (i, t, r))
                cmd = [dptrain, "train"] + flags + ["--epochs", "2", "--threads", str(t), "--quiet", "--log", log]
                cmds[(i, t)] = cmd
                rc, _ = run(cmd, log[:-6] + ".txt", None, a.wait_idle, log)
                got = epoch_seconds(log, 1)
                if rc == 0 and got:
                    res[(i, t)] += got
                else:
                    note("threads: %s --threads %d failed: %s" % (name, t, tail(log[:-6] + ".txt", 3)))
    if not any(res.values()):
        UNMEASURED.append("threads")
    md.append("## More threads never slower (dptrain, this build)\n")
    md.append("| model | --threads 1, s/epoch | --threads %d, s/epoch | %d / 1 |" % (T, T))
    md.append("|---|---|---|---:|")
    for i, (name, _) in enumerate(cases):
        a1, a2 = res[(i, 1)], res[(i, T)]
        ratio = "%.2f" % (statistics.median(a2) / statistics.median(a1)) if a1 and a2 else "n/a"
        md.append("| %s | %s | %s | %s |" % (name, fmt(a1), fmt(a2), ratio))
    md.append("")
    md.append("%d rounds, --threads 1 and %d in turn; epoch 2 of each 2-epoch run. Commands (LOG the JSON lines): %s" % (
        a.threads_rounds, T, "; ".join("`%s`" % " ".join(shlex.quote(rel(c) if c.startswith(ROOT) else c) for c in cmds[(i, T)])
                                        .replace("--threads %d" % T, "--threads T") for i in range(len(cases)) if (i, T) in cmds)))
    md.append("")


def section_shapes(a, md, dptrain):
    """LeNet with the same T cores filled as P processes (mpirun, --backend mpi) of T/P threads each, for
    every P dividing T; P = 1 is one process (--backend sim) with T threads. The global batch is 64 in
    each: the same training, split differently."""
    out = os.path.join(a.out, "shapes")
    os.makedirs(out, exist_ok=True)
    T = a.threads
    mpirun = shutil.which("mpirun")
    shapes = [p for p in range(1, T + 1) if T % p == 0 and (p == 1 or mpirun)]
    if not mpirun:
        note("shapes: mpirun not found (apt-get install openmpi-bin): only 1 process x %d threads" % T)
    flags = ["train", "--model", "lenet", "--dataset", "fashion-mnist", "--data", a.data, "--epochs", "3",
             "--batch-size", "64", "--seed", str(a.seed), "--quiet"]
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    res, cmds = {p: [] for p in shapes}, {}
    for r in range(1, a.threads_rounds + 1):
        note("shapes round %d/%d" % (r, a.threads_rounds))
        for p in shapes:
            log = os.path.join(out, "p%d-r%d.jsonl" % (p, r))
            q = ["--threads", str(T // p), "--log", log]
            if p == 1:
                cmd = [dptrain] + flags + ["--backend", "sim"] + q
            else:
                cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(p), dptrain] + flags + \
                      ["--backend", "mpi"] + q
            cmds[p] = cmd
            rc, _ = run(cmd, log[:-6] + ".txt", env, a.wait_idle, log)
            got = epoch_seconds(log, 1)
            if rc == 0 and got:
                res[p] += got
            else:
                note("shapes: %d processes failed: %s" % (p, tail(log[:-6] + ".txt", 3)))
    med = {p: statistics.median(v) for p, v in res.items() if v}
    best = min(med.values()) if med else None
    if not med:
        UNMEASURED.append("shapes")
    md.append("## Processes x threads on %d cores (LeNet / Fashion-MNIST, global batch 64, dptrain)\n" % T)
    md.append("| processes x threads | s/epoch, median (min-max) | / the best shape |")
    md.append("|---|---|---:|")
    for p in shapes:
        md.append("| %d x %d | %s | %s |" % (p, T // p, fmt(res[p]), "%.2f" % (med[p] / best) if p in med else "n/a"))
    md.append("")
    md.append("%d rounds, the shapes in turn; epochs 2-3 of each 3-epoch run (rank 0's log). Commands (LOG the JSON "
              "lines): %s" % (a.threads_rounds, "; ".join(
                  "`%s`" % " ".join(shlex.quote(rel(c) if c.startswith(ROOT) else c) for c in cmds[p]) for p in shapes
                  if p in cmds)))
    md.append("")


# ---------------------------------------------------------------- main

def machine():
    model = platform.processor()
    flags = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and not model.strip("x86_64"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = line
                break
    except OSError:
        pass
    simd = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "SSE"
    mem = ""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = "%.0f GiB" % (int(line.split()[1]) / 1024 / 1024)
    except OSError:
        pass
    return "%s (%s), %d cores, %s" % (model, simd, os.cpu_count() or 0, mem)


def main():
    global KEEP_CORETYPE
    a = parse_args()
    KEEP_CORETYPE = a.keep_openblas_coretype
    a.out = os.path.abspath(a.out)
    os.makedirs(a.out, exist_ok=True)
    dptrain = os.environ.get("DPTRAIN") or os.path.join(ROOT, "build", "dptrain")
    sgemm = os.environ.get("BENCH_SGEMM") or os.path.join(os.path.dirname(dptrain), "bench_sgemm")
    missing = []
    if not os.access(dptrain, os.X_OK):
        missing.append("the dptrain binary %s (build it: cmake -S . -B build && cmake --build build -j2, or set DPTRAIN)" % dptrain)
    if "lenet" in a.sections and not os.access(sgemm, os.X_OK):
        missing.append("bench_sgemm at %s (built with dptrain; or set BENCH_SGEMM)" % sgemm)
    if "lenet" in a.sections or "threads" in a.sections or "shapes" in a.sections:
        for f in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
            if not any(os.path.exists(os.path.join(a.data, f + s)) for s in (".gz", "")):
                missing.append("%s(.gz) in %s (apt-get install dataset-fashion-mnist, or --data DIR)" % (f, a.data))
    if missing:
        die("cannot run, missing:\n  - " + "\n  - ".join(missing))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"]
    version = subprocess.run([dptrain, "--version"], capture_output=True, text=True).stdout
    variant = re.search(r"cpu kernels: (.*)", version)
    blas = subprocess.run(["pkg-config", "--modversion", "openblas"], capture_output=True, text=True).stdout.strip()
    peers = peers_available(a) if ("lenet" in a.sections or "resnet" in a.sections) else {}
    base, base_desc = (None, None)
    if "lenet" in a.sections or "resnet" in a.sections:
        base, base_desc = build_base(a)
        if not base and a.base != "none":
            note(base_desc)
    md = ["# CPU speed: dptrain, the machine's FLOP limit and the peers\n"]
    envs = " ".join("%s=%s" % (k, shlex.quote(rel(os.environ[k]) if os.environ[k].startswith(ROOT) else os.environ[k]))
                    for k in ("OPENBLAS_CORETYPE", "DPTRAIN", "BENCH_SGEMM")
                    if os.environ.get(k) and (k != "OPENBLAS_CORETYPE" or KEEP_CORETYPE))
    cmdline = (envs + " " if envs else "") + "examples/bench/cpu_speed.sh " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    md.append("- Command: `%s`" % cmdline.strip())
    md.append("- Machine: %s; OpenBLAS %s; dptrain's CPU kernels: %s" % (machine(), blas or "?",
                                                                        variant.group(1) if variant else "?"))
    md.append("- Date: %s; load average before: %s" % (started, " ".join(load0)))
    ct = os.environ.get("OPENBLAS_CORETYPE")
    if ct and not KEEP_CORETYPE:
        md.append("- The environment's OPENBLAS_CORETYPE=%s was removed for every run: OpenBLAS picks its kernels for "
                  "the CPU itself (the limit is the best of both)" % ct)
    elif ct:
        md.append("- OPENBLAS_CORETYPE=%s kept for every run" % ct)
    md.append("")
    if "lenet" in a.sections:
        section_lenet(a, md, dptrain, base, base_desc, peers, sgemm)
    if "resnet" in a.sections:
        section_resnet(a, md, dptrain, base, peers)
    if "threads" in a.sections:
        section_threads(a, md, dptrain)
    if "shapes" in a.sections:
        section_shapes(a, md, dptrain)
    load1 = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"]
    md.append("Load average after: %s. %d of the %d runs were repeated because other processes took more than %.2f "
              "cores meanwhile (the quietest of at most %d kept). Logs: %s." % (
                  " ".join(load1), RETRIES["repeated"], RETRIES["runs"], RETRIES["limit"], RETRIES["tries"], rel(a.out)))
    text = "\n".join(md) + "\n"
    with open(os.path.join(a.out, "cpu_speed.md"), "w") as f:
        f.write(text)
    print(text, end="")
    note("markdown written to %s" % rel(os.path.join(a.out, "cpu_speed.md")))
    if UNMEASURED:
        die("nothing was measured in section(s) %s: every dptrain run failed (logs in %s)" % (
            ",".join(UNMEASURED), rel(a.out)))


if __name__ == "__main__":
    main()
