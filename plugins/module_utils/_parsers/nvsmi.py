# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parsers of nvidia-smi output (private: may change without notice).

* parse_xml(text): ``nvidia-smi -q -x`` (DTD v10 to v13, Linux and Windows).
* parse_query_text(text): ``nvidia-smi -q`` (the human text form), same keys as parse_xml.
* parse_query_csv(text, fields): ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``.
* parse_compute_apps_csv(text, fields): ``nvidia-smi --query-compute-apps=... --format=csv...``.
* parse_list(text): ``nvidia-smi -L``.

Values that nvidia-smi reports as N/A, [N/A], [Not Supported]... are None; numbers lose their
units ("80 C" -> 80). Field names changed across driver branches (clocks_throttle_reasons ->
clocks_event_reasons, gpu_temp_slow_threshold -> T.Limit offsets, Driver Version -> KMD Version
in R610): the returned keys stay the same.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import (
    ParseError,
    cut_line,
    cut_short,
    driver_version,
    missing,
    number_or_none,
    text_or_none,
)

XML_TOOL = "nvidia-smi -q -x"
TEXT_TOOL = "nvidia-smi -q"
LIST_TOOL = "nvidia-smi -L"

# XML element names of clock event (formerly "throttle") reasons, without their
# "clocks_event_reason_" / "clocks_throttle_reason_" prefix, -> stable short names.
CLOCKS_EVENT_REASON_NAMES = {
    "gpu_idle": "gpu_idle",
    "applications_clocks_setting": "applications_clocks",
    "sw_power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "hw_power_brake",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal",
    "display_clocks_setting": "display_clocks",
}

# The same reasons as the text form (nvidia-smi -q) labels them.
_TEXT_REASON_NAMES = {
    "idle": "gpu_idle",
    "gpu idle": "gpu_idle",
    "applications clocks setting": "applications_clocks",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal",
    "hw power brake slowdown": "hw_power_brake",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal",
    "display clock setting": "display_clocks",
    "display clocks setting": "display_clocks",
}

_REASON_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")

_DTD_VERSION = re.compile(r"nvsmi_device_v(\d+)\.dtd")
_GPU_HEADER = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
_HEX = re.compile(r"^0x[0-9A-Fa-f]+$")
_BRACKET_NOTE = re.compile(r"\s*\[[^\]]*\]\s*$")


# --------------------------------------------------------------------------- values


def _num(value, field="a value"):
    """A number with its unit stripped, or None ("96 bank(s)" -> 96, "0x1" -> None); ParseError naming ``field`` when not finite."""
    if value is None:
        return None
    value = value.strip()
    if _HEX.match(value):
        return None
    if value.endswith("bank(s)"):
        value = value[: -len("bank(s)")]
    return number_or_none(value, "nvidia-smi", field)


def _int(value, field="a value"):
    number = _num(value, field)
    if isinstance(number, float):
        return int(number) if number.is_integer() else None
    return number


def _bool(value):
    """True for Yes/Enabled/Active, False for No/Disabled/Not Active, None for anything else."""
    text = text_or_none(value)
    if text is None:
        return None
    text = text.lower()
    if text in ("yes", "enabled", "active", "true"):
        return True
    if text in ("no", "disabled", "not active", "false"):
        return False
    return None


def _version(value, tool, what, terminated=True):
    """A whole driver version ("535.161.08", "595.80"), None when absent; a ParseError otherwise.

    terminated: what nvidia-smi prints after the value was seen (the closing tag, the newline);
    without it a two-part value may be a cut-off three-part one.
    """
    text = text_or_none(value)
    if text is None:
        return None
    # R610 prints "610.62 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]"
    text = _BRACKET_NOTE.sub("", text)
    return driver_version(text, tool, what, terminated=terminated)


def _cuda_version(value):
    text = text_or_none(value)
    if text is None:
        return None
    text = _BRACKET_NOTE.sub("", text)
    return text_or_none(text)


def _total(values):
    """Sum of the numbers among values, None when none is a number."""
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not numbers:
        return None
    return sum(numbers)


def _any_true(values):
    flags = [v for v in values if v is not None]
    if not flags:
        return None
    return any(flags)


def _slug(label):
    """'SRAM Uncorrectable SEC-DED' -> 'sram_uncorrectable_secded' (the XML element name)."""
    slug = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
    return slug.replace("sec_ded", "secded")


def _ecc_summary(volatile, aggregate):
    """The ecc dict from flat counter dicts (XML element names as keys), any layout."""
    result = {"volatile": volatile, "aggregate": aggregate}
    for scope, counters in (("volatile", volatile), ("aggregate", aggregate)):
        if "single_bit_total" in counters or "double_bit_total" in counters:
            # DTD v10/early v11: single_bit / double_bit sub-elements with a total
            sbe = counters.get("single_bit_total")
            dbe = counters.get("double_bit_total")
        else:
            sbe = _total([counters.get("sram_correctable"), counters.get("dram_correctable")])
            if "sram_uncorrectable" in counters:
                sram_dbe = counters.get("sram_uncorrectable")
            else:
                # DTD v13 splits SRAM uncorrectable errors into parity and SEC-DED
                sram_dbe = _total([counters.get("sram_uncorrectable_parity"), counters.get("sram_uncorrectable_secded")])
            dbe = _total([sram_dbe, counters.get("dram_uncorrectable")])
        result[scope + "_sbe"] = sbe
        result[scope + "_dbe"] = dbe
    return result


