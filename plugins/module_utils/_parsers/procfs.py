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

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import (
    ParseError,
    cut_line,
    cut_short,
    driver_version,
    number_or_none,
    text_or_none,
    whole_lines,
)

PROC_TOOL = "/proc/driver/nvidia/version"

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017"
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  525.60.11  Release Build  (builder@host)  <date>"
# Read piece by piece (no regex with several unbounded parts over the line: linear in its length).
_NVRM_HEAD = re.compile(r"^NVRM version:[ \t]*NVIDIA UNIX[ \t]+", re.MULTILINE)
_KERNEL_MODULE = "Kernel Module"
_FOR_ARCH = re.compile(r"[ \t]+for[ \t]+\S+")
_TOKEN = re.compile(r"[ \t]+(\S+)")
# Jetson (L4T) prints its L4T release, always three parts: "35.3.1".
_L4T_VERSION = re.compile(r"[1-9][0-9]\.[0-9]{1,2}\.[0-9]{1,2}")
_ARCH_FOR = re.compile(r"\bfor\s+(?P<arch>\S+)$")
_ARCH_BEFORE = re.compile(r"^(?P<arch>\S+)\s+(?:Open\s+)?Kernel Module")
_BUILD = re.compile(r"^(?:(?P<type>Release|Debug|Develop)\s+Build\s*)?(?:\((?P<builder>[^)]*)\)\s*)?(?P<date>.*)$")
_GCC_LINE = re.compile(r"^GCC version:[ \t]*(?P<compiler>[^\n]*)", re.MULTILINE)

# The value is stripped afterwards: a lazy ".*?" before "\s*$" is quadratic in a run of spaces.
_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z][\w .-]*?):\s*(?P<value>.*)$")


