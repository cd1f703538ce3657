# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_validate: the check registry, the levels, and the run that ties facts, tools and checks (private).

Levels (each includes the one before):

* ``quick``: what the node's facts and read-only queries tell, no load, seconds:
  gpu_count, driver_version, fabricmanager, xid, ecc, temperature, clocks_event_reasons,
  pcie_link, nvlink, and the stack's ib_ports, peermem, dcgm (each skipped unless the BOM names what it checks);
* ``standard``: + cuda_smoke and ``dcgmi diag -r 2`` (``dcgm_level``, 1 or 2), minutes;
* ``full``: + ``dcgmi diag -r 3``, nccl-tests ``all_reduce_perf`` and gpu-burn, tens of minutes.
"""

from __future__ import annotations

import math
import platform
import time

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts.gather import GpuFactsCollector
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._host import Host
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import CommandCounter
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import baseline as baseline_lib
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import checks as facts_checks
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import guard
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import load as load_checks
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import stack as stack_checks
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.common import FAIL, SKIP, check_result, overall_status, summarize
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.options import check_options
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._xid_catalog import DEFAULT_CRITICAL_XIDS

# name -> (check function, level that first includes it); the order is the order checks run in.
CHECKS = {
    "gpu_count": (facts_checks.check_gpu_count, "quick"),
    "driver_version": (facts_checks.check_driver_version, "quick"),
    "fabricmanager": (facts_checks.check_fabricmanager, "quick"),
    "xid": (facts_checks.check_xid, "quick"),
    "ecc": (facts_checks.check_ecc, "quick"),
    "temperature": (facts_checks.check_temperature, "quick"),
    "clocks_event_reasons": (facts_checks.check_clocks, "quick"),
    "pcie_link": (facts_checks.check_pcie, "quick"),
    "nvlink": (load_checks.check_nvlink, "quick"),
    # The stack around the driver (issue 24): read-only, each a skip unless the BOM (expected_stack) names what it checks.
    "ib_ports": (stack_checks.check_ib_ports, "quick"),
    "peermem": (stack_checks.check_peermem, "quick"),
    "dcgm": (stack_checks.check_dcgm, "quick"),
    "cuda_smoke": (load_checks.check_cuda_smoke, "standard"),
    "dcgm_diag": (load_checks.check_dcgm_diag, "standard"),
    "nccl_busbw": (load_checks.check_nccl, "full"),
    "gpu_burn": (load_checks.check_gpu_burn, "full"),
}
LEVELS = ("quick", "standard", "full")
# Checks that load the GPUs: in check mode they are skipped, so that --check on a live node runs no job on it.
LOAD_CHECKS = ("cuda_smoke", "dcgm_diag", "nccl_busbw", "gpu_burn")
CHECK_MODE_MESSAGE = "not run in check mode (it loads the GPUs)"
CHECK_NAMES = tuple(CHECKS)
# dcgmi diag -r N used at each level unless dcgm_level says otherwise.
DEFAULT_DCGM_LEVEL = {"quick": 2, "standard": 2, "full": 3}
# Facts the checks read (NICs are not needed).
FACT_SUBSETS = ("driver", "gpus", "fabricmanager", "xid")


def checks_for_level(level):
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; choose one of {', '.join(LEVELS)}")
    upto = LEVELS.index(level)
    return [name for name, (_fn, first) in CHECKS.items() if LEVELS.index(first) <= upto]


def select_checks(level="quick", checks=None, skip_checks=None):
    """The check names to run, in run order: ``checks`` when given (overrides the level), minus ``skip_checks``."""
    unknown = sorted((set(checks or []) | set(skip_checks or [])) - set(CHECKS))
    if unknown:
        raise ValueError("unknown check {}; known checks: {}".format(", ".join(unknown), ", ".join(CHECK_NAMES)))
    wanted = set(checks) if checks else set(checks_for_level(level))
    wanted -= set(skip_checks or [])
    return [name for name in CHECK_NAMES if name in wanted]


class Context:
    """What the checks read and where they leave their measurements."""

    def __init__(self, options, facts=None, facts_error=None, baseline=None, tools=None, boot_time=None, host=None):
        self.options = options
        self.host = host or Host()
        self.facts = facts
        self.facts_error = facts_error
        self.baseline = baseline
        self.snapshot = baseline_lib.snapshot(facts) if facts is not None else {}
        self.tools = tools
        self.boot_time = boot_time
        self.measurements = {}


def boot_time(host):
    """Seconds since the epoch at which the node booted (for ``[ 123.4]`` kernel log times), or None."""
    text = host.read("proc/uptime")
    try:
        uptime = float(text.split()[0])
    except (AttributeError, IndexError, ValueError):
        return None
    return time.time() - uptime if math.isfinite(uptime) else None  # "nan" would date every Xid line NaN


def _detail(exc, key):
    """``cmd`` or ``rc`` of a typed error: an attribute (ToolError) or one of GpufleetError's details."""
    value = getattr(exc, key, None)
    return value if value is not None else (getattr(exc, "details", None) or {}).get(key)