def _retired_pages(single_bit, double_bit, pending_blacklist, pending_retirement):
    values = {
        "single_bit": single_bit,
        "double_bit": double_bit,
        "pending_blacklist": pending_blacklist,
        "pending_retirement": pending_retirement,
        "pending": _any_true([pending_blacklist, pending_retirement]),
    }
    if all(v is None for v in values.values()):
        return None
    return values


def _remapped_rows(values, histogram):
    if all(v is None for v in values.values()) and not any(v is not None for v in histogram.values()):
        return None
    result = dict(values)
    result["histogram"] = histogram
    return result


def _empty_gpu(index):
    """Every key a GPU dict has, whichever parser fills it."""
    return {
        "index": index,
        "minor_number": None,
        "uuid": None,
        "name": None,
        "brand": None,
        "serial": None,
        "pci_bus_id": None,
        "vbios_version": None,
        "inforom_version": None,
        "product_architecture": None,
        "persistence_mode": None,
        "driver_model_current": None,
        "gsp_firmware_version": None,
        "recovery_action": None,
        "reset_required": None,
        "drain_and_reset_recommended": None,
        "performance_state": None,
        "fan_speed_pct": None,
        "ecc_mode_current": None,
        "ecc_mode_pending": None,
        "ecc": _ecc_summary({}, {}),
        "temperature_c": None,
        "temperature_slowdown_c": None,
        "temperature_shutdown_c": None,
        "temperature_max_operating_c": None,
        "temperature_tlimit_c": None,
        "temperature_memory_c": None,
        "power_draw_w": None,
        "power_draw_average_w": None,
        "power_draw_instant_w": None,
        "power_limit_w": None,
        "memory_total_mib": None,
        "memory_used_mib": None,
        "memory_free_mib": None,
        "utilization_gpu_pct": None,
        "utilization_memory_pct": None,
        "clocks_event_reasons": {},
        "clocks_event_reasons_active": [],
        "pcie": {"gen_max": None, "gen_current": None, "width_max": None, "width_current": None},
        "retired_pages": None,
        "remapped_rows": None,
        "mig_mode_current": None,
        "mig_mode_pending": None,
        "mig_devices": [],
        "processes": [],
        "addressing_mode": None,
        "fabric": None,
    }


