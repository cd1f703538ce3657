# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_validate checks that judge the node's facts: no load, no extra process (private).

Each ``check_*(ctx)`` reads ``ctx.facts`` (the gpu_facts dict), ``ctx.options`` (the module
options) and ``ctx.baseline`` (a snapshot, or None) and returns one check result
(``_validate_common.check_result``). They never raise on odd facts: a value the node did not
report is a ``skip`` with the reason, never a silent pass.
"""

from __future__ import annotations

import calendar
import datetime
import re
import time

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import baseline as baseline_lib
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.common import FAIL, PASS, SKIP, WARN, check_result
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._xid_catalog import ACTIONS, DEFAULT_CRITICAL_XIDS, XID_CATALOG

# Clock event reasons that mean the GPU is slowed down by heat or power (nvsmi parser names).
DEFAULT_SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")
# Active under load on a healthy GPU that reaches its power limit: reported, not failed.
SOFT_REASONS = ("sw_power_cap",)
# Performance states in which a GPU lets its PCIe link train down to save power.
_IDLE_PSTATES = ("P8", "P10", "P11", "P12")


# --------------------------------------------------------------------------- helpers


def _gpus(ctx):
    return (ctx.facts or {}).get("gpus") or []


def _gpu_facts_missing(ctx, name):
    """A skip result when there are no per-GPU facts to judge, else None."""
    if ctx.facts is None:
        return check_result(name, SKIP, message=f"not checked: the node's facts could not be read ({ctx.facts_error})")
    if not _gpus(ctx):
        state = ctx.facts.get("nvidia_smi")
        return check_result(name, SKIP, message=f"not checked: nvidia-smi reported no GPU (state: {state}); see the gpu_count check")
    return None


def _gpu_label(gpu):
    return "GPU {} ({})".format(gpu.get("index"), gpu.get("pci_bus_id") or gpu.get("uuid") or "?")


# --------------------------------------------------------------------------- gpu_count


def check_gpu_count(ctx):
    name = "gpu_count"
    expected = ctx.options.get("expected_gpu_count")
    if ctx.facts is None:
        return check_result(name, FAIL, None, expected, f"the node's GPU state could not be read: {ctx.facts_error}")
    facts = ctx.facts
    state = facts.get("nvidia_smi")
    count = facts.get("gpu_count") or 0
    pci_count = facts.get("pci_gpu_count") or 0
    observed = {"gpu_count": count, "pci_gpu_count": pci_count, "nvidia_smi": state}
    if state != "ok":
        detail = facts.get("nvidia_smi_message") or ""
        hint = {
            "absent": "nvidia-smi is not installed",
            "no_driver": "the NVIDIA driver is not loaded",
            "no_devices": "nvidia-smi found no GPU",
            "gpu_lost": "a GPU has fallen off the bus or is inaccessible (Xid 79?): reset or reboot, then check its seating and power",
            "version_mismatch": "nvidia-smi and the loaded kernel module are different versions: reboot to load the installed driver",
        }.get(state, "nvidia-smi did not answer")
        message = f"nvidia-smi did not answer normally ({state}): {hint}"
        if detail:
            message += f". It printed: {detail[:200]}"
        return check_result(name, FAIL, observed, expected, message)
    if expected is not None:
        if count != expected:
            return check_result(
                name, FAIL, observed, expected,
                f"nvidia-smi sees {count} GPUs, {expected} expected (the PCI bus lists {pci_count}): check for a lost or unseated GPU",
            )
        return check_result(name, PASS, observed, expected, f"{count} GPUs, as expected")
    if pci_count and count < pci_count:
        return check_result(
            name, FAIL, observed, pci_count,
            f"nvidia-smi sees {count} GPUs but the PCI bus lists {pci_count}: a GPU is not usable by the driver",
        )
    if count == 0:
        return check_result(name, FAIL, observed, ">= 1", "nvidia-smi answered but lists no GPU")
    return check_result(name, PASS, observed, None, f"{count} GPUs; set expected_gpu_count to catch a GPU missing from the bus too")


# --------------------------------------------------------------------------- driver


def check_driver_version(ctx):
    name = "driver_version"
    expected = ctx.options.get("expected_driver_version")
    if ctx.facts is None:
        return check_result(name, FAIL, None, expected, f"the driver state could not be read: {ctx.facts_error}")
    driver = ctx.facts.get("driver") or {}
    observed = driver.get("version")
    if not driver.get("loaded"):
        return check_result(name, FAIL, observed, expected or "loaded", "the NVIDIA kernel module is not loaded")
    if ctx.facts.get("nvidia_smi") == "version_mismatch":
        return check_result(
            name, FAIL, observed, expected or observed,
            "nvidia-smi (user space) and the loaded kernel module differ: the node runs an old driver, reboot to load the installed one",
        )
    if expected is None:
        return check_result(name, PASS, observed, None, f"driver {observed} loaded; set expected_driver_version to check the version")
    if observed != expected:
        return check_result(name, FAIL, observed, expected, f"driver {observed} is loaded, {expected} expected")
    return check_result(name, PASS, observed, expected, f"driver {observed} loaded")


# --------------------------------------------------------------------------- fabric manager


def check_fabricmanager(ctx):
    name = "fabricmanager"
    explicit = ctx.options.get("expected_fabricmanager_version")
    if ctx.facts is None:
        return check_result(name, FAIL, None, explicit, f"the fabric manager state could not be read: {ctx.facts_error}")
    fm = ctx.facts.get("fabricmanager") or {}
    nvswitch = (ctx.facts.get("nvswitch") or {}).get("present")
    if not nvswitch and not explicit:
        return check_result(name, SKIP, {"nvswitch": False}, None, "no NVSwitch on this node: the fabric manager is not needed")
    driver_version = (ctx.facts.get("driver") or {}).get("version")
    expected_version = explicit or driver_version
    observed = {"version": fm.get("version"), "state": fm.get("state")}
    expected = {"version": expected_version, "state": "active"}
    if not fm.get("installed"):
        return check_result(name, FAIL, observed, expected, f"nv-fabricmanager is not installed: install nvidia-fabricmanager {expected_version}")
    problems = []
    if fm.get("version") != expected_version:
        against = "the expected version" if explicit else "the driver"
        problems.append(f"fabric manager {fm.get('version')} does not match {against} {expected_version}: install nvidia-fabricmanager {expected_version}")
    if fm.get("state") != "active":
        problems.append(f"nvidia-fabricmanager is {fm.get('state') or 'not running'}: on NVSwitch systems CUDA cannot use the GPUs without it")
    if problems:
        return check_result(name, FAIL, observed, expected, "; ".join(problems))
    return check_result(name, PASS, observed, expected, f"fabric manager {fm.get('version')} running")


# --------------------------------------------------------------------------- Xid


_MONOTONIC = re.compile(r"\d+(?:\.\d+)?")  # used with fullmatch: "$" would accept a trailing newline


def _parse_iso(text):
    """Seconds since the epoch of an ISO 8601 time; one without a zone is the node's local time."""
    text = text.strip().replace(",", ".")
    match = re.fullmatch(
        r"(\d{4})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d)(?::(\d\d)(?:\.(\d+))?)?)?\s*(Z|[+-]\d\d:?\d\d)?",
        text,
    )
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    fields = (int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0))
    try:
        datetime.datetime(*fields)  # a 13th month or a 31 February is no time (mktime would roll it over silently)
    except ValueError:
        return None
    frac = float("0." + fraction) if fraction else 0.0
    if zone is None:
        return time.mktime((*fields, 0, 0, -1)) + frac
    epoch = calendar.timegm((*fields, 0, 0, 0)) + frac
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        epoch -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return epoch


