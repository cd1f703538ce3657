# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_validate baselines: what a run keeps for the next one, and what may not grow (private).

A baseline is the node's state before a change. gpu_validate accepts it in any of the forms a
playbook has at hand and reduces it to a *snapshot*:

* the result of an earlier gpu_validate (its ``snapshot`` and ``measurements``);
* a registered gpu_facts result (``{"ansible_facts": {"gpufleet": {...}}}``), ``ansible_facts``
  itself, or the ``gpufleet`` facts dict;
* a snapshot.

After the change, double-bit ECC counters (aggregate, which survive a reboot), uncorrectable
remapped rows and retired double-bit pages must not grow, Xid counts must not grow (they restart
at zero on a reboot, so they are compared only within one boot), and the NCCL bus bandwidth may
not fall by more than a tolerance.
"""

from __future__ import annotations

import math

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

SNAPSHOT_VERSION = 1

# (snapshot key, what a report calls it); all must stay equal or fall.
ECC_COUNTERS = (
    ("aggregate_dbe", "aggregate double-bit ECC errors"),
    ("remapped_uncorrectable", "rows remapped for uncorrectable errors"),
    ("retired_double_bit", "pages retired for double-bit errors"),
)


class BaselineError(GpufleetError, ValueError):
    """The baseline given is none of the accepted forms."""


def _int_or_none(value):
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _gpu_snapshot(gpu):
    ecc = gpu.get("ecc") or {}
    rows = gpu.get("remapped_rows") or {}
    pages = gpu.get("retired_pages") or {}
    return {
        "index": gpu.get("index"),
        "uuid": gpu.get("uuid"),
        "pci_bus_id": gpu.get("pci_bus_id"),
        "volatile_dbe": _int_or_none(ecc.get("volatile_dbe")),
        "aggregate_dbe": _int_or_none(ecc.get("aggregate_dbe")),
        "remapped_uncorrectable": _int_or_none(rows.get("uncorrectable")),
        "retired_double_bit": _int_or_none(pages.get("double_bit")),
    }


def xid_counts(facts):
    """``{code (int): count}`` of the facts' Xid events (JSON turns int keys into strings: undone here)."""
    counts = ((facts or {}).get("xid") or {}).get("counts") or {}
    return {int(code): int(count) for code, count in counts.items()}


def snapshot(facts, measurements=None):
    """The small record of a node's state that a later gpu_validate compares with."""
    facts = facts or {}
    measurements = measurements or {}
    return {
        "snapshot_version": SNAPSHOT_VERSION,
        "boot_id": facts.get("boot_id"),
        "driver_version": (facts.get("driver") or {}).get("version"),
        "gpus": [_gpu_snapshot(gpu) for gpu in facts.get("gpus") or []],
        "xid_counts": xid_counts(facts),
        "busbw_gbps": measurements.get("busbw_gbps"),
    }


def _snapshot_xid_counts(counts):
    """A snapshot's ``xid_counts`` with int keys and counts (JSON made the keys strings), else BaselineError."""
    try:
        return {int(code): int(count) for code, count in (counts or {}).items()}
    except (AttributeError, TypeError, ValueError, OverflowError):
        raise BaselineError("baseline xid_counts must map Xid codes to counts (integers): give the snapshot of a gpu_validate run") from None


def _looks_like_facts(value):
    return isinstance(value, dict) and ("gpus" in value or "driver" in value) and "snapshot_version" not in value


def _checked_busbw(found):
    """``found`` with a ``busbw_gbps`` that is None or a finite number, else BaselineError naming the field."""
    busbw = found.get("busbw_gbps")
    if busbw is None:
        return found
    if isinstance(busbw, bool) or not isinstance(busbw, (int, float)) or not math.isfinite(busbw) or busbw < 0:
        shown = repr(busbw) if isinstance(busbw, (int, float)) else f"a {type(busbw).__name__}"
        # A NaN floor compares false with every measurement: the bandwidth check would pass whatever NCCL measured.
        raise BaselineError(f"baseline busbw_gbps is {shown}, not a finite bandwidth in GB/s: give the result of a gpu_validate run that measured it")
    return found