# The ClusterUUID of a GPU outside any multi-node NVLink domain (HGX, PCIe; with CliqueId 0).
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
_CLUSTER_UUID = re.compile(r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$")


def _fabric(tool, state, status, clique_id, cluster_uuid, health):
    """The Fabric block of one GPU, or None when it has none (or only N/A: no NVLink fabric, Windows).

    ``{"state", "status", "clique_id", "cluster_uuid", "health", "multi_node"}``: ``multi_node`` is
    False for the all-zero ClusterUUID (no multi-node NVLink, or a fabric that failed to join one:
    Status ``Insufficient Resources`` with CliqueId 0), True for any other UUID, None when unknown.
    A CliqueId that is no number or a ClusterUUID that is no UUID is a ParseError naming it.
    """
    values = (state, status, clique_id, cluster_uuid, health)
    if all(value is None for value in values):
        return None
    if clique_id is not None:
        if not clique_id.isdigit():
            raise ParseError(f"{tool}: Fabric CliqueId {clique_id[:40]!r} is not a number")
        clique_id = int(clique_id)
    if cluster_uuid is not None and not _CLUSTER_UUID.match(cluster_uuid):
        raise ParseError(f"{tool}: Fabric ClusterUUID {cluster_uuid[:60]!r} is not a whole UUID (8-4-4-4-12 hex digits)")
    return {
        "state": state,
        "status": status,
        "clique_id": clique_id,
        "cluster_uuid": None if cluster_uuid is None else cluster_uuid.lower(),
        "health": health,
        "multi_node": None if cluster_uuid is None else cluster_uuid != ZERO_UUID,
    }


def _first(*values):
    for value in values:
        if value is not None:
            return value
    return None


def _active(reasons):
    return sorted(name for name, active in reasons.items() if active)


# --------------------------------------------------------------------------- XML


def _xml_text(element, path):
    """Text of the element at path (ElementTree path), None when absent or N/A."""
    if element is None:
        return None
    found = element.find(path)
    if found is None:
        return None
    return text_or_none(found.text)


def _xml_num(element, path):
    return _num(_xml_text(element, path), path)


def _xml_counters(element):
    """Flat {name: number or bool} of an ecc_errors/volatile (or aggregate) element, any layout."""
    counters = {}
    if element is None:
        return counters
    for child in element:
        if len(child):
            for leaf in child:
                counters[child.tag + "_" + leaf.tag] = _num(leaf.text, f"{child.tag}/{leaf.tag}")
        else:
            value = text_or_none(child.text)
            counters[child.tag] = _bool(value) if value is not None and _num(value, child.tag) is None else _num(value, child.tag)
    return counters


def _xml_reasons(gpu):
    section = gpu.find("clocks_event_reasons")
    if section is None:
        section = gpu.find("clocks_throttle_reasons")
    reasons = {}
    if section is None:
        return reasons
    for child in section:
        name = child.tag
        for prefix in _REASON_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        reasons[CLOCKS_EVENT_REASON_NAMES.get(name, name)] = _bool(child.text)
    return reasons


def _xml_processes(gpu):
    processes = []
    section = gpu.find("processes")
    if section is None:
        return processes
    for info in section.findall("process_info"):
        processes.append(
            {
                "pid": _int(_xml_text(info, "pid"), "pid"),
                "name": _xml_text(info, "process_name"),
                "type": _xml_text(info, "type"),
                "used_memory_mib": _xml_num(info, "used_memory"),
                "gpu_instance_id": _int(_xml_text(info, "gpu_instance_id"), "gpu_instance_id"),
                "compute_instance_id": _int(_xml_text(info, "compute_instance_id"), "compute_instance_id"),
            }
        )
    return processes


def _xml_mig_devices(gpu):
    devices = []
    section = gpu.find("mig_devices")
    if section is None:
        return devices
    for device in section.findall("mig_device"):
        devices.append(
            {
                "index": _int(_xml_text(device, "index"), "index"),
                "gpu_instance_id": _int(_xml_text(device, "gpu_instance_id"), "gpu_instance_id"),
                "compute_instance_id": _int(_xml_text(device, "compute_instance_id"), "compute_instance_id"),
                "multiprocessor_count": _int(_xml_text(device, "device_attributes/shared/multiprocessor_count"), "multiprocessor_count"),
                "memory_total_mib": _xml_num(device, "fb_memory_usage/total"),
                "memory_used_mib": _xml_num(device, "fb_memory_usage/used"),
            }
        )
    return devices


def _xml_gpu(gpu, position):
    result = _empty_gpu(position)
    result["minor_number"] = _int(_xml_text(gpu, "minor_number"), "minor_number")
    result["uuid"] = _xml_text(gpu, "uuid")
    result["name"] = _xml_text(gpu, "product_name")
    result["brand"] = _xml_text(gpu, "product_brand")
    result["serial"] = _xml_text(gpu, "serial")
    result["pci_bus_id"] = _first(_xml_text(gpu, "pci/pci_bus_id"), text_or_none(gpu.get("id")))
    result["vbios_version"] = _xml_text(gpu, "vbios_version")
    result["inforom_version"] = _xml_text(gpu, "inforom_version/img_version")
    result["product_architecture"] = _xml_text(gpu, "product_architecture")
    result["persistence_mode"] = _xml_text(gpu, "persistence_mode")
    result["driver_model_current"] = _xml_text(gpu, "driver_model/current_dm")
    result["gsp_firmware_version"] = _xml_text(gpu, "gsp_firmware_version")
    result["recovery_action"] = _xml_text(gpu, "gpu_recovery_action")
    result["reset_required"] = _bool(_xml_text(gpu, "gpu_reset_status/reset_required"))
    result["drain_and_reset_recommended"] = _bool(_xml_text(gpu, "gpu_reset_status/drain_and_reset_recommended"))
    result["performance_state"] = _xml_text(gpu, "performance_state")
    result["fan_speed_pct"] = _xml_num(gpu, "fan_speed")

    result["ecc_mode_current"] = _xml_text(gpu, "ecc_mode/current_ecc")
    result["ecc_mode_pending"] = _xml_text(gpu, "ecc_mode/pending_ecc")
    result["ecc"] = _ecc_summary(_xml_counters(gpu.find("ecc_errors/volatile")), _xml_counters(gpu.find("ecc_errors/aggregate")))

    temperature = gpu.find("temperature")
    result["temperature_c"] = _xml_num(temperature, "gpu_temp")
    # gpu_temp_*_tlimit_threshold (DTD v12+) are offsets from T.Limit, not temperatures: not used here
    result["temperature_slowdown_c"] = _xml_num(temperature, "gpu_temp_slow_threshold")
    result["temperature_shutdown_c"] = _xml_num(temperature, "gpu_temp_max_threshold")
    result["temperature_max_operating_c"] = _xml_num(temperature, "gpu_temp_max_gpu_threshold")
    result["temperature_tlimit_c"] = _xml_num(temperature, "gpu_temp_tlimit")
    result["temperature_memory_c"] = _xml_num(temperature, "memory_temp")

    # power_readings (DTD <= v11), gpu_power_readings (v12+; power_draw split into average/instant in R550+)
    old_power = gpu.find("power_readings")
    new_power = gpu.find("gpu_power_readings")
    result["power_draw_average_w"] = _xml_num(new_power, "average_power_draw")
    result["power_draw_instant_w"] = _xml_num(new_power, "instant_power_draw")
    result["power_draw_w"] = _first(
        _xml_num(old_power, "power_draw"),
        _xml_num(new_power, "power_draw"),
        result["power_draw_average_w"],
        result["power_draw_instant_w"],
    )
    result["power_limit_w"] = _first(
        _xml_num(old_power, "enforced_power_limit"),
        _xml_num(old_power, "power_limit"),
        _xml_num(new_power, "current_power_limit"),
    )

    result["memory_total_mib"] = _xml_num(gpu, "fb_memory_usage/total")
    result["memory_used_mib"] = _xml_num(gpu, "fb_memory_usage/used")
    result["memory_free_mib"] = _xml_num(gpu, "fb_memory_usage/free")
    result["utilization_gpu_pct"] = _xml_num(gpu, "utilization/gpu_util")
    result["utilization_memory_pct"] = _xml_num(gpu, "utilization/memory_util")

    reasons = _xml_reasons(gpu)
    result["clocks_event_reasons"] = reasons
    result["clocks_event_reasons_active"] = _active(reasons)

    link = gpu.find("pci/pci_gpu_link_info")
    result["pcie"] = {
        "gen_max": _xml_num(link, "pcie_gen/max_link_gen"),
        "gen_current": _xml_num(link, "pcie_gen/current_link_gen"),
        "width_max": _xml_num(link, "link_widths/max_link_width"),
        "width_current": _xml_num(link, "link_widths/current_link_width"),
    }

    pages = gpu.find("retired_pages")
    if pages is not None:
        result["retired_pages"] = _retired_pages(
            _xml_num(pages, "multiple_single_bit_retirement/retired_count"),
            _xml_num(pages, "double_bit_retirement/retired_count"),
            _bool(_xml_text(pages, "pending_blacklist")),
            _bool(_xml_text(pages, "pending_retirement")),
        )

    rows = gpu.find("remapped_rows")
    if rows is not None and len(rows):
        histogram = rows.find("row_remapper_histogram")
        result["remapped_rows"] = _remapped_rows(
            {
                "correctable": _xml_num(rows, "remapped_row_corr"),
                "uncorrectable": _xml_num(rows, "remapped_row_unc"),
                "correctable_inactive": _xml_num(rows, "remapped_row_corr_inactive"),
                "uncorrectable_inactive": _xml_num(rows, "remapped_row_unc_inactive"),
                "pending": _bool(_xml_text(rows, "remapped_row_pending")),
                "failure": _bool(_xml_text(rows, "remapped_row_failure")),
            },
            {level: _xml_num(histogram, "row_remapper_histogram_" + level) for level in ("max", "high", "partial", "low", "none")},
        )

    result["mig_mode_current"] = _xml_text(gpu, "mig_mode/current_mig")
    result["mig_mode_pending"] = _xml_text(gpu, "mig_mode/pending_mig")
    result["mig_devices"] = _xml_mig_devices(gpu)
    result["processes"] = _xml_processes(gpu)
    result["addressing_mode"] = _xml_text(gpu, "addressing_mode")
    result["fabric"] = _fabric(
        XML_TOOL,
        _xml_text(gpu, "fabric/state"),
        _xml_text(gpu, "fabric/status"),
        _xml_text(gpu, "fabric/cliqueId"),
        _xml_text(gpu, "fabric/clusterUuid"),
        _xml_text(gpu, "fabric/health/summary"),
    )
    return result


def parse_xml(text, strict=True):
    """Parse ``nvidia-smi -q -x``.

    Returns ``{"driver_version", "cuda_version", "dtd_version", "attached_gpus", "gpus": [...]}``
    (see _empty_gpu for the keys of a GPU). ``index`` is the position of the <gpu> element, which
    is nvidia-smi's own index (the XML has no index element; ``minor_number`` is /dev/nvidiaN).

    Raises ParseError when the text is not nvidia-smi XML or has no driver version. With
    strict=False a document without a driver version (an excerpt) is read as far as it goes.
    """
    if text is None or not text.strip():
        raise ParseError(f"{XML_TOOL}: empty output")
    # Skip anything printed before the document (a warning, a BOM).
    start = text.find("<?xml")
    if start < 0:
        start = text.find("<nvidia_smi_log")
    if start < 0:
        raise ParseError(f"{XML_TOOL}: no <nvidia_smi_log> document in the output")
    document = text[start:]
    try:
        root = ET.fromstring(document)  # noqa: S314 - nvidia-smi's own output, read on the node that ran it
    except (ET.ParseError, RecursionError, UnicodeError, ValueError) as exc:
        # UnicodeError: a byte that is no UTF-8, which the decoder kept as a surrogate the XML parser cannot encode.
        raise ParseError(f"{XML_TOOL}: output is not well-formed XML ({type(exc).__name__}: {str(exc)[:200]})") from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"{XML_TOOL}: root element is <{root.tag}>, expected <nvidia_smi_log>")

    # R610 renames driver_version/cuda_version to KMD / CUDA UMD versions on some platforms.
    driver_version = _first(
        _version(_xml_text(root, "driver_version"), XML_TOOL, "driver_version"),
        _version(_xml_text(root, "kmd_version"), XML_TOOL, "kmd_version"),
    )
    if driver_version is None and strict:
        raise ParseError(f"{XML_TOOL}: no driver_version (nor kmd_version) element in <nvidia_smi_log>")
    dtd = _DTD_VERSION.search(document[:500])
    return {
        "driver_version": driver_version,
        "cuda_version": _first(_cuda_version(_xml_text(root, "cuda_version")), _cuda_version(_xml_text(root, "cuda_umd_version"))),
        "dtd_version": int(dtd.group(1)) if dtd else None,
        "attached_gpus": _int(_xml_text(root, "attached_gpus"), "attached_gpus"),
        "gpus": [_xml_gpu(gpu, position) for position, gpu in enumerate(root.findall("gpu"))],
    }