def parse_driver_version(text):
    """``/proc/driver/nvidia/version`` -> ``{"version", "flavor", "arch", "build_date", "compiler"}``.

    ``flavor`` is ``"open"`` for the open GPU kernel modules ("Open Kernel Module") and
    ``"proprietary"`` otherwise. ``build_date`` is free text (it can be localized) or None, and
    ``compiler`` the text after ``GCC version:`` or None. On Jetson (L4T) the version is the L4T
    release, not a desktop driver branch. Raises ParseError without an ``NVRM version`` line, or when
    that line has no newline (its build date may be cut short); a ``GCC version`` line without one is
    left out (``compiler`` None) rather than read cut short.
    """
    text = text or ""
    head = _NVRM_HEAD.search(text)
    if not head:
        raise ParseError(f"{PROC_TOOL}: no 'NVRM version: NVIDIA UNIX ... Kernel Module <version>' line")
    line_end = text.find("\n", head.end())
    line = text[head.end() : line_end if line_end >= 0 else len(text)].rstrip("\r")
    position = line.find(_KERNEL_MODULE)
    if position < 0:
        raise ParseError(f"{PROC_TOOL}: no 'Kernel Module' in the NVRM version line {line[:200]!r}")
    position += len(_KERNEL_MODULE)
    arch_for = _FOR_ARCH.match(line, position)
    if arch_for:
        position = arch_for.end()
    module = line[:position]
    token = _TOKEN.match(line, position)
    if not token:
        raise ParseError(f"{PROC_TOOL}: no version after 'Kernel Module' in {line[:200]!r}")
    version = token.group(1)
    rest = line[token.end() :]
    # The build type or date follows the version; at the end of the text the version may be cut.
    terminated = rest[:1].isspace() or line_end >= 0
    arch = _ARCH_FOR.search(module) or _ARCH_BEFORE.match(module)
    arch = arch.group("arch") if arch else None
    if not (terminated and arch == "aarch64" and _L4T_VERSION.fullmatch(version)):
        driver_version(version, PROC_TOOL, "NVRM version", terminated=terminated)
    if line_end < 0:
        raise cut_short(PROC_TOOL, "the build date of the NVRM version line", line)
    build = _BUILD.match(rest.strip())
    compiler = _GCC_LINE.search(whole_lines(text))
    return {
        "version": version,
        "flavor": "open" if re.search(r"\bOpen\b", module) else "proprietary",
        "arch": arch,
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


def _refuse_cut_field(text, tool, keys):
    """ParseError when the last line, which no newline ends, is ``key: value`` of one of ``keys``: the value may be cut short."""
    cut = cut_line(text)
    match = _KEY_VALUE.match(cut.strip()) if cut else None
    if match and match.group("key").strip() in keys:
        raise cut_short(tool, f"{match.group('key').strip()}:", cut)


# The modinfo fields parse_modinfo returns (a cut "parm:" or "alias:" line changes nothing read).
_MODINFO_KEYS = frozenset(("version", "license", "filename", "firmware", "vermagic", "srcversion", "depends", "signer"))


def parse_modinfo(text):
    """``modinfo nvidia`` -> ``{"version", "license", "flavor", "filename", "firmware", "vermagic",
    "srcversion", "depends", "signer"}``.

    ``flavor`` comes from the license ("Dual MIT/GPL": open, "NVIDIA": proprietary; None when the
    line is missing). ``firmware`` and ``depends`` are lists. A damaged paste (a key cut short)
    gives None for that field; a missing or malformed ``version`` raises ParseError, as does
    modinfo's own error message, and a field read here on a last line that no newline ends (it may be
    cut short: ``license: Dual MIT/G``) unless it is a whole version.
    """
    _refuse_cut_field(text, "modinfo nvidia", _MODINFO_KEYS - {"version"})  # the version has its own rule
    fields = {}
    version_terminated = False
    for line in (text or "").splitlines(keepends=True):
        match = _KEY_VALUE.match(line.rstrip("\r\n"))
        if match:
            key = match.group("key").strip()
            if key == "version" and key not in fields:
                version_terminated = line.endswith(("\n", "\r"))  # a last line without newline may be cut
            fields.setdefault(key, []).append(match.group("value").strip())
    if not fields:
        raise ParseError(f"modinfo nvidia: no 'key: value' lines in output: {(text or '').strip()[:200]!r}")
    version = text_or_none((fields.get("version") or [None])[0])
    if version is None:
        first_line = (text or "").strip().splitlines()[0]
        raise ParseError(f"modinfo nvidia: no 'version:' line (module not found, or output damaged): {first_line[:200]!r}")
    driver_version(version, "modinfo nvidia", "version", terminated=version_terminated)
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


_LSMOD_LINE = re.compile(r"^(?P<module>[\w-]+)\s+(?P<size>\d+)\s+(?P<count>-?\d+)(?:\s+(?P<used_by>\S.*))?$")


def parse_lsmod(text):
    """``lsmod`` -> ``{module: {"size", "used_by_count", "used_by": [...]}}``.

    ``used_by`` lists the modules named in the last column (``[permanent]`` and similar markers
    are left out); ``used_by_count`` is the kernel's count, which also counts open file handles.
    Raises ParseError on an empty output, a line that is not an lsmod row, or a last row without its
    newline (a count or a user cut short, or the modules after it missing).
    """
    cut = cut_line(text)
    if cut and cut.strip():
        raise cut_short("lsmod", f"module {cut.split()[0]!r}", cut)
    modules = {}
    header = False
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        if re.match(r"^Module\s+Size\s+Used by", line):
            header = True
            continue
        match = _LSMOD_LINE.match(line.rstrip())
        if not match:
            raise ParseError(f"lsmod: cannot read line {line.strip()!r}")
        used_by = [name for name in (match.group("used_by") or "").strip().split(",") if name and not name.startswith("[")]
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
_GPU_INFO_TOOL = "/proc/driver/nvidia/gpus/*/information"
# A VBIOS version is five hex pairs (86.02.40.00.48, 96.00.74.00.0D): "86.0" is a cut-off one.
_VBIOS = re.compile(r"[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f]{2}){4}")


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
    Fields a driver does not print are None. Raises ParseError without any ``Model:`` line, or with a
    field on a last line that no newline ends (``Bus Location: 0000:17:0`` may be cut short).
    """
    _refuse_cut_field(text, _GPU_INFO_TOOL, _GPU_INFO_KEYS)
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
        elif key == "vbios_version" and value is not None and not _VBIOS.fullmatch(value):
            raise ParseError(
                f"{_GPU_INFO_TOOL}: Video BIOS {value!r} is not a whole VBIOS version (five hex pairs, for example 96.00.74.00.0D): "
                "the output may be cut short"
            )
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

    Raises ParseError without an ``NVRM version:`` line holding a driver version, or with another field
    on a last line that no newline ends (``CUDA version: 1`` may be cut from 12.0).
    """
    result = {"driver_version": None, "cuda_version": None, "devices": []}
    _refuse_cut_field(text, "nvidia-container-cli info", {"CUDA version", *_CONTAINER_DEVICE_KEYS})  # NVRM version: its own rule
    terminated = False
    for line in (text or "").splitlines(keepends=True):
        match = _KEY_VALUE.match(line.strip())
        if not match:
            continue
        key, value = match.group("key"), text_or_none(match.group("value"))
        if key == "NVRM version":
            result["driver_version"] = value
            terminated = line.endswith(("\n", "\r"))  # a last line without newline may be cut
        elif key == "CUDA version":
            result["cuda_version"] = value
        elif key in _CONTAINER_DEVICE_KEYS:
            if key == "Device Index":
                result["devices"].append(dict.fromkeys(_CONTAINER_DEVICE_KEYS.values()))
            if not result["devices"]:
                continue
            name = _CONTAINER_DEVICE_KEYS[key]
            result["devices"][-1][name] = number_or_none(value) if name in ("index", "minor") else value
    if not result["driver_version"]:
        raise ParseError("nvidia-container-cli info: no 'NVRM version: <driver version>' line")
    driver_version(result["driver_version"], "nvidia-container-cli info", "NVRM version", terminated=terminated)
    return result


PARAMS_TOOL = "/proc/driver/nvidia/params"
# "CoherentGPUMemoryMode: "driver"" / "ResmanDebugLevel: 4294967295"
_PARAM = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9_]*):[ \t]*(?P<value>.*?)[ \t]*$")
# A shell prompt kept in a capture ("$ grep Coherent /proc/driver/nvidia/params"): not the file.
_PROMPT = re.compile(r"^[$#][ \t]")