def parse_since(value):
    """``xid_since`` as seconds since the epoch; None for ``boot``. Raises ValueError on other text."""
    if value is None or str(value).strip().lower() in ("", "boot"):
        return None
    text = str(value).strip()
    if _MONOTONIC.fullmatch(text):
        return float(text)
    epoch = _parse_iso(text)
    if epoch is None:
        raise ValueError(f"xid_since {value!r} is neither 'boot', seconds since the epoch, nor an ISO 8601 time (2025-01-21T04:41:44Z)")
    return epoch


def event_epoch(timestamp, boot_time):
    """Seconds since the epoch of an Xid line's time stamp as the kernel log printed it; None when unknown.

    ``[ 1234.567]`` counts from boot (``boot_time`` needed); ``dmesg -T`` / ``--ctime`` and syslog
    times are local times, ISO times carry their zone.
    """
    if not timestamp:
        return None
    text = timestamp.strip()
    if _MONOTONIC.fullmatch(text):
        return None if boot_time is None else boot_time + float(text)
    epoch = _parse_iso(text)
    if epoch is not None:
        return epoch
    words = text.split()
    for fmt, parts in (("%a %b %d %H:%M:%S %Y", words), ("%b %d %H:%M:%S %Y", [*words, time.strftime("%Y")])):
        try:
            return time.mktime(time.strptime(" ".join(parts), fmt))
        except ValueError:
            continue
    return None