def _error_text(exc):
    """A typed error's message, with the command it ran when it has one."""
    text = getattr(exc, "msg", None) or str(exc)
    cmd = _detail(exc, "cmd")
    if cmd and " ".join(str(word) for word in cmd) not in text:
        text += " (command: {})".format(" ".join(str(word) for word in cmd))
    return text


def _unfinished(name, exc):
    """The failed verdict of a check that raised a typed error: what, which command, what to do."""
    observed = {"error": type(exc).__name__}
    for key in ("cmd", "rc"):
        if _detail(exc, key) is not None:
            observed[key] = _detail(exc, key)
    return check_result(
        name, FAIL, observed, None,
        f"the {name} check could not finish: {_error_text(exc)}. Check the tool by hand on the node, or add {name} to skip_checks",
    )


def _facts_measurements(facts):
    gpus = (facts or {}).get("gpus") or []
    return {
        "temperature_c": [gpu.get("temperature_c") for gpu in gpus],
        "clocks_event_reasons": [gpu.get("clocks_event_reasons_active") or [] for gpu in gpus],
    }


class Validator:
    """Runs the selected checks on one node. ``options`` holds the module options (see gpu_validate)."""

    def __init__(self, module, options, host=None):
        """Checks every option (OptionError, BaselineError, ValueError) before any command runs."""
        self.module = module
        self.options = check_options(options)
        self.host = host or Host()
        level = self.options.get("level") or "quick"
        self.options["level"] = level
        self.names = select_checks(level, self.options.get("checks"), self.options.get("skip_checks"))
        if self.options.get("dcgm_level") is None:
            self.options["dcgm_level"] = DEFAULT_DCGM_LEVEL[level]
        facts_checks.parse_since(self.options.get("xid_since"))  # ValueError now rather than mid-run
        if self.options.get("max_temperature_c") is None:
            self.options["max_temperature_c"] = 85
        self.baseline = baseline_lib.normalize(self.options.get("baseline"))
        self.counter = CommandCounter()
        self.paths = {key: value for key, value in self.options.items() if key.endswith("_path") and value}
        # Whether the node is drained: Slurm's record when given (read now: a bad one fails before any command), else the caller's word.
        self.node, self.drained, self.slurm_state = platform.node() or "this node", self.options.get("drained"), None
        if self.options.get("slurm_node_record") is not None:
            self.node, self.drained, self.slurm_state = guard.slurm_drain(self.options["slurm_node_record"])

    def _guard(self, facts, check_mode):
        """NodeInUseError before any check when the selected checks load the GPUs of a busy or undrained node."""
        load = [] if check_mode else [name for name in self.names if name in LOAD_CHECKS]
        processes = None if facts is None else facts.get("gpu_processes")
        refusal = guard.load_refusal(self.node, load, processes, self.drained, self.slurm_state)
        if refusal:
            raise guard.NodeInUseError(refusal, node=self.node, load_checks=load, drained=self.drained)

    def _facts(self):
        critical = self.options.get("critical_xids") or DEFAULT_CRITICAL_XIDS
        collector = GpuFactsCollector(
            self.module, host=self.host, gather_subset=FACT_SUBSETS, paths=self.paths, critical_xids=critical,
            command_timeout=self.options["command_timeout"],
        )
        collector.counter = self.counter
        try:
            return collector.collect(), None
        except (GpufleetError, ParseError) as exc:
            # The facts checks turn this into failed verdicts that carry the message (tool, limit, what to do).
            return None, _error_text(exc)

    def run(self):
        facts, error = self._facts()
        check_mode = bool(getattr(self.module, "check_mode", False))
        self._guard(facts, check_mode)
        tools = load_checks.ValidationTools(self.module, self.paths, self.counter)
        ctx = Context(self.options, facts, error, self.baseline, tools, boot_time(self.host), host=self.host)
        results = []
        for name in self.names:
            if check_mode and name in LOAD_CHECKS:
                results.append(check_result(name, SKIP, None, None, CHECK_MODE_MESSAGE))
                continue
            check = CHECKS[name][0]
            try:
                results.append(check(ctx))
            except (GpufleetError, ParseError) as exc:
                # A check that cannot finish is a failed check with the reason, not a crashed validation.
                # Any other exception is a bug in the check: it is not swallowed.
                results.append(_unfinished(name, exc))
        measurements = _facts_measurements(facts)
        measurements.update({"busbw_gbps": None, "busbw_peak_gbps": None, "gflops": None, "gflops_min": None})
        measurements.update(ctx.measurements)
        return {
            "status": overall_status(results),
            "summary": summarize(results),
            "checks": results,
            "failed_checks": [r["name"] for r in results if r["status"] == FAIL],
            "level": self.options["level"],
            "measurements": measurements,
            "snapshot": baseline_lib.snapshot(facts, measurements),
            "commands_run": len(self.counter),
        }


__all__ = ["CHECKS", "CHECK_MODE_MESSAGE", "CHECK_NAMES", "LEVELS", "LOAD_CHECKS", "Context", "Validator", "checks_for_level", "select_checks"]
