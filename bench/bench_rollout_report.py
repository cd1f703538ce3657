"""Figures for the rollout report (rollout_report): 1,000 and 10,000 nodes.

    .venv/bin/python bench/bench_rollout_report.py

Prints, for each size, the time and peak memory of validating the records, building the report and rendering every
format (the per-node JSON files, the report's JSON, Markdown, HTML with its SVG timeline, JUnit XML), and the size
of each output. Each node has 9 or 10 phases (a canary soaks), 2 checks, versions before and after; one node in a
hundred is rolled back, one in two hundred skipped. Files are not written (the disk is not what is measured).
The ratio of the two times says whether it stays linear (about 10).
Then the module end to end (AnsibleModule's argument checks, every file written with fsync into a temporary
folder, then the same again: nothing rewritten) for the same sizes.
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import sys
import tempfile
import time
import tracemalloc

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import conftest  # noqa: E402,F401,I001  (makes ansible_collections.gpufleet.lifecycle importable)
from ansible.module_utils import basic  # noqa: E402
from ansible.module_utils.common.text.converters import to_bytes  # noqa: E402

try:  # ansible-core >= 2.19
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core 2.16 - 2.18

    @contextlib.contextmanager
    def patch_module_args(args=None):
        original = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}))
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = original

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout import RENDERERS, build_report, node_evidence  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.modules import rollout_report  # noqa: E402
from ansible_collections.gpufleet.lifecycle.tests.browser.rollout_sample import node_name, sample_rollout  # noqa: E402

RID = "r-bench"


def run_module(args):
    """The module's main() in this process; its JSON result."""
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        rollout_report.main()
    return json.loads(out.getvalue())


def end_to_end(count, records, plan):
    with tempfile.TemporaryDirectory(prefix="bench-rollout-report.") as folder:
        args = {"dest": folder, "rollout_id": RID, "records": records, "plan": plan}
        start = time.perf_counter()
        first = run_module(args)
        written = time.perf_counter() - start
        start = time.perf_counter()
        again = run_module(args)
        unchanged = time.perf_counter() - start
        assert first["changed"] and not again["changed"], (first.get("msg"), again.get("msg"))
        files = sum(1 for _ in pathlib.Path(folder).rglob("*.*"))
    print(f"rollout_report module, {count} nodes: {written:.2f} s writing {files} files, {unchanged:.2f} s for the second run (nothing rewritten)")


def main():
    times = {}
    for count in (1000, 10000):
        width = len(str(count))
        rollback = tuple(node_name(i, width) for i in range(7, count, 100))
        skipped = tuple(node_name(i, width) for i in range(50, count, 200))
        records, plan = sample_rollout(count, rollback=rollback, skipped=skipped, rollout_id=RID)
        extra = {"who": "bench@ctl", "failure_budget": count, "max_unavailable": "10%"}

        def run(records=records, plan=plan, extra=extra):
            report = build_report(records, RID, plan=plan, summary_extra=extra)
            sizes = {fmt: len(render(report)) for fmt, render in RENDERERS.items()}
            sizes["nodes/*.json"] = sum(len(text) for text in node_evidence(report).values())
            return report, sizes

        start = time.perf_counter()
        report, sizes = run()
        times[count] = time.perf_counter() - start
        tracemalloc.start()  # a second run for the memory: tracemalloc slows Python several times
        run()
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        s = report["summary"]
        print(
            f"rollout report, {count} nodes: {times[count]:.2f} s, peak memory {peak / 2**20:.0f} MiB; "
            + ", ".join(f"{fmt} {size / 2**20:.1f} MiB" for fmt, size in sizes.items())
            + f"; upgraded {s['upgraded']}, rolled back {s['rolled_back']}, skipped {s['skipped']}"
        )
    print(f"10,000 / 1,000 nodes time ratio: {times[10000] / times[1000]:.1f} (linear: about 10)")
    for count in (1000, 10000):
        width = len(str(count))
        records, plan = sample_rollout(count, rollback=(node_name(7, width),), rollout_id=RID)
        end_to_end(count, records, plan)


if __name__ == "__main__":
    main()