def _xid_text(code, count):
    entry = XID_CATALOG.get(code)
    if entry is None:
        return f"Xid {code} x{count}"
    return "Xid {} ({}) x{}: {}".format(code, entry["name"], count, ACTIONS.get(entry["action"], entry["action"]))


def check_xid(ctx):
    name = "xid"
    critical = set(ctx.options.get("critical_xids") or DEFAULT_CRITICAL_XIDS)
    since_text = ctx.options.get("xid_since") or "boot"
    expected = {"critical": {}, "since": since_text}
    if ctx.facts is None:
        return check_result(name, FAIL, None, expected, f"the kernel log could not be read: {ctx.facts_error}")
    xid = ctx.facts.get("xid") or {}
    if xid.get("source") is None:
        return check_result(name, SKIP, None, expected, "no kernel log reader (dmesg) on this node: Xid events not checked")
    if xid.get("error"):
        return check_result(
            name, FAIL, None, expected, "the kernel log could not be read ({}): run the task with become: true".format(xid["error"])
        )
    since = parse_since(since_text)
    events = [e for e in xid.get("events") or [] if e.get("kind", "xid") == "xid"]
    undated = 0
    if since is not None:
        kept = []
        for event in events:
            when = event_epoch(event.get("timestamp"), ctx.boot_time)
            if when is None:
                undated += 1  # a time we cannot place counts: better a false alarm than a missed Xid 79
                kept.append(event)
            elif when >= since:
                kept.append(event)
        events = kept
    counts = {}
    for event in events:
        counts[event["xid"]] = counts.get(event["xid"], 0) + 1
    bad = {code: n for code, n in sorted(counts.items()) if code in critical}
    observed = {"critical": bad, "counts": counts}
    if undated:
        observed["undated_events"] = undated
    if bad:
        gpus = sorted({e.get("pci_bus_id") or "?" for e in events if e["xid"] in bad})
        message = "critical Xid since {}: {} (on {})".format(since_text, "; ".join(_xid_text(c, n) for c, n in bad.items()), ", ".join(gpus))
        return check_result(name, FAIL, observed, expected, message)
    if ctx.baseline is not None and baseline_lib.same_boot(ctx.snapshot, ctx.baseline):
        grown = baseline_lib.xid_growth(baseline_lib.xid_counts(ctx.facts), ctx.baseline)
        if grown:
            observed["grown"] = grown
            expected["grown"] = {}
            return check_result(
                name, WARN, observed, expected,
                "non-critical Xid events since the baseline: {}".format(
                    ", ".join("Xid {} {}->{}".format(code, v["before"], v["after"]) for code, v in grown.items())
                ),
            )
    message = f"no critical Xid since {since_text}"
    if counts:
        message += " (other Xids: {})".format(", ".join(f"{c} x{n}" for c, n in counts.items()))
    return check_result(name, PASS, observed, expected, message)


