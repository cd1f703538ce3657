# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_validate's option checks: every value in range before the first command (private).

The argument spec checks types and choices; this checks what a type cannot say: a negative
``burn_seconds``, a ``0`` timeout (no limit at all for coreutils ``timeout``), a threshold no GPU
can meet, a version that is cut off. Each refusal names the option, the value and the range.
"""

from __future__ import annotations

import math

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _bom_stack, _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts.gather import DEFAULT_COMMAND_TIMEOUT, MAX_XID, OptionError, check_command_timeout
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import MAX_TIMEOUT

# option -> (lowest, highest, unit, what the range protects). Integers unless listed in FLOAT_OPTIONS.
RANGES = {
    "expected_gpu_count": (1, 64, "GPUs", "a node holds 1 to 64 GPUs; leave it unset to compare with the PCI bus"),
    "max_temperature_c": (1, 125, "degrees Celsius", "GPUs slow down near 90 C and shut down near 100 C"),
    "burn_seconds": (1, 43200, "seconds", "gpu-burn runs this long; 12 hours at most"),
    "timeout": (1, MAX_TIMEOUT, "seconds", "the limit of each long check; 0 would mean no limit"),
    "nccl_min_busbw_gbps": (0.001, 10000.0, "GB/s", "no NVLink fabric reaches 10 TB/s"),
    "baseline_busbw_tolerance_pct": (0.0, 99.9, "percent", "100 would accept any drop"),
}
FLOAT_OPTIONS = ("nccl_min_busbw_gbps", "baseline_busbw_tolerance_pct")
VERSION_OPTIONS = ("expected_driver_version", "expected_fabricmanager_version")
ARGV_OPTIONS = ("nccl_args", "burn_args", "cuda_smoke_command")


def _number(name, value):
    low, high, unit, why = RANGES[name]
    if name in FLOAT_OPTIONS:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and low <= value <= high
    else:
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if not ok:
        kind = "a number" if name in FLOAT_OPTIONS else "a whole number"
        raise OptionError(f"{name} must be {kind} from {low:g} to {high:g} {unit}, got {value!r} ({why})")
    return value


def check_options(params):
    """A copy of the module options with every value checked; OptionError names the first bad one."""
    options = dict(params)
    for name in RANGES:
        if options.get(name) is not None:
            options[name] = _number(name, options[name])
    options["command_timeout"] = check_command_timeout(
        DEFAULT_COMMAND_TIMEOUT if options.get("command_timeout") is None else options["command_timeout"]
    )
    for code in options.get("critical_xids") or []:
        if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= MAX_XID:
            raise OptionError(f"critical_xids: {code!r} is not an Xid code (a whole number from 1 to {MAX_XID}); remove it or fix the typo")
    for name in VERSION_OPTIONS:
        value = options.get(name)
        if value is not None and not _version.is_driver_version(value):
            raise OptionError(
                f"{name} {value!r} is not a whole NVIDIA driver version (for example 550.90.07 or 572.61): "
                "a cut-off version would never match; copy it from nvidia-smi or the bill of materials"
            )
    try:
        # The BOM's stack section, every shorthand spelled out ({} when unset): the stack checks read rdma_ports, peermem, dcgm.
        options["expected_stack"] = _bom_stack.normalize(options.get("expected_stack"))
    except _bom_stack.StackBomError as exc:
        raise OptionError(f"expected_stack (the BOM's stack section): {exc}") from exc
    for name in ARGV_OPTIONS:
        for arg in options.get(name) or []:
            if arg == "" or "\x00" in arg:
                raise OptionError(f"{name}: {arg!r} is not an argument (empty, or holds a NUL byte); each list entry is one argument")
    return options


__all__ = ["FLOAT_OPTIONS", "RANGES", "OptionError", "check_options"]
