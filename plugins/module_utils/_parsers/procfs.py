# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse what the kernel says about the NVIDIA driver (private).

``/proc/driver/nvidia/version``, ``/proc/driver/nvidia/gpus/*/information``, ``modinfo nvidia``,
``lsmod`` and ``nvidia-container-cli info``. These work when nvidia-smi does not (GPU fallen off
the bus, driver half loaded), so facts gathering falls back on them.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, number_or_none, text_or_none

_DRIVER_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)*$")

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017"
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  525.60.11  Release Build  (builder@host)  <date>"
_NVRM_LINE = re.compile(
    r"^NVRM version:\s*NVIDIA UNIX\s+(?P<module>.*?Kernel Module(?:\s+for\s+\S+)?)\s+(?P<version>\d+\.\d+(?:\.\d+)*)(?:\s+(?P<rest>.*?))?\s*$",
    re.MULTILINE,
)
_ARCH_FOR = re.compile(r"\bfor\s+(?P<arch>\S+)$")
_ARCH_BEFORE = re.compile(r"^(?P<arch>\S+)\s+(?:Open\s+)?Kernel Module")
_BUILD = re.compile(r"^(?:(?P<type>Release|Debug|Develop)\s+Build\s*)?(?:\((?P<builder>[^)]*)\)\s*)?(?P<date>.*)$")
_GCC_LINE = re.compile(r"^GCC version:\s*(?P<compiler>.*?)\s*$", re.MULTILINE)

_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z][\w .-]*?):\s*(?P<value>.*?)\s*$")


def parse_driver_version(text):
    """``/proc/driver/nvidia/version`` -> ``{"version", "flavor", "arch", "build_date", "compiler"}``.

    ``flavor`` is ``"open"`` for the open GPU kernel modules ("Open Kernel Module") and
    ``"proprietary"`` otherwise. ``build_date`` is free text (it can be localized) or None, and
    ``compiler`` the text after ``GCC version:`` or None. On Jetson (L4T) the version is the L4T
    release, not a desktop driver branch. Raises ParseError without an ``NVRM version`` line.
    """
    match = _NVRM_LINE.search(text or "")
    if not match:
        raise ParseError("/proc/driver/nvidia/version: no 'NVRM version: NVIDIA UNIX ... Kernel Module <version>' line")
    module = match.group("module")
    arch = _ARCH_FOR.search(module) or _ARCH_BEFORE.match(module)
    build = _BUILD.match(match.group("rest") or "")
    compiler = _GCC_LINE.search(text)
    return {
        "version": match.group("version"),
        "flavor": "open" if re.search(r"\bOpen\b", module) else "proprietary",
        "arch": arch.group("arch") if arch else None,
        "build_date": text_or_none(build.group("date")),
        "compiler": text_or_none(compiler.group("compiler")) if compiler else None,
    }


def _flavor_from_license(license_text):
    if license_text is None:
        return None
    if license_text == "NVIDIA":
        return "proprietary"
    if "MIT" in license_text or "GPL" in license_text:
        return "open"  # the open kernel modules are "Dual MIT/GPL"
    raise ParseError(f"modinfo nvidia: unknown license {license_text!r}: cannot tell open from proprietary")


def parse_modinfo(text):
    """``modinfo nvidia`` -> ``{"version", "license", "flavor", "filename", "firmware", "vermagic",
    "srcversion", "depends", "signer"}``.

    ``flavor`` comes from the license ("Dual MIT/GPL": open, "NVIDIA": proprietary; None when the
    line is missing). ``firmware`` and ``depends`` are lists. A damaged paste (a key cut short)
    gives None for that field; a missing or malformed ``version`` raises ParseError, as does
    modinfo's own error message.
    """
    fields = {}
    for line in (text or "").splitlines():
        match = _KEY_VALUE.match(line)
        if match:
            fields.setdefault(match.group("key").strip(), []).append(match.group("value"))
    if not fields:
        raise ParseError(f"modinfo nvidia: no 'key: value' lines in output: {(text or '').strip()[:200]!r}")
    version = text_or_none((fields.get("version") or [None])[0])
    if version is None:
        first_line = (text or "").strip().splitlines()[0]
        raise ParseError(f"modinfo nvidia: no 'version:' line (module not found, or output damaged): {first_line[:200]!r}")
    if not _DRIVER_VERSION.match(version):
        raise ParseError(f"modinfo nvidia: version {version!r} is not a driver version")
    license_text = text_or_none((fields.get("license") or [None])[0])
    depends = (fields.get("depends") or [""])[0]

    def first(key):
        return text_or_none((fields.get(key) or [None])[0])

    return {
        "version": version,
        "license": license_text,
        "flavor": _flavor_from_license(license_text),
        "filename": first("filename"),
        "firmware": [value for value in fields.get("firmware", []) if value],
        "vermagic": first("vermagic"),
        "srcversion": first("srcversion"),
        "depends": [name for name in depends.split(",") if name],
        "signer": first("signer"),
    }


_LSMOD_LINE = re.compile(r"^(?P<module>[\w-]+)\s+(?P<size>\d+)\s+(?P<count>-?\d+)(?:\s+(?P<used_by>\S.*?))?\s*$")


def parse_lsmod(text):
    """``lsmod`` -> ``{module: {"size", "used_by_count", "used_by": [...]}}``.

    ``used_by`` lists the modules named in the last column (``[permanent]`` and similar markers
    are left out); ``used_by_count`` is the kernel's count, which also counts open file handles.
    Raises ParseError on an empty output or a line that is not an lsmod row.
    """
    modules = {}
    header = False
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        if re.match(r"^Module\s+Size\s+Used by", line):
            header = True
            continue
        match = _LSMOD_LINE.match(line)
        if not match:
            raise ParseError(f"lsmod: cannot read line {line.strip()!r}")
        used_by = [name for name in (match.group("used_by") or "").split(",") if name and not name.startswith("[")]
        modules[match.group("module")] = {
            "size": int(match.group("size")),
            "used_by_count": int(match.group("count")),
            "used_by": used_by,
        }
    if not header and not modules:
        raise ParseError("lsmod: empty output")
    return modules


# /proc/driver/nvidia/gpus/<bus>/information key -> (result key, converter)
_GPU_INFO_KEYS = {
    "Model": "model",
    "IRQ": "irq",
    "GPU UUID": "uuid",
    "Video BIOS": "vbios_version",
    "Bus Type": "bus_type",
    "DMA Size": "dma_size_bits",
    "DMA Mask": "dma_mask",
    "Bus Location": "pci_bus_id",
    "Device Minor": "device_minor",
    "GPU Firmware": "gpu_firmware",
    "GPU Excluded": "excluded",
    "Excluded": "excluded",
    "Blacklisted": "excluded",  # older drivers' name for the same flag
}
_GPU_INFO_NUMBERS = ("irq", "dma_size_bits", "device_minor")


def _blank_gpu():
    gpu = dict.fromkeys(_GPU_INFO_KEYS.values())
    return gpu


def parse_gpus_information(text):
    """``/proc/driver/nvidia/gpus/*/information`` -> ``[{"model", "irq", "uuid", "vbios_version",
    "bus_type", "dma_size_bits", "dma_mask", "pci_bus_id", "device_minor", "gpu_firmware",
    "excluded"}]``.

    One entry per ``Model:`` block, so the concatenated files of several GPUs (``cat
    .../gpus/*/information``) give one entry each; lines that are not ``Key: value`` (a pasted
    shell command) are ignored. ``excluded`` reads ``Excluded:`` or the older ``Blacklisted:``.
    Fields a driver does not print are None. Raises ParseError without any ``Model:`` line.
    """
    gpus = []
    for line in (text or "").splitlines():
        match = _KEY_VALUE.match(line.strip())
        if not match or match.group("key") not in _GPU_INFO_KEYS:
            continue
        key = _GPU_INFO_KEYS[match.group("key")]
        if key == "model":
            gpus.append(_blank_gpu())
        if not gpus:
            continue  # a field before the first Model: line belongs to no GPU we can name
        value = text_or_none(match.group("value"))
        if key in _GPU_INFO_NUMBERS:
            value = number_or_none(value.split()[0]) if value else None
        elif key == "excluded":
            value = None if value is None else value.lower() in ("yes", "true", "1")
        gpus[-1][key] = value
    if not gpus:
        raise ParseError("/proc/driver/nvidia/gpus/*/information: no 'Model:' line")
    return gpus


_CONTAINER_DEVICE_KEYS = {
    "Device Index": "index",
    "Device Minor": "minor",
    "Model": "model",
    "Brand": "brand",
    "GPU UUID": "uuid",
    "Bus Location": "pci_bus_id",
    "Architecture": "architecture",
}


def parse_container_cli_info(text):
    """``nvidia-container-cli info`` -> ``{"driver_version", "cuda_version", "devices": [{"index",
    "minor", "model", "brand", "uuid", "pci_bus_id", "architecture"}]}``.

    Raises ParseError without an ``NVRM version:`` line holding a driver version.
    """
    result = {"driver_version": None, "cuda_version": None, "devices": []}
    for line in (text or "").splitlines():
        match = _KEY_VALUE.match(line.strip())
        if not match:
            continue
        key, value = match.group("key"), text_or_none(match.group("value"))
        if key == "NVRM version":
            result["driver_version"] = value
        elif key == "CUDA version":
            result["cuda_version"] = value
        elif key in _CONTAINER_DEVICE_KEYS:
            if key == "Device Index":
                result["devices"].append(dict.fromkeys(_CONTAINER_DEVICE_KEYS.values()))
            if not result["devices"]:
                continue
            name = _CONTAINER_DEVICE_KEYS[key]
            result["devices"][-1][name] = number_or_none(value) if name in ("index", "minor") else value
    if not result["driver_version"] or not _DRIVER_VERSION.match(result["driver_version"]):
        raise ParseError("nvidia-container-cli info: no 'NVRM version: <driver version>' line")
    return result