# --------------------------------------------------------------------------- text (-q)


class _Node:
    """One line of ``nvidia-smi -q``: a label, an optional value, indented children."""

    __slots__ = ("children", "key", "label", "value")

    def __init__(self, label, value):
        self.label = label
        self.key = " ".join(label.lower().split())
        self.value = value
        self.children = []

    def child(self, *keys):
        """The first descendant along keys (case-insensitive labels), or None."""
        node = self
        for key in keys:
            node = next((c for c in node.children if c.key == key), None)
            if node is None:
                return None
        return node

    def all(self, key):
        return [c for c in self.children if c.key == key]

    def text(self, *keys):
        node = self.child(*keys)
        return None if node is None else text_or_none(node.value)

    def num(self, *keys):
        return _num(self.text(*keys), " / ".join(keys))

    def find(self, key):
        """The first node labelled key anywhere below (depth first), or None; iterative: indentation can nest deep."""
        pending = list(reversed(self.children))
        while pending:
            node = pending.pop()
            if node.key == key:
                return node
            pending.extend(reversed(node.children))
        return None


def _text_line(line):
    """(key, value) of a "Key : value" line, or None: the key ends at the first colon followed by a space or the end.

    By hand rather than a regex: a lazy key before "\\s*:" is quadratic in a run of spaces.
    """
    body = line.strip()
    position = 0
    while True:
        colon = body.find(":", position)
        if colon < 0:
            return None
        if colon + 1 == len(body) or body[colon + 1].isspace():
            key = body[:colon].rstrip()
            if key:
                return key, body[colon + 2 :]
        position = colon + 1