def normalize(baseline):
    """A snapshot from any accepted baseline form; None when no baseline was given."""
    found = _normalize(baseline)
    return None if found is None else _checked_busbw(found)


def _normalize(baseline):
    if baseline is None or baseline == {}:
        return None
    if not isinstance(baseline, dict):
        raise BaselineError(f"baseline must be a dict, not {type(baseline).__name__}")
    if "snapshot_version" in baseline:
        found = dict(baseline)
        found["xid_counts"] = _snapshot_xid_counts(found.get("xid_counts"))
        return found
    if isinstance(baseline.get("snapshot"), dict):
        if not baseline["snapshot"]:
            # A gpu_validate result whose snapshot is empty is a damaged baseline, not "no baseline": nothing would be compared.
            raise BaselineError("baseline.snapshot is empty: give the whole result of a gpu_validate run (its snapshot holds the node's state)")
        found = _normalize(baseline["snapshot"])
        measurements = baseline.get("measurements") or {}
        if not isinstance(measurements, dict):
            raise BaselineError(f"baseline.measurements is a {type(measurements).__name__}, not a dict: give the result of a gpu_validate run")
        busbw = measurements.get("busbw_gbps")
        if busbw is not None:
            found["busbw_gbps"] = busbw
        return found
    facts = baseline
    if isinstance(facts.get("ansible_facts"), dict):
        facts = facts["ansible_facts"]
    if isinstance(facts.get("gpufleet"), dict):
        facts = facts["gpufleet"]
    if _looks_like_facts(facts):
        return snapshot(facts)
    raise BaselineError(
        "baseline is neither a gpu_validate result (with snapshot), nor gpu_facts facts (ansible_facts.gpufleet), "
        "nor a snapshot; keys seen: {}".format(", ".join(sorted(str(k) for k in baseline)) or "none")
    )


def _match(gpu, candidates):
    """The baseline entry of the same GPU: by UUID, else PCI bus id, else index.

    The first key that both sides know decides: a GPU whose UUID is not in the baseline is a new
    GPU (a replaced board, or another enumeration order), not the baseline's GPU at its index.
    """
    for key in ("uuid", "pci_bus_id", "index"):
        value = gpu.get(key)
        if value is None or not any(candidate.get(key) is not None for candidate in candidates):
            continue
        for candidate in candidates:
            if candidate.get(key) == value:
                return candidate
        return None
    return None


def ecc_growth(now, base):
    """Counters that grew since the baseline: ``[{"gpu", "uuid", "counter", "before", "after"}]``."""
    grown = []
    for gpu in now.get("gpus") or []:
        before = _match(gpu, base.get("gpus") or [])
        if before is None:
            continue
        for key, _label in ECC_COUNTERS:
            if gpu.get(key) is not None and before.get(key) is not None and gpu[key] > before[key]:
                grown.append({"gpu": gpu.get("index"), "uuid": gpu.get("uuid"), "counter": key, "before": before[key], "after": gpu[key]})
    return grown


def same_boot(now, base):
    return bool(now.get("boot_id")) and now.get("boot_id") == base.get("boot_id")


def xid_growth(now_counts, base):
    """``{code: {"before", "after"}}`` for Xid codes seen more often now than in the baseline (same boot)."""
    before_counts = base.get("xid_counts") or {}
    return {
        code: {"before": before_counts.get(code, 0), "after": count}
        for code, count in sorted(now_counts.items())
        if count > before_counts.get(code, 0)
    }


def busbw_floor(base, tolerance_pct):
    """Lowest acceptable bus bandwidth after the change, or None without a baseline figure."""
    before = base.get("busbw_gbps") if base else None
    if before is None:
        return None
    return round(float(before) * (1.0 - float(tolerance_pct) / 100.0), 3)


__all__ = [
    "ECC_COUNTERS",
    "SNAPSHOT_VERSION",
    "BaselineError",
    "busbw_floor",
    "ecc_growth",
    "normalize",
    "same_boot",
    "snapshot",
    "xid_counts",
    "xid_growth",
]
