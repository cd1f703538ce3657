# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""CUDA / driver / GPU architecture / driver branch compatibility rules (private).

Pure functions over the tables in _compat_data.py. Versions compare numerically, component by
component (550.54.14 < 550.100.1). Anything the data does not know raises CompatError (a
ValueError) naming the value; no rule answers False for input it cannot judge.
"""

from __future__ import annotations

import datetime
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _compat_data as data
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

COMPAT_MODES = ("toolkit", "minor")
OPERATING_SYSTEMS = ("linux", "windows")

_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*$")


class CompatError(GpufleetError, ValueError):
    """Input the compatibility data cannot judge (bad version, unknown GPU, unknown option)."""


# --- parsing -----------------------------------------------------------------------------------


def _text(value, what):
    if isinstance(value, bool) or value is None:
        raise CompatError(f"{what} must be a version string, got {value!r}")
    if isinstance(value, (int, float)):
        # YAML turns an unquoted 12.4 into a float; str() gives it back unchanged.
        value = str(value)
    if not isinstance(value, str):
        raise CompatError(f"{what} must be a version string, got {type(value).__name__} {value!r}")
    return value.strip()


def parse_version(value, what="version"):
    """'550.54.14' -> (550, 54, 14); CompatError for anything else."""
    text = _text(value, what)
    if not _VERSION.match(text):
        raise CompatError(f"{what} {value!r} is not a dotted numeric version")
    return tuple(int(part) for part in text.split("."))


def _cuda_version(value):
    version = parse_version(value, "CUDA version")
    if len(version) not in (2, 3):
        raise CompatError(f"CUDA version {value!r} must be major.minor or major.minor.patch")
    return version


def _check_choice(value, choices, what):
    if value not in choices:
        raise CompatError(f"unknown {what} {value!r}: expected one of {', '.join(choices)}")
    return value


def _fmt(version):
    return ".".join(str(part) for part in version)


# --- Table 3: toolkit driver ------------------------------------------------------------------


_TOOLKIT_ROWS = []  # Table 3 parsed once per process: a preflight over 10,000 hosts asked for it per host and CUDA version


def _toolkit_rows():
    if not _TOOLKIT_ROWS:
        _TOOLKIT_ROWS.extend(
            {"label": label, "version": parse_version(version), "linux": linux, "windows": windows, "kind": kind}
            for label, version, linux, windows, kind in data.TOOLKIT_DRIVER_ROWS
        )
    return [dict(row) for row in _TOOLKIT_ROWS]  # copies: a caller that changes its row does not change the table


def toolkit_row(cuda):
    """The Table 3 row for a CUDA version: '12.4' is the GA, '12.4.1' Update 1."""
    version = _cuda_version(cuda)
    same_minor = [row for row in _toolkit_rows() if row["version"][:2] == version[:2]]
    if len(version) == 2:
        matches = [row for row in same_minor if row["kind"] in ("ga", "ga+")]
    else:
        matches = [row for row in same_minor if row["version"] == version]
        if not matches:
            matches = [row for row in same_minor if row["kind"] == "ga+"]
    if matches:
        return matches[0]
    if same_minor:
        known = ", ".join(_fmt(row["version"]) for row in same_minor)
        raise CompatError(f"CUDA {cuda!r} is not in Table 3 of the CUDA release notes (known {_fmt(version[:2])} releases: {known})")
    raise CompatError(f"CUDA {cuda!r} is not in Table 3 of the CUDA release notes (this data knows CUDA 7.0 to 13.2 Update 2)")


def _minor_compat_row(cuda, os):
    version = _cuda_version(cuda)
    for family, minimum, maximum in data.MINOR_VERSION_COMPAT_ROWS:
        if int(family.split(".", maxsplit=1)[0]) == version[0]:
            footnote = data.MINOR_VERSION_COMPAT_FOOTNOTE.get(version[0], {})
            return {"family": family, "min": footnote.get(os, minimum), "max": maximum}
    families = ", ".join(row[0] for row in data.MINOR_VERSION_COMPAT_ROWS)
    raise CompatError(f"CUDA {cuda!r} has no minor version compatibility (Table 2 covers {families})")


def cuda_min_driver(cuda, compat="toolkit", os="linux"):
    """Lowest driver that runs CUDA `cuda`: Table 3 (compat='toolkit') or Table 2 (compat='minor')."""
    _check_choice(compat, COMPAT_MODES, "compat")
    _check_choice(os, OPERATING_SYSTEMS, "os")
    if compat == "minor":
        return _minor_compat_row(cuda, os)["min"]
    row = toolkit_row(cuda)
    minimum = row[os]
    if minimum is None:
        raise CompatError(
            f"Table 3 lists no {os} toolkit driver for CUDA {cuda!r} ({row['label']}: N/A, the driver is no longer bundled); use compat='minor'"
        )
    return minimum


def driver_supports_cuda(driver, cuda, compat="toolkit", os="linux"):
    """True when `driver` is at least the minimum driver for `cuda` (drivers run older CUDA too)."""
    have = parse_version(driver, "driver version")
    return have >= parse_version(cuda_min_driver(cuda, compat, os))


def max_cuda_for_driver(driver, os="linux", compat="toolkit"):
    """Highest CUDA major.minor that `driver` runs: '570.26' -> '12.8'.

    compat='toolkit' reads Table 3 only; compat='minor' also counts the Table 2 families whose
    minimum the driver meets (any toolkit of such a family runs, with the limits of minor version
    compatibility).
    """
    _check_choice(compat, COMPAT_MODES, "compat")
    _check_choice(os, OPERATING_SYSTEMS, "os")
    have = parse_version(driver, "driver version")
    candidates = [row["version"][:2] for row in _toolkit_rows() if row[os] is not None and have >= parse_version(row[os])]
    if compat == "minor":
        for row in _toolkit_rows():
            try:
                minimum = _minor_compat_row(_fmt(row["version"]), os)["min"]
            except CompatError:  # before CUDA 11: no minor version compatibility
                continue
            if have >= parse_version(minimum):
                candidates.append(row["version"][:2])
    if not candidates:
        raise CompatError(f"driver {driver!r} is older than every {os} driver in Table 3 (CUDA 7.0 needs 346.46)")
    return _fmt(max(candidates))


# --- branches ---------------------------------------------------------------------------------


def _branch_number(driver):
    number = _version.branch_of_major(parse_version(driver, "driver version")[0])
    if number is not None:
        return number
    raise CompatError(f"driver {driver!r} belongs to no driver branch this data knows")


def driver_branch(driver):
    """'570.172.08' -> 'R570'; Windows numbering too ('572.61' -> 'R570')."""
    return f"R{_branch_number(driver)}"


def _parse_branch(branch):
    text = _text(branch, "driver branch")
    match = re.match(r"^[Rr]?([0-9]+)$", text)
    if not match:
        raise CompatError(f"driver branch {branch!r} is not of the form R570")
    number = int(match.group(1))
    for entry in data.BRANCH_LIFECYCLE:
        if entry[0] == number:
            return entry
    raise CompatError(f"driver branch {branch!r} is unknown to this data")


def _architecture_supported(architecture, number):
    first, last = data.ARCHITECTURE_DRIVER_BRANCHES[architecture]
    return (first is None or number >= first) and (last is None or number <= last)


def branch_info(branch):
    """{'branch', 'type', 'end_of_life', 'declared_end_of_life', 'supported_architectures'}."""
    number, kind, end_of_life, declared = _parse_branch(branch)
    return {
        "branch": f"R{number}",
        "type": kind,
        "end_of_life": end_of_life,
        "declared_end_of_life": declared,
        "supported_architectures": [arch for arch in data.ARCHITECTURE_DRIVER_BRANCHES if _architecture_supported(arch, number)],
    }


# --- GPUs -------------------------------------------------------------------------------------

_NAME_PATTERNS = tuple((re.compile(pattern), capability) for pattern, capability in data.GPU_NAME_PATTERNS)


def gpu_compute_capability(gpu_name):
    """'NVIDIA H100 80GB HBM3' -> '9.0' (names as nvidia-smi prints them)."""
    if not isinstance(gpu_name, str) or not gpu_name.strip():
        raise CompatError(f"GPU name must be a non-empty string, got {gpu_name!r}")
    if "..." in gpu_name:
        # nvidia-smi's table view cuts long names; a cut name can fit several products.
        raise CompatError(f"GPU name {gpu_name!r} is truncated: take names from nvidia-smi -L, -q or --query-gpu=name")
    name = " ".join(gpu_name.split()).lower()
    if name.startswith("nvidia "):
        name = name[len("nvidia ") :]
    for pattern, capability in _NAME_PATTERNS:
        if pattern.match(name):
            return capability
    raise CompatError(f"GPU {gpu_name!r} is unknown to the compatibility data")


def gpu_architecture(gpu_name):
    """'NVIDIA H100 80GB HBM3' -> 'Hopper'."""
    return data.COMPUTE_CAPABILITIES[gpu_compute_capability(gpu_name)][0]


def driver_supports_gpu(driver, gpu_name):
    """True when the driver's branch drives the GPU's architecture."""
    return _architecture_supported(gpu_architecture(gpu_name), _branch_number(driver))


def _capability(text):
    return tuple(int(part) for part in text.split("."))


def cuda_supports_gpu(cuda, gpu_name):
    """True when CUDA `cuda` builds code for the GPU (first toolkit for it, not dropped since)."""
    version = toolkit_row(cuda)["version"]
    capability = gpu_compute_capability(gpu_name)
    first_cuda = _capability(data.COMPUTE_CAPABILITIES[capability][1])
    lowest = data.CUDA_MAJOR_MIN_COMPUTE_CAPABILITY.get(version[0])
    if lowest is None:
        raise CompatError(f"CUDA {cuda!r}: this data has no architecture range for CUDA {version[0]}")
    return version[:2] >= first_cuda and _capability(capability) >= _capability(lowest)


# --- bill of materials ------------------------------------------------------------------------


def _bom_driver(bom):
    if not isinstance(bom, dict):
        raise CompatError(f"BOM must be a mapping, got {type(bom).__name__}")
    driver = bom.get("driver_version", bom.get("driver"))
    if isinstance(driver, dict):
        driver = driver.get("version")
    if driver is None:
        raise CompatError("BOM has no driver version (driver.version or driver_version)")
    return driver


def _as_date(today):
    if today is None:
        return datetime.date.today()
    if isinstance(today, datetime.datetime):
        return today.date()
    if isinstance(today, datetime.date):
        return today
    if isinstance(today, str):
        try:
            return datetime.datetime.strptime(today.strip(), "%Y-%m-%d").date()
        except ValueError:
            pass
    raise CompatError(f"today {today!r} is not a date (YYYY-MM-DD)")


def _past_month(today, month):
    """True when `today` is after the last day of month 'YYYY-MM'."""
    year, number = (int(part) for part in month.split("-"))
    return (today.year, today.month) > (year, number)


def _flatten(values, what):
    if values is None:
        return []
    if isinstance(values, (str, int, float)):
        values = [values]
    if not isinstance(values, (list, tuple)):
        raise CompatError(f"{what} must be a list, got {type(values).__name__}")
    flat = []
    for value in values:
        flat.extend(value if isinstance(value, (list, tuple)) else [value])
    return list(dict.fromkeys(flat))


def check_bom(bom, inventory_gpu_names, workload_cuda, today=None, compat="toolkit", os="linux"):
    """Violations of a bill of materials: [{'rule', 'message'}], empty when it is sound.

    Rules: driver-cuda (the driver cannot run a CUDA version the workloads need),
    driver-architecture (the driver branch drops or predates an architecture in the inventory),
    cuda-architecture (a needed CUDA version cannot build for a GPU in the inventory),
    branch-eol (the driver branch is past its end of life on `today`).
    """
    driver = _bom_driver(bom)
    compat = bom.get("cuda_compat", compat)
    os = bom.get("os", os)
    _check_choice(compat, COMPAT_MODES, "compat")
    _check_choice(os, OPERATING_SYSTEMS, "os")
    today = _as_date(today)
    gpu_names = _flatten(inventory_gpu_names, "GPU names")
    cuda_versions = _flatten(workload_cuda, "CUDA versions")
    branch = _branch_number(driver)
    violations = []

    def add(rule, message):
        violations.append({"rule": rule, "message": f"{rule}: {message}"})

    for cuda in cuda_versions:
        if not driver_supports_cuda(driver, cuda, compat, os):
            minimum = cuda_min_driver(cuda, compat, os)
            add("driver-cuda", f"driver {driver} cannot run CUDA {cuda}: it needs {minimum} or newer ({os}, compat={compat})")

    architectures = {}
    for name in gpu_names:
        architectures.setdefault(gpu_architecture(name), []).append(name)
    for architecture, names in architectures.items():
        if _architecture_supported(architecture, branch):
            continue
        first, last = data.ARCHITECTURE_DRIVER_BRANCHES[architecture]
        if last is not None and branch > last:
            reason = f"dropped {architecture} (last supported in R{last})"
        else:
            reason = f"predates {architecture} (needs R{first} or newer)"
        add("driver-architecture", f"driver {driver} (R{branch}) {reason}: {', '.join(names)}")

    for cuda in cuda_versions:
        for name in gpu_names:
            if not cuda_supports_gpu(cuda, name):
                capability = gpu_compute_capability(name)
                add("cuda-architecture", f"CUDA {cuda} does not build for compute capability {capability} ({gpu_architecture(name)}: {name})")

    info = branch_info(branch)
    if info["end_of_life"] is not None and _past_month(today, info["end_of_life"]):
        add("branch-eol", f"driver branch R{branch} reached end of life in {info['end_of_life']} (checked on {today.isoformat()})")
    elif info["end_of_life"] is None and info["declared_end_of_life"]:
        add("branch-eol", f"driver branch R{branch} is end of life (NVIDIA lists it so, without a date)")
    return violations