def _text_tree(text):
    root = _Node("", None)
    stack = [(-1, root)]
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("====="):
            continue
        line = line.expandtabs(4)
        indent = len(line) - len(line.lstrip())
        pair = _text_line(line)
        if pair:
            node = _Node(pair[0], pair[1])
        else:
            node = _Node(stripped, None)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def _text_counters(node):
    counters = {}
    if node is None:
        return counters
    for child in node.children:
        if child.value is None:
            # older layout: Single Bit / Double Bit sections with per-unit counters and a Total
            for leaf in child.children:
                counters[_slug(child.label) + "_" + _slug(leaf.label)] = _num(leaf.value, f"{child.label} / {leaf.label}")
        else:
            value = text_or_none(child.value)
            counters[_slug(child.label)] = _bool(value) if value is not None and _num(value, child.label) is None else _num(value, child.label)
    return counters


def _text_reasons(gpu):
    section = gpu.child("clocks event reasons") or gpu.child("clocks throttle reasons")
    reasons = {}
    if section is None:
        return reasons

    def walk(node):
        for child in node.children:
            if child.value is not None:
                reasons[_TEXT_REASON_NAMES.get(child.key, _slug(child.label))] = _bool(child.value)
            walk(child)

    walk(section)
    return reasons


def _text_processes(gpu):
    processes = []
    section = gpu.child("processes")
    if section is None:
        return processes
    instance = {}
    for child in section.children:
        if child.key == "gpu instance id":
            instance["gpu_instance_id"] = _int(child.value, child.label)
        elif child.key == "compute instance id":
            instance["compute_instance_id"] = _int(child.value, child.label)
        elif child.key == "process id":
            processes.append(
                {
                    "pid": _int(child.value, child.label),
                    "name": child.text("name") or child.text("process name"),
                    "type": child.text("type"),
                    "used_memory_mib": child.num("used gpu memory"),
                    "gpu_instance_id": instance.get("gpu_instance_id"),
                    "compute_instance_id": instance.get("compute_instance_id"),
                }
            )
            instance = {}
    return processes


