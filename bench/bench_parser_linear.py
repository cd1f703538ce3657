#!/usr/bin/env python3
"""Is every tool-output parser linear in its input? Prints figures; asserts nothing.

For every ``parse*`` function of every module in ``plugins/module_utils/_parsers/`` (found at run
time, so parsers added later are measured too) it builds inputs of N and 4*N characters from:

* ``repeat``: a fixture the function reads, repeated (many lines);
* ``one-line``: that fixture with its newlines turned into spaces, repeated (one long line);
* ``seed:<name>``: strings known to trip regexes (``Xid (``, a progress line, ``{`` nesting,
  runs of spaces...), repeated on one line and line by line.

and prints the time of each size and their ratio. A linear parser stays well under 8 for x4
(about 4, more for small inputs where fixed costs dominate); a quadratic one nears 16. A call
that runs past ``--limit`` seconds is stopped and shown as ``>LIMIT``.

    .venv/bin/python bench/bench_parser_linear.py [--size 250000] [--limit 20] [--only xid,gpuburn]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pathlib
import pkgutil
import signal
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import conftest  # noqa: E402,F401  (makes ansible_collections.gpufleet.lifecycle importable)

PACKAGE = "ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers"
REAL = ROOT.parent / "shared" / "fixtures" / "real"
OWN = ROOT / "tests" / "fixtures"

# Inputs that made earlier versions quadratic or worse (issue 8), and their kin.
SEEDS = {
    "xid-open": "NVRM: Xid (",
    "xid-line": "[ 1.0] NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=x, GPU has fallen off the bus.\n",
    "burn-progress": "46.7%  proc'd: 11367 (7109 Gflop/s) - 11100 (6743 Gflop/s)   errors: 0 - 0   temps: 62 C - 82 C \r",
    "burn-open": "1%  proc'd: 1 (1 Gflop/s) ",
    "json-open": '{"a": ',
    "list-open": "[",
    "spaces": "a" + " " * 64,
    "colon": "Key : ",
    "fwreset-header": "The reset level for device, /dev/mst/mt4129_pciconf0 is:\n",
    "fwreset-step": "-I- Sending Reset Command To Fw             -Done\n",
    "mlx-device": "Device #1:\n",
    "nvfwupd-brace": '{"TaskState": "Running",\n',
    "nvfwupd-task": "FW update started, Task Id: 1\n",
    "table-row": "| Memory | Pass |\n",
    "pipe": "|",
    "mismatch": "fabric manager NVIDIA GPU driver interface version 550.127.05 don't match with driver version ",
}


class Timeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise Timeout


def parsers(only):
    package = importlib.import_module(PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_") or (only and info.name not in only):
            continue
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        for name, func in sorted(vars(module).items()):
            if not (name == "parse" or name.startswith("parse_")) or not inspect.isfunction(func) or func.__module__ != module.__name__:
                continue
            required = [p for p in inspect.signature(func).parameters.values() if p.default is inspect.Parameter.empty]
            if len(required) == 1:
                yield f"{info.name}.{name}", func


def fixtures():
    files = []
    for base in (REAL, OWN):
        if base.is_dir():
            files.extend(path for path in sorted(base.rglob("*")) if path.is_file() and path.stat().st_size < 200_000)
    return [(path, path.read_text(encoding="utf-8", errors="replace")) for path in files]


def accepted(func, samples):
    """The fixtures the function reads without error (the smallest and the largest of them)."""
    good = []
    for path, text in samples:
        if _reads(func, text):
            good.append((path, text))
    good.sort(key=lambda item: len(item[1]))
    return [good[0], good[-1]] if len(good) > 1 else good


def _reads(func, text):
    try:
        func(text)
    except Exception:  # any refusal means "not this tool's output"
        return False
    return True


def grow(unit, size):
    if not unit:
        return ""
    return (unit * (size // len(unit) + 1))[:size]


def timed(func, text, limit):
    """Seconds for one call (the best of three when it is quick: fixed costs and noise swamp a few ms), None past the limit."""
    first = _timed_once(func, text, limit)
    if first is None or first > 0.05:
        return first
    return min(first, _timed_once(func, text, limit), _timed_once(func, text, limit))


def _timed_once(func, text, limit):
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit)
    start = time.perf_counter()
    try:
        func(text)
    except Timeout:
        return None
    except Exception:  # noqa: S110 - a ParseError is a fine answer; the time is what counts here
        pass
    finally:
        signal.alarm(0)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=250_000, help="N, characters (the second input is 4*N)")
    parser.add_argument("--limit", type=int, default=20, help="seconds before one call is stopped")
    parser.add_argument("--only", default="", help="comma-separated parser modules (xid,gpuburn...)")
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}
    samples = fixtures()
    print(f"{'parser':42} {'input':44} {'t(N) s':>9} {'t(4N) s':>9} {'x4 ->':>7}")
    worst = []
    for name, func in parsers(only):
        inputs = []
        for path, text in accepted(func, samples):
            inputs.append((f"repeat {path.name[:37]}", text))
            inputs.append((f"one-line {path.name[:35]}", text.replace("\n", " ").replace("\r", " ") + " "))
        for seed, unit in SEEDS.items():
            inputs.append((f"seed:{seed}", unit))
            if not unit.endswith("\n"):
                inputs.append((f"seed:{seed} lines", unit + "\n"))
        result = (0.0, "")
        for label, unit in inputs:
            small = timed(func, grow(unit, args.size), args.limit)
            large = timed(func, grow(unit, 4 * args.size), args.limit) if small is not None else None
            if small is None or large is None:
                ratio = float("inf")
                shown = f"{small:9.3f} {'>' + str(args.limit):>9}" if small is not None else f"{'>' + str(args.limit):>9} {'-':>9}"
            else:
                ratio = large / max(small, 0.005)  # below 5 ms a ratio says nothing
                shown = f"{small:9.3f} {large:9.3f}"
            if ratio >= result[0]:
                result = (ratio, label)
            if ratio >= 6 or (large or 0) > 1:
                print(f"{name:42} {label:44} {shown} {ratio:7.1f}")
        worst.append((result[0], name, result[1]))
    print()
    print("worst x4 ratio per parser (linear: about 4, well under 8):")
    for ratio, name, label in sorted(worst, reverse=True):
        print(f"  {ratio:7.1f}  {name:42} {label}")


if __name__ == "__main__":
    main()
