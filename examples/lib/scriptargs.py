"""Argument parsing the example scripts' Python programs share (the counterpart of args.sh): a bad
argument is one line naming it, exit 2, no traceback and no usage block, checked before the heavy
modules (torch, numpy, jax) are imported; a run that measured nothing exits 1 saying so.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    from scriptargs import Parser, uint, number  # noqa: E402
    p = Parser(description=...)
    p.add_argument("--epochs", type=uint(1), default=3)
Only the standard library: it is imported before anything else."""
import argparse
import os
import re
import sys


class Parser(argparse.ArgumentParser):
    """argparse, with errors as one line ("prog: argument --x: what; see prog --help", exit 2) and no
    abbreviated flags (--epoch is not --epochs: dptrain refuses it too)."""

    def __init__(self, *a, **kw):
        kw.setdefault("allow_abbrev", False)
        super().__init__(*a, **kw)

    def error(self, message):
        prog = self.prog.split()[0]
        sys.stderr.write("%s: %s; see %s --help\n" % (self.prog, message.replace("\n", " "), prog))
        sys.exit(2)


def uint(lo=0):
    """type=: a decimal integer >= lo (at most 9 digits)."""
    def parse(s):
        if not re.fullmatch(r"[0-9]{1,9}", s) or int(s) < lo:
            raise argparse.ArgumentTypeError("expected an integer >= %d, got '%s'" % (lo, s))
        return int(s)
    parse.__name__ = "integer >= %d" % lo
    return parse


def number(lo=0.0, above=False, below=None):
    """type=: a finite decimal number >= lo (> lo with above=True; < below where given)."""
    def parse(s):
        try:
            v = float(s)
        except ValueError:
            v = None
        ok = v is not None and v == v and v not in (float("inf"), float("-inf")) and \
            (v > lo if above else v >= lo) and (below is None or v < below)
        if not ok:
            want = "%s %g" % (">" if above else ">=", lo) + (" and < %g" % below if below is not None else "")
            raise argparse.ArgumentTypeError("expected a number %s, got '%s'" % (want, s))
        return v
    parse.__name__ = "number"
    return parse


def choices_list(*allowed, empty_ok=False):
    """type=: a comma-separated list of the allowed words (kept as a list, in order)."""
    def parse(s):
        items = [x for x in s.split(",") if x]
        bad = [x for x in items if x not in allowed]
        if bad or (not items and not empty_ok):
            raise argparse.ArgumentTypeError("expected a comma-separated list of %s, got '%s'" % (",".join(allowed), s))
        return items
    parse.__name__ = "list"
    return parse


def dims(s):
    """type=: a shape CxHxW of positive integers, kept as the string."""
    if not re.fullmatch(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}x[1-9][0-9]{0,4}", s):
        raise argparse.ArgumentTypeError("expected CxHxW (positive integers, e.g. 3x32x32), got '%s'" % s)
    return s


def existing_dir(s):
    """type=: an existing directory."""
    if not os.path.isdir(s):
        raise argparse.ArgumentTypeError("'%s' is not a directory" % s)
    return s


def existing_file(s):
    """type=: an existing, readable file."""
    if not (os.path.isfile(s) and os.access(s, os.R_OK)):
        raise argparse.ArgumentTypeError("'%s' is not a readable file" % s)
    return s


def need_modules(prog, *names, hint=""):
    """Exits 1 with one line when a module the run needs is not installed (instead of a traceback)."""
    import importlib.util
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        sys.stderr.write("%s: needs the Python module(s) %s, which %s cannot import%s\n" % (
            prog, ", ".join(missing), sys.executable, "; " + hint if hint else ""))
        sys.exit(1)


def nothing_measured(prog, why):
    """A run that produced no figure: one line, exit 1."""
    sys.stderr.write("%s: nothing was measured: %s\n" % (prog, why))
    sys.exit(1)