# --------------------------------------------------------------------------- ECC


def check_ecc(ctx):
    name = "ecc"
    missing = _gpu_facts_missing(ctx, name)
    if missing:
        return missing
    problems = []
    for gpu in _gpus(ctx):
        label = _gpu_label(gpu)
        dbe = (gpu.get("ecc") or {}).get("volatile_dbe")
        if dbe:
            problems.append({"gpu": gpu.get("index"), "problem": "volatile_dbe", "value": dbe, "text": f"{label}: {dbe} volatile double-bit ECC errors"})
        rows = gpu.get("remapped_rows") or {}
        if rows.get("pending"):
            problems.append({"gpu": gpu.get("index"), "problem": "remap_pending", "value": True, "text": f"{label}: row remapping pending (reset the GPU)"})
        if rows.get("failure"):
            problems.append({"gpu": gpu.get("index"), "problem": "remap_failure", "value": True, "text": f"{label}: row remapping failed (replace the GPU)"})
        pages = gpu.get("retired_pages") or {}
        if pages.get("pending"):
            problems.append(
                {"gpu": gpu.get("index"), "problem": "retirement_pending", "value": True, "text": f"{label}: page retirement pending (reset the GPU)"}
            )
    expected = {"volatile_dbe": 0, "remap_pending": False, "retirement_pending": False}
    if ctx.baseline is not None:
        for grown in baseline_lib.ecc_growth(ctx.snapshot, ctx.baseline):
            problems.append(
                dict(grown, problem=grown["counter"] + "_growth", value=grown["after"],
                     text="GPU {}: {} grew from {} to {} since the baseline".format(grown["gpu"], grown["counter"], grown["before"], grown["after"]))
            )
        expected["growth_since_baseline"] = 0
    observed = [{k: v for k, v in p.items() if k != "text"} for p in problems]
    if problems:
        return check_result(name, FAIL, observed, expected, "; ".join(p["text"] for p in problems))
    total_dbe = sum((g.get("ecc") or {}).get("aggregate_dbe") or 0 for g in _gpus(ctx))
    # With ECC off the counters stay empty: nothing above can fail, so say so rather than pass.
    ecc_off = {
        gpu.get("index"): gpu.get("ecc_mode_current")
        for gpu in _gpus(ctx)
        if str(gpu.get("ecc_mode_current") or "").strip().lower() == "disabled"
    }
    if ecc_off:
        return check_result(
            name, WARN, {"ecc_mode": ecc_off, "volatile_dbe": None}, dict(expected, ecc_mode="Enabled"),
            "ECC is disabled on GPU {}: memory errors go undetected; data-centre GPUs should run with ECC on "
            "(nvidia-smi -e 1, then reset the GPU or reboot)".format(", ".join(str(i) for i in ecc_off)),
        )
    return check_result(
        name, PASS, {"volatile_dbe": 0, "aggregate_dbe": total_dbe}, expected,
        "no volatile double-bit ECC error, no pending row remap or page retirement" + (", no growth since the baseline" if ctx.baseline else ""),
    )


# --------------------------------------------------------------------------- temperature


def check_temperature(ctx):
    name = "temperature"
    missing = _gpu_facts_missing(ctx, name)
    if missing:
        return missing
    limit = ctx.options.get("max_temperature_c")
    temps = {gpu.get("index"): gpu.get("temperature_c") for gpu in _gpus(ctx)}
    known = {i: t for i, t in temps.items() if t is not None}
    if not known:
        return check_result(name, SKIP, temps, limit, "the GPUs report no temperature")
    hot = {i: t for i, t in known.items() if t > limit}
    observed = {"max_c": max(known.values()), "per_gpu": temps}
    if hot:
        return check_result(
            name, FAIL, observed, {"max_c": limit},
            "GPU {} above {} C: check airflow, fans and the inlet temperature".format(", ".join(f"{i} at {t} C" for i, t in hot.items()), limit),
        )
    return check_result(name, PASS, observed, {"max_c": limit}, "hottest GPU {} C, limit {} C".format(observed["max_c"], limit))


