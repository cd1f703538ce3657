"""Figures for the node state file: locked updates per second with 1 and 4 writers.

    .venv/bin/python bench/bench_state_lock.py [updates per writer, default 300]

Each update is what a module does: take the flock on gpufleet.fact.lock, load and check the
document (a realistic one: last known good entries and a full 200-entry history), change it,
copy the old file to gpufleet.fact.prev and write the new one (mkstemp, fsync, rename, folder
fsync). Prints updates/s, the mean and worst wait for one update, and whether every update of
every writer landed (the count in the file). Run in a temporary folder on the disk that holds
this checkout's /tmp: fsync dominates, so the figure depends on that disk.
"""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import conftest  # noqa: E402,F401,I001  (makes ansible_collections.gpufleet.lifecycle importable)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _state  # noqa: E402


def seed(path):
    doc = _state.empty()
    _state.record_last_known_good(doc, "driver", "550.90.07", {"kernel_module": "open", "method": "runfile"}, now="2024-06-11T09:00:00+00:00")
    _state.record_last_known_good(doc, "fabricmanager", "550.90.07", now="2024-06-11T09:00:00+00:00")
    for n in range(_state.HISTORY_LIMIT):
        _state.append_history(
            doc,
            "driver",
            "upgrade",
            before="535.161.08",
            after="550.90.07",
            result="ok",
            rollout_id="r-1",
            details={"message": "x" * 120},
            now=f"2024-06-11T09:{n % 60:02d}:00+00:00",
        )
    doc["bench_counter"] = 0
    _state.save(path, doc)


def bump(doc):
    doc["bench_counter"] += 1
    _state.append_history(doc, "driver", "bench", result="ok", now="2024-06-11T10:00:00+00:00")
    return True


def writer(path, updates, start, results):
    start.wait()
    waits = []
    for _ in range(updates):
        began = time.perf_counter()
        _state.update(path, bump)
        waits.append(time.perf_counter() - began)
    results.put((sum(waits) / len(waits), max(waits)))


def run(writers, updates):
    with tempfile.TemporaryDirectory(prefix="bench-state-") as folder:
        path = os.path.join(folder, "gpufleet.fact")
        seed(path)
        ctx = multiprocessing.get_context("fork")
        start, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=writer, args=(path, updates, start, results)) for _ in range(writers)]
        for proc in procs:
            proc.start()
        began = time.perf_counter()
        start.set()
        stats = [results.get() for _ in procs]
        for proc in procs:
            proc.join()
        elapsed = time.perf_counter() - began
        landed = _state.load(path)["bench_counter"]
        size = os.path.getsize(path)
    total = writers * updates
    mean = sum(s[0] for s in stats) / len(stats)
    worst = max(s[1] for s in stats)
    print(
        f"{writers} writer(s) x {updates} updates: {total / elapsed:7.0f} updates/s, "
        f"one update {mean * 1000:6.2f} ms mean / {worst * 1000:7.2f} ms worst, {landed}/{total} landed, file {size // 1024} KiB"
    )


def main():
    updates = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    for writers in (1, 4):
        run(writers, updates)


if __name__ == "__main__":
    main()