def _text_power(gpu):
    section = gpu.child("gpu power readings") or gpu.child("power readings")
    if section is None:
        return None, None, None, None

    def value(key):
        node = section.find(key)
        return None if node is None else _num(node.value, key)

    average = value("average power draw")
    instant = value("instantaneous power draw")
    draw = _first(value("power draw"), average, instant)
    limit = _first(value("enforced power limit"), value("power limit"), value("current power limit"))
    return draw, average, instant, limit


def _text_gpu(gpu, position, bus_id):
    result = _empty_gpu(position)
    result["minor_number"] = _int(gpu.text("minor number"), "minor number")
    result["uuid"] = gpu.text("gpu uuid")
    result["name"] = gpu.text("product name")
    result["brand"] = gpu.text("product brand")
    result["serial"] = gpu.text("serial number")
    result["pci_bus_id"] = _first(gpu.text("pci", "bus id"), bus_id)
    result["vbios_version"] = gpu.text("vbios version")
    result["inforom_version"] = gpu.text("inforom version", "image version")
    result["product_architecture"] = gpu.text("product architecture")
    result["persistence_mode"] = gpu.text("persistence mode")
    result["driver_model_current"] = gpu.text("driver model", "current")
    result["gsp_firmware_version"] = gpu.text("gsp firmware version")
    result["recovery_action"] = gpu.text("gpu recovery action")
    result["reset_required"] = _bool(gpu.text("gpu reset status", "reset required"))
    result["drain_and_reset_recommended"] = _bool(gpu.text("gpu reset status", "drain and reset recommended"))
    result["performance_state"] = gpu.text("performance state")
    result["fan_speed_pct"] = gpu.num("fan speed")

    result["ecc_mode_current"] = gpu.text("ecc mode", "current")
    result["ecc_mode_pending"] = gpu.text("ecc mode", "pending")
    result["ecc"] = _ecc_summary(_text_counters(gpu.child("ecc errors", "volatile")), _text_counters(gpu.child("ecc errors", "aggregate")))

    result["temperature_c"] = gpu.num("temperature", "gpu current temp")
    # "GPU Slowdown T.Limit Temp" (R525+) is an offset from T.Limit, not a temperature: not used here
    result["temperature_slowdown_c"] = gpu.num("temperature", "gpu slowdown temp")
    result["temperature_shutdown_c"] = gpu.num("temperature", "gpu shutdown temp")
    result["temperature_max_operating_c"] = gpu.num("temperature", "gpu max operating temp")
    result["temperature_tlimit_c"] = _first(gpu.num("temperature", "gpu t.limit temp"), gpu.num("temperature", "gpu current t.limit temp"))
    result["temperature_memory_c"] = gpu.num("temperature", "memory current temp")

    draw, average, instant, limit = _text_power(gpu)
    result["power_draw_w"] = draw
    result["power_draw_average_w"] = average
    result["power_draw_instant_w"] = instant
    result["power_limit_w"] = limit

    result["memory_total_mib"] = gpu.num("fb memory usage", "total")
    result["memory_used_mib"] = gpu.num("fb memory usage", "used")
    result["memory_free_mib"] = gpu.num("fb memory usage", "free")
    result["utilization_gpu_pct"] = gpu.num("utilization", "gpu")
    result["utilization_memory_pct"] = gpu.num("utilization", "memory")

    reasons = _text_reasons(gpu)
    result["clocks_event_reasons"] = reasons
    result["clocks_event_reasons_active"] = _active(reasons)

    result["pcie"] = {
        "gen_max": gpu.num("pci", "gpu link info", "pcie generation", "max"),
        "gen_current": gpu.num("pci", "gpu link info", "pcie generation", "current"),
        "width_max": gpu.num("pci", "gpu link info", "link width", "max"),
        "width_current": gpu.num("pci", "gpu link info", "link width", "current"),
    }

    pages = gpu.child("retired pages")
    if pages is not None:
        result["retired_pages"] = _retired_pages(
            pages.num("single bit ecc"),
            pages.num("double bit ecc"),
            _bool(_first(pages.text("pending page blacklist"), pages.text("pending"))),
            _bool(pages.text("pending page retirement")),
        )

    rows = gpu.child("remapped rows")
    if rows is not None and rows.children:
        histogram = rows.child("bank remap availability histogram")
        result["remapped_rows"] = _remapped_rows(
            {
                "correctable": rows.num("correctable error"),
                "uncorrectable": rows.num("uncorrectable error"),
                "correctable_inactive": rows.num("inactive correctable error"),
                "uncorrectable_inactive": rows.num("inactive uncorrectable error"),
                "pending": _bool(rows.text("pending")),
                "failure": _bool(rows.text("remapping failure occurred")),
            },
            {level: (histogram.num(level) if histogram is not None else None) for level in ("max", "high", "partial", "low", "none")},
        )

    result["mig_mode_current"] = gpu.text("mig mode", "current")
    result["mig_mode_pending"] = gpu.text("mig mode", "pending")
    result["mig_devices"] = [
        {
            "index": _int(device.text("index"), "index"),
            "gpu_instance_id": _int(device.text("gpu instance id"), "gpu instance id"),
            "compute_instance_id": _int(device.text("compute instance id"), "compute instance id"),
            "multiprocessor_count": _int(device.text("device attributes", "shared", "multiprocessor count"), "multiprocessor count"),
            "memory_total_mib": _first(device.num("shared fb memory usage", "total"), device.num("fb memory usage", "total")),
            "memory_used_mib": _first(device.num("shared fb memory usage", "used"), device.num("fb memory usage", "used")),
        }
        for device in gpu.all("mig device")
    ]
    result["processes"] = _text_processes(gpu)
    result["addressing_mode"] = gpu.text("addressing mode")
    result["fabric"] = _fabric(
        TEXT_TOOL,
        gpu.text("fabric", "state"),
        gpu.text("fabric", "status"),
        gpu.text("fabric", "cliqueid"),
        gpu.text("fabric", "clusteruuid"),
        gpu.text("fabric", "health", "summary"),
    )
    return result