# --------------------------------------------------------------------------- clocks event reasons


def check_clocks(ctx):
    name = "clocks_event_reasons"
    missing = _gpu_facts_missing(ctx, name)
    if missing:
        return missing
    failing = set(ctx.options.get("slowdown_reasons") or DEFAULT_SLOWDOWN_REASONS)
    slowed = {}
    soft = {}
    for gpu in _gpus(ctx):
        active = set(gpu.get("clocks_event_reasons_active") or [])
        if active & failing:
            slowed[gpu.get("index")] = sorted(active & failing)
        if active & set(SOFT_REASONS):
            soft[gpu.get("index")] = sorted(active & set(SOFT_REASONS))
    expected = {"slowdown": {}, "watched": sorted(failing)}
    if slowed:
        return check_result(
            name, FAIL, {"slowdown": slowed}, expected,
            "clocks slowed down on GPU {}: a thermal or power slowdown makes this node a straggler; check cooling and power".format(
                "; ".join("{} ({})".format(i, ", ".join(r)) for i, r in slowed.items())
            ),
        )
    if soft:
        return check_result(
            name, WARN, {"slowdown": {}, "power_capped": soft}, expected,
            "GPU {} at their software power cap (normal under load, not at idle)".format(", ".join(str(i) for i in soft)),
        )
    return check_result(name, PASS, {"slowdown": {}}, expected, "no thermal or power slowdown")


# --------------------------------------------------------------------------- PCIe


def _idle(gpu):
    return "gpu_idle" in (gpu.get("clocks_event_reasons_active") or []) or (gpu.get("performance_state") or "") in _IDLE_PSTATES


def check_pcie(ctx):
    name = "pcie_link"
    missing = _gpu_facts_missing(ctx, name)
    if missing:
        return missing
    failures, warnings, links = [], [], {}
    for gpu in _gpus(ctx):
        pcie = gpu.get("pcie") or {}
        index = gpu.get("index")
        links[index] = "Gen{}/{} x{}/{}".format(pcie.get("gen_current"), pcie.get("gen_max"), pcie.get("width_current"), pcie.get("width_max"))
        width, width_max = pcie.get("width_current"), pcie.get("width_max")
        gen, gen_max = pcie.get("gen_current"), pcie.get("gen_max")
        if None not in (width, width_max) and width < width_max:
            failures.append(f"GPU {index} link x{width} of x{width_max}: reseat the GPU or check the riser")
        if None not in (gen, gen_max) and gen < gen_max:
            text = f"GPU {index} link Gen{gen} of Gen{gen_max}"
            if _idle(gpu):
                # Idle GPUs train their link down to save power; only a loaded link must run at its maximum.
                warnings.append(text + " while idle (links train down at idle; re-check under load)")
            else:
                failures.append(text + " under load: check the slot, riser and BIOS PCIe settings")
    observed = {"links": links}
    expected = "current generation and width equal to their maximum"
    if not any(v != "GenNone/None xNone/None" for v in links.values()):
        return check_result(name, SKIP, observed, expected, "the GPUs report no PCIe link information")
    if failures:
        return check_result(name, FAIL, observed, expected, "; ".join(failures + warnings))
    if warnings:
        return check_result(name, WARN, observed, expected, "; ".join(warnings))
    return check_result(name, PASS, observed, expected, "every PCIe link at its maximum generation and width")


__all__ = [
    "DEFAULT_SLOWDOWN_REASONS",
    "check_clocks",
    "check_driver_version",
    "check_ecc",
    "check_fabricmanager",
    "check_gpu_count",
    "check_pcie",
    "check_temperature",
    "check_xid",
    "event_epoch",
    "parse_since",
]