def parse_nvidia_params(text):
    """``/proc/driver/nvidia/params`` (the loaded driver's module parameters) -> ``{"params", "cdmm_mode", "cdmm"}``.

    ``params``: every ``Name: value`` line, quotes removed from a quoted value. ``cdmm_mode``: the
    value of ``CoherentGPUMemoryMode`` (R580+, ``NVreg_CoherentGPUMemoryMode``), None when the driver
    does not print it; ``cdmm``: True when that mode is ``driver`` (coherent driver-based memory
    management: the GPU memory is no NUMA node the kernel can hand out). A shell prompt line of a
    capture is skipped. ParseError naming the line for anything else, a quote left open, an empty
    output, or a last line that no newline ends (a value may be cut: ``"driv`` of ``"driver"``).
    """
    text = text or ""
    last = cut_line(text)
    if last is not None and last.strip():
        raise cut_short(PARAMS_TOOL, "the last parameter", last)
    params = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or _PROMPT.match(line):
            continue
        match = _PARAM.match(line)
        if not match:
            raise ParseError(f"{PARAMS_TOOL}: line {number} {line[:80]!r} is not 'Name: value'")
        value = match.group("value")
        if value.startswith('"'):
            if len(value) < 2 or not value.endswith('"'):
                raise ParseError(f"{PARAMS_TOOL}: {match.group('key')} {value[:40]!r} has no closing quote: the output is garbled")
            value = value[1:-1]
        params[match.group("key")] = value
    if not params:
        raise ParseError(f"{PARAMS_TOOL}: no 'Name: value' line")
    mode = params.get("CoherentGPUMemoryMode")
    return {"params": params, "cdmm_mode": mode, "cdmm": None if mode is None else mode.lower() == "driver"}