def parse_query_text(text, strict=True):
    """Parse ``nvidia-smi -q`` (the text form) into the same shape as parse_xml.

    Sections it does not know are skipped. Raises ParseError when there is no driver version
    (``Driver Version`` or R610's ``KMD Version``), and when the last line has no newline: the output
    was cut short there (``Bus Id : 00000000:52:0``, ``GPU UUID : GPU-5c0b``, a GPU's later sections
    missing). With strict=False an excerpt without the header is read as far as it goes; an excerpt
    without a ``GPU <bus id>`` line is read as one GPU.
    """
    if text is None or not text.strip():
        raise ParseError(f"{TEXT_TOOL}: empty output")
    root = _text_tree(text)
    # A last line without its newline may be cut: "Driver Version : 535.86" of 535.86.05, "Bus Id : 00000000:52:0".
    last = cut_line(text)
    cut = _text_line(last) if last else None
    cut_key = " ".join(cut[0].lower().split()) if cut else None
    # R610 on some platforms: "Driver Version : 610.62 [Deprecated; ... Use KMD Version instead]"
    driver_version = _first(
        _version(root.text("kmd version"), TEXT_TOOL, "KMD Version", terminated=cut_key != "kmd version"),
        _version(root.text("driver version"), TEXT_TOOL, "Driver Version", terminated=cut_key != "driver version"),
    )
    if driver_version is None and strict:
        raise ParseError(f"{TEXT_TOOL}: no 'Driver Version' (nor 'KMD Version') line: not nvidia-smi -q output, or an excerpt")
    if last and last.strip():
        raise cut_short(TEXT_TOOL, repr(cut[0]) if cut else "the last section", last)
    cuda_version = _first(_cuda_version(root.text("cuda umd version")), _cuda_version(root.text("cuda version")))

    gpus = []
    for node in root.children:
        match = _GPU_HEADER.match(node.label) if node.value is None else None
        if match:
            gpus.append(_text_gpu(node, len(gpus), match.group("bus")))
    if not gpus and not strict:
        top = {"timestamp", "driver version", "cuda version", "kmd version", "cuda umd version", "attached gpus"}
        body = _Node("", None)
        body.children = [c for c in root.children if c.key not in top]
        # an excerpt that starts inside a GPU section (indented): read it as that GPU
        if body.children:
            gpus.append(_text_gpu(body, 0, None))
    return {
        "driver_version": driver_version,
        "cuda_version": cuda_version,
        "dtd_version": None,
        "attached_gpus": _int(root.text("attached gpus"), "attached gpus"),
        "gpus": gpus,
    }


# --------------------------------------------------------------------------- CSV


# Fields whose values are text even when they look like numbers (serial "0000000000000",
# compute_cap "9.0", driver "536.40", inforom "2.1").
_TEXT_FIELDS = frozenset(
    (
        "timestamp",
        "driver_version",
        "kmd_version",
        "cuda_version",
        "name",
        "gpu_name",
        "serial",
        "gpu_serial",
        "uuid",
        "gpu_uuid",
        "pci.bus_id",
        "gpu_bus_id",
        "vbios_version",
        "compute_cap",
        "process_name",
        "hostname",
        "pstate",
    )
)
_TEXT_PREFIXES = ("inforom.", "pci.", "platform.", "fabric.")
# A free-text field that may itself contain ", " (nvidia-smi does not quote CSV values).
_FREE_TEXT_FIELDS = ("process_name", "name", "gpu_name")
_HEADER_CELL = re.compile(r"^[a-z_][a-z0-9_.]*(?:\s*\[[^\]]*\])?$", re.IGNORECASE)
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]$")


