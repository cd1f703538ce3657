# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_validate checks that run a tool: NVLink status, CUDA smoke test, DCGM diag, NCCL, gpu-burn (private).

Every tool runs through a ``_tools.Tool`` wrapper with an argument list and, for the long ones,
the ``timeout`` option (coreutils ``timeout``: exit status 124 becomes a failing check that says
the limit was reached, never a crash). A missing tool is a failing check that names the tool and
how to skip it; only the CUDA smoke test, which has no standard tool, is skipped when none is found.
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import dcgm as dcgm_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import gpuburn as burn_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import nccl as nccl_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import nvlink as nvlink_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import (
    AllReducePerf,
    Dcgmi,
    GpuBurn,
    NvidiaSmi,
    Tool,
    ToolError,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.baseline import busbw_floor
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.common import FAIL, PASS, SKIP, WARN, check_result


class DeviceQuery(Tool):
    """cuda-samples deviceQuery: the default CUDA smoke test when the node has it."""

    binary = "deviceQuery"
    label = "CUDA smoke test (deviceQuery)"


class SmokeCommand(Tool):
    """The user's CUDA smoke test (``cuda_smoke_command``); its path is the command's first word."""

    binary = ""
    label = "CUDA smoke test"


class ValidationTools:
    """The tools gpu_validate may start, resolved once; ``paths`` maps option names to explicit paths."""

    def __init__(self, module, paths=None, counter=None):
        self.module = module
        self.paths = paths or {}
        self.counter = counter
        self._cache = {}

    def tool(self, cls, option=None):
        key = (cls, option)
        if key not in self._cache:
            self._cache[key] = cls(self.module, path=self.paths.get(option) if option else None, counter=self.counter)
        return self._cache[key]

    def smoke(self, argv):
        """A Tool for ``argv[0]`` (a name on $PATH or a path)."""
        first = argv[0]
        path = first if "/" in first else None
        tool = SmokeCommand(self.module, path=path, counter=self.counter) if path else None
        if tool is None:
            found = self.module.get_bin_path(first)
            tool = SmokeCommand(self.module, path=found or None, counter=self.counter)
            tool.binary = first
        return tool


# coreutils timeout: 124 when it stopped the tool at the limit, 137 when the tool needed SIGKILL.
RC_TIMED_OUT = (124, 137)


def _tool_failure(name, exc, expected, skip_hint, timeout_option="timeout"):
    """A failing check from a ToolError (timeout, missing tool, unexpected exit status).

    ``timeout_option`` is the option that sets this check's limit: ``command_timeout`` for the reads, ``timeout`` for the loads.
    """
    message = exc.msg
    if exc.rc is None and "was not found" in message:
        message += f"; install it, set its path option, or add {name} to skip_checks"
    elif exc.rc in RC_TIMED_OUT:
        message += f": raise the {timeout_option} option or look for a hung GPU (dmesg, nvidia-smi)"
    if skip_hint:
        message += f" ({skip_hint})"
    observed = {"rc": exc.rc}
    if exc.rc is not None:
        observed["output"] = (exc.stderr or exc.stdout or "").strip()[-300:]
    if exc.cmd:
        observed["cmd"] = list(exc.cmd)
    return check_result(name, FAIL, observed, expected, message)


# --------------------------------------------------------------------------- NVLink

def check_nvlink(ctx):
    name = "nvlink"
    expected = {"inactive_links": 0}
    smi = ctx.tools.tool(NvidiaSmi, "nvidia_smi_path")
    try:
        # A read: bounded by command_timeout (the long checks' timeout is for loads).
        rc, out, err = smi.run(["nvlink", "-s"], ok_rcs=None, timeout=ctx.options.get("command_timeout"))
    except ToolError as exc:
        return _tool_failure(name, exc, expected, None, timeout_option="command_timeout")
    try:
        gpus = nvlink_parser.parse_status(out)
    except ParseError as exc:
        if rc != 0:
            gpus = []
        else:
            return check_result(
                name, FAIL, {"rc": rc, "output": (out or err).strip()[-300:], "cmd": [smi.path, "nvlink", "-s"]}, expected,
                f"{exc}: check that nvidia-smi belongs to the loaded driver (nvidia-smi -q), or add nvlink to skip_checks",
            )
    if rc != 0 and not gpus:
        return check_result(
            name, FAIL, {"rc": rc, "output": (err or out).strip()[-300:], "cmd": [smi.path, "nvlink", "-s"]}, expected,
            f"nvidia-smi nvlink -s failed with exit status {rc}: {(err or out).strip()[:200] or 'no output'}; check nvidia-smi and dmesg",
        )
    # A GPU in MIG mode says NVLink queries are not supported: not measurable, so not counted.
    unsupported = {gpu["index"]: gpu["unsupported"] for gpu in gpus if gpu["unsupported"] and not gpu["links"]}
    measured = [gpu for gpu in gpus if gpu["index"] not in unsupported]
    links = [link for gpu in measured for link in gpu["links"]]
    nvswitch = bool(((ctx.facts or {}).get("nvswitch") or {}).get("present"))
    if not links:
        if nvswitch and (measured or not gpus):
            # NVSwitch nodes wire every GPU to the switches: no link at all means the fabric is down, not absent.
            return check_result(
                name, FAIL, {"links": 0, "gpus": len(measured), "nvswitch": True}, {"links_per_gpu": "at least 1 on every GPU"},
                f"the node has NVSwitch but nvidia-smi shows no NVLink link on {len(measured)} GPU(s): check the fabric manager, "
                "the NVSwitch state (SXid in dmesg) and reset the GPUs",
            )
        notes = [note for gpu in measured for note in gpu.get("notes") or []]
        reason = next(iter(unsupported.values())) if unsupported else (notes[0] if notes else "these GPUs have no NVLink")
        return check_result(name, SKIP, {"links": 0}, None, f"not checked: {reason}")
    down = {gpu["index"]: [link["link"] for link in gpu["links"] if not link["up"]] for gpu in gpus}
    down = {index: numbers for index, numbers in down.items() if numbers}
    # Every GPU counts: once one GPU has links, a GPU that prints none has 0 links up.
    per_gpu = {gpu["index"]: sum(1 for link in gpu["links"] if link["up"]) for gpu in measured}
    observed = {"active_links": per_gpu, "inactive": down}
    if unsupported:
        observed["unsupported"] = sorted(unsupported)
    if down:
        return check_result(
            name, FAIL, observed, expected,
            "inactive NVLink links on GPU {}: reset the GPU; check the fabric manager and NVSwitch (SXid) state".format(
                "; ".join("{} (link {})".format(i, ", ".join(str(n) for n in numbers)) for i, numbers in down.items())
            ),
        )
    counts = sorted(set(per_gpu.values()))
    if len(counts) > 1:
        # The count most GPUs share (the higher on a tie) is what every GPU should have.
        common = max(counts, key=lambda n: (list(per_gpu.values()).count(n), n))
        odd = {index: count for index, count in per_gpu.items() if count != common}
        return check_result(
            name, FAIL, observed, dict(expected, active_links_per_gpu=common),
            "GPUs report different numbers of NVLink links up (expected {} on each): {}; reset the GPU or check its NVLink "
            "(a GPU with no link line has lost its links)".format(
                common, ", ".join(f"GPU {index} has {count}" for index, count in odd.items())
            ),
        )
    return check_result(name, PASS, observed, expected, f"{counts[0]} NVLink links up on each of {len(per_gpu)} GPUs")


# --------------------------------------------------------------------------- CUDA smoke test


def check_cuda_smoke(ctx):
    name = "cuda_smoke"
    argv = ctx.options.get("cuda_smoke_command")
    if argv:
        tool, args = ctx.tools.smoke(argv), list(argv[1:])
    else:
        tool, args = ctx.tools.tool(DeviceQuery), []
        if not tool.available:
            return check_result(
                name, SKIP, None, None,
                "no CUDA smoke test: cuda_smoke_command is not set and deviceQuery (cuda-samples) is not on the node; "
                "set cuda_smoke_command to a program that runs a CUDA kernel and exits 0",
            )
    expected = {"rc": 0}
    try:
        rc, out, err = tool.run(args, ok_rcs=None, timeout=ctx.options.get("timeout"))
    except ToolError as exc:
        return _tool_failure(name, exc, expected, None)
    tail = (out or err or "").strip()[-300:]
    if rc != 0 or "Result = FAIL" in out:
        return check_result(name, FAIL, {"rc": rc, "output": tail}, expected, f"the CUDA smoke test failed (exit status {rc}): {tail[-200:]}")
    return check_result(name, PASS, {"rc": rc}, expected, "the CUDA smoke test ran")


# --------------------------------------------------------------------------- DCGM


def check_dcgm_diag(ctx):
    name = "dcgm_diag"
    level = int(ctx.options.get("dcgm_level") or 2)
    expected = {"result": "pass", "level": level}
    dcgmi = ctx.tools.tool(Dcgmi, "dcgmi_path")
    try:
        rc, out, err = dcgmi.run(["diag", "-r", str(level), "-j"], ok_rcs=None, timeout=ctx.options.get("timeout"))
    except ToolError as exc:
        return _tool_failure(name, exc, expected, None)
    try:
        diag = dcgm_parser.parse_diag(out)
    except ParseError as exc:
        text = (err or out).strip()
        return check_result(
            name, FAIL, {"rc": rc, "output": text[-300:]}, expected,
            f"dcgmi diag -r {level} ended with exit status {rc} and no readable result ({exc}): {text[:200]}",
        )
    failed = [
        {"test": t["name"], "result": t["result"], "gpus": sorted(i for i, r in t["gpus"].items() if r in ("fail", "warn")), "messages": t["warnings"][:3]}
        for t in diag["tests"]
        if t["result"] in ("fail", "warn")
    ]
    observed = {"result": diag["result"], "level": level, "tests": len(diag["tests"]), "problems": failed}
    if diag["errors"]:
        observed["errors"] = diag["errors"]
    if diag["result"] == "fail" or (rc != 0 and diag["result"] == "pass"):
        parts = ["{} on GPU {}{}".format(f["test"], ",".join(str(g) for g in f["gpus"]) or "?", ": " + f["messages"][0] if f["messages"] else "")
                 for f in failed if f["result"] == "fail"]
        parts += diag["errors"]
        return check_result(name, FAIL, observed, expected, "dcgmi diag -r {} failed: {}".format(level, "; ".join(parts) or f"exit status {rc}"))
    if diag["result"] == "warn":
        return check_result(name, WARN, observed, expected, "dcgmi diag -r {} warned: {}".format(level, "; ".join(f["test"] for f in failed)))
    if diag["result"] == "skip":
        return check_result(name, WARN, observed, expected, f"dcgmi diag -r {level} skipped every test")
    return check_result(name, PASS, observed, expected, "dcgmi diag -r {} passed {} tests".format(level, len(diag["tests"])))


# --------------------------------------------------------------------------- NCCL


def nccl_argv(options, gpu_count):
    """all_reduce_perf arguments: ``nccl_args`` when set, else 1 GiB to 8 GiB over every GPU of the node."""
    if options.get("nccl_args"):
        return [str(a) for a in options["nccl_args"]]
    return ["-b", "1G", "-e", "8G", "-f", "2", "-g", str(max(int(gpu_count or 1), 1))]


def check_nccl(ctx):
    name = "nccl_busbw"
    minimum = ctx.options.get("nccl_min_busbw_gbps")
    floor = busbw_floor(ctx.baseline, ctx.options.get("baseline_busbw_tolerance_pct", 10))
    expected = {"min_busbw_gbps": minimum}
    if floor is not None:
        expected["baseline_floor_gbps"] = floor
    gpu_count = ctx.options.get("expected_gpu_count") or (ctx.facts or {}).get("gpu_count")
    args = nccl_argv(ctx.options, gpu_count)
    tool = ctx.tools.tool(AllReducePerf, "all_reduce_perf_path")
    try:
        rc, out, err = tool.run(args, ok_rcs=None, timeout=ctx.options.get("timeout"))
    except ToolError as exc:
        return _tool_failure(name, exc, expected, None)
    try:
        run = nccl_parser.parse_tests(out)
    except ParseError as exc:
        text = (err or out).strip()
        return check_result(name, FAIL, {"rc": rc, "output": text[-300:]}, expected, f"all_reduce_perf printed no result (exit status {rc}, {exc})")
    busbw = run["avg_busbw_gbps"]
    peak = max((half["busbw_gbps"] for row in run["rows"] for half in (row["oop"], row["ip"])), default=None)
    ctx.measurements["busbw_gbps"] = busbw
    ctx.measurements["busbw_peak_gbps"] = peak
    observed = {"busbw_gbps": busbw, "peak_busbw_gbps": peak, "wrong": run["wrong"]}
    if run["error"] or rc != 0:
        reason = run["error"] or (err or "").strip()[:200]
        return check_result(name, FAIL, dict(observed, rc=rc), expected, f"all_reduce_perf failed (exit status {rc}): {reason}")
    if run["wrong"]:
        return check_result(name, FAIL, observed, dict(expected, wrong=0), "all_reduce_perf found {} wrong elements: data corruption".format(run["wrong"]))
    if busbw is None:
        return check_result(name, FAIL, observed, expected, "all_reduce_perf printed no '# Avg bus bandwidth' line")
    problems = []
    if minimum is not None and busbw < minimum:
        problems.append(f"bus bandwidth {busbw:g} GB/s is below the minimum {minimum:g} GB/s")
    if floor is not None and busbw < floor:
        problems.append(
            "bus bandwidth {:g} GB/s fell more than {:g}% below the baseline {:g} GB/s".format(
                busbw, ctx.options.get("baseline_busbw_tolerance_pct", 10), ctx.baseline["busbw_gbps"]
            )
        )
    if problems:
        return check_result(name, FAIL, observed, expected, "; ".join(problems) + ": check NVLink, NVSwitch/fabric manager and GPU clocks")
    if minimum is None and floor is None:
        return check_result(name, WARN, observed, expected, f"bus bandwidth {busbw:g} GB/s not judged: set nccl_min_busbw_gbps or give a baseline")
    return check_result(name, PASS, observed, expected, f"bus bandwidth {busbw:g} GB/s")


# --------------------------------------------------------------------------- gpu-burn


def _expected_gpu_count(ctx):
    """``expected_gpu_count``, else the GPUs nvidia-smi sees (None when unknown)."""
    count = ctx.options.get("expected_gpu_count") or (ctx.facts or {}).get("gpu_count")
    return int(count) if count else None


def check_gpu_burn(ctx):
    name = "gpu_burn"
    seconds = int(ctx.options.get("burn_seconds") or 60)
    expected = {"result": "pass", "faulty_gpus": []}
    tool = ctx.tools.tool(GpuBurn, "gpu_burn_path")
    args = [*[str(a) for a in ctx.options.get("burn_args") or []], str(seconds)]
    timeout = ctx.options.get("timeout")
    if timeout:
        # gpu-burn runs for burn_seconds and then needs time to stop its workers.
        timeout = max(int(timeout), seconds + 60)
    try:
        rc, out, err = tool.run(args, ok_rcs=None, timeout=timeout)
    except ToolError as exc:
        return _tool_failure(name, exc, expected, None)
    try:
        burn = burn_parser.parse(out)
    except ParseError as exc:
        text = (err or out).strip()
        return check_result(name, FAIL, {"rc": rc, "output": text[-300:]}, expected, f"gpu_burn printed no result (exit status {rc}, {exc}): {text[:200]}")
    gflops = [gpu["gflops"] for gpu in burn["gpus"]]
    ctx.measurements["gflops"] = gflops
    known = [g for g in gflops if g is not None]
    ctx.measurements["gflops_min"] = min(known) if known else None
    faulty = [gpu["index"] for gpu in burn["gpus"] if gpu["ok"] is False or gpu.get("died") or gpu.get("errors")]
    observed = {"result": burn["result"], "faulty_gpus": faulty, "gflops": gflops, "errors": [gpu["errors"] for gpu in burn["gpus"]],
                "tested_gpus": len(burn["gpus"])}
    if burn["result"] == "fail" or faulty:
        return check_result(name, FAIL, observed, expected, "gpu-burn found computation errors on GPU {}: drain the node and test the GPU alone".format(
            ", ".join(str(i) for i in faulty)))
    if burn["result"] != "pass":
        return check_result(name, FAIL, observed, expected, f"gpu-burn did not finish (exit status {rc}): a worker died or the run was cut short")
    gpu_count = _expected_gpu_count(ctx)
    burn_args = [str(a) for a in ctx.options.get("burn_args") or []]
    if gpu_count and "-i" not in burn_args and len(burn["gpus"]) < gpu_count:
        # gpu-burn tests the GPUs CUDA sees: a GPU missing here is one CUDA cannot use.
        return check_result(
            name, FAIL, observed, dict(expected, tested_gpus=gpu_count),
            "gpu-burn tested {} of {} GPUs: CUDA does not see every GPU (check CUDA_VISIBLE_DEVICES, nvidia-smi -q and dmesg for Xid)".format(
                len(burn["gpus"]), gpu_count),
        )
    return check_result(name, PASS, observed, expected, f"gpu-burn {seconds} s: every GPU OK, slowest {min(known) if known else 0:g} Gflop/s")


__all__ = [
    "ValidationTools",
    "check_cuda_smoke",
    "check_dcgm_diag",
    "check_gpu_burn",
    "check_nccl",
    "check_nvlink",
    "nccl_argv",
]