def _csv_value(field, value):
    if missing(value):
        return None
    value = value.strip()
    lowered = field.lower()
    if lowered in _TEXT_FIELDS or lowered.startswith(_TEXT_PREFIXES) or _HEX.match(value):
        return value
    number = _num(value, field)
    return value if number is None else number


def _split_row(line, fields, tool, lineno):
    cells = [cell.strip() for cell in line.split(",")]
    if len(cells) == len(fields):
        return cells
    free = [i for i, field in enumerate(fields) if field.lower() in _FREE_TEXT_FIELDS]
    if len(cells) > len(fields) and len(free) == 1:
        position = free[0]
        extra = len(cells) - len(fields)
        merged = ", ".join(cells[position : position + extra + 1])
        return [*cells[:position], merged, *cells[position + extra + 1 :]]
    raise ParseError(f"{tool}: line {lineno} has {len(cells)} values for {len(fields)} fields: {line.strip()!r}")


def _is_header(cells, fields):
    if not all(_HEADER_CELL.match(cell) for cell in cells):
        return False
    names = [_HEADER_UNIT.sub("", cell).lower() for cell in cells]
    return bool(set(names) & {f.lower() for f in fields}) if fields else True


def _parse_csv(text, fields, tool, allow_empty):
    if isinstance(fields, str):
        fields = [f.strip() for f in fields.split(",") if f.strip()]
    cut = cut_line(text)
    if cut and cut.strip():
        # The last value of a cut row still looks whole (835 of 8350 MHz, a pid, a UUID cut short): no row without its newline.
        names = fields or [cell.split(" [", 1)[0].strip() for cell in text.lstrip().split("\n", 1)[0].split(",")]
        cells = len(cut.split(","))
        raise cut_short(tool, f"{names[cells - 1]!r} of the last row" if cells <= len(names) else "the last row", cut)
    lines = [(n, line) for n, line in enumerate((text or "").splitlines(), 1) if line.strip()]
    if lines:
        first_cells = [cell.strip() for cell in lines[0][1].split(",")]
        if _is_header(first_cells, fields):
            names = [_HEADER_UNIT.sub("", cell) for cell in first_cells]
            if not fields:
                fields = names
            elif [n.lower() for n in names] != [f.lower() for f in fields]:
                raise ParseError(f"{tool}: header {', '.join(names)!r} does not match the requested fields {', '.join(fields)!r}")
            lines = lines[1:]
    if not fields:
        raise ParseError(f"{tool}: no field names given and no header line to read them from")
    if not lines:
        if allow_empty:
            return []
        raise ParseError(f"{tool}: no GPU rows in the output")
    rows = []
    for lineno, line in lines:
        cells = _split_row(line, fields, tool, lineno)
        rows.append({field: _csv_value(field, cell) for field, cell in zip(fields, cells)})
    return rows


def parse_query_csv(text, fields=None):
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]``.

    Returns one dict per GPU keyed by the requested field names as given: numbers where the value
    is numeric (units stripped), None for N/A markers, else strings. A header line is detected and
    skipped (it must name the requested fields); fields may be omitted when the header is there. A
    last row without its newline is a ParseError: its last value may be cut short (``835`` of 8350).
    """
    return _parse_csv(text, fields, "nvidia-smi --query-gpu", allow_empty=False)


def parse_compute_apps_csv(text, fields=None):
    """Parse ``nvidia-smi --query-compute-apps=<fields> --format=csv...``; [] when nothing runs (a cut last row: ParseError)."""
    return _parse_csv(text, fields, "nvidia-smi --query-compute-apps", allow_empty=True)


# --------------------------------------------------------------------------- -L

_LIST_GPU = re.compile(r"^GPU\s+(?P<index>\d+):\s+(?P<name>.+?)\s+\(UUID:\s*(?P<uuid>[^)\s]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG\s+(?P<profile>\S+)\s+Device\s+(?P<index>\d+):\s+\(UUID:\s*(?P<uuid>[^)\s]+)\)\s*$")


def parse_list(text):
    """Parse ``nvidia-smi -L``: ``[{"index", "name", "uuid", "mig": [{"index", "profile", "uuid"}]}]``."""
    gpus = []
    for lineno, line in enumerate((text or "").splitlines(), 1):
        if not line.strip():
            continue
        if line.strip() == "No devices were found":
            return []
        match = _LIST_GPU.match(line)
        if match:
            gpus.append({"index": int(match.group("index")), "name": match.group("name"), "uuid": match.group("uuid"), "mig": []})
            continue
        match = _LIST_MIG.match(line)
        if match and gpus:
            gpus[-1]["mig"].append({"index": int(match.group("index")), "profile": match.group("profile"), "uuid": match.group("uuid")})
            continue
        raise ParseError(f"{LIST_TOOL}: line {lineno} is not a GPU or MIG device line: {line.strip()!r}")
    return gpus
