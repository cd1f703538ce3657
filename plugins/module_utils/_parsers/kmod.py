# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parsers of ``lsmod`` and ``modinfo <module>`` (private: may change without notice).

The stack checks read them for ``nvidia_peermem`` (GPUDirect RDMA, shipped with the driver since R470),
``mlx5_core`` (inbox, MLNX_OFED or DOCA-OFED: its path, version and signer tell which) and the NVIDIA
modules: whether each is loaded, its version, and who signed it (under Secure Boot the kernel refuses
a module that no enrolled key signed).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, whole_lines

LSMOD = "lsmod"
MODINFO = "modinfo"

_LSMOD_LINE = re.compile(r"^(?P<name>[A-Za-z0-9_]+)[ \t]+(?P<size>[0-9]+)[ \t]+(?P<count>-?[0-9]+)(?:[ \t]+(?P<users>\S+))?[ \t]*$")
_LSMOD_HEADER = re.compile(r"^Module[ \t]+Size[ \t]+Used by[ \t]*$", re.MULTILINE)
_MODINFO_LINE = re.compile(r"^(?P<key>[a-z_]+):[ \t]*(?P<value>.*?)[ \t]*$")
# A module version: 1.0-8, 5.0-0, 23.10-1.1.9, 580.95.05, 24.10.OFED.24.10.1.1.4.1. Never a bracket or a blank.
_MODULE_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+~_-]*")


def parse_lsmod(text):
    """``lsmod`` (or lines of it, as ``lsmod | grep`` prints them) -> ``{name: {"size", "used_by_count", "used_by"}}``.

    Lines that are not module lines (the header, a prompt) are skipped; a last line that no newline ends
    is not read (it may be cut: ``nvidia_peer`` of nvidia_peermem). ParseError when a line names a
    module twice.
    """
    modules = {}
    for line in whole_lines(text or "").splitlines():
        match = _LSMOD_LINE.match(line)
        if not match:
            continue
        name = match.group("name")
        if name in modules:
            raise ParseError(f"{LSMOD}: module {name!r} is listed twice: the output is not one lsmod")
        users = match.group("users")
        modules[name] = {
            "size": int(match.group("size")),
            "used_by_count": int(match.group("count")),
            "used_by": [user for user in (users or "").strip(",").split(",") if user and user != "-"],
        }
    return modules


def lsmod_has_header(text):
    """True when ``text`` holds lsmod's ``Module  Size  Used by`` header (a whole lsmod, not a grep of it)."""
    return bool(_LSMOD_HEADER.search(text or ""))


def parse_modinfo(text):
    """``modinfo <module>`` -> ``{"name", "filename", "version", "vermagic", "srcversion", "depends", "signer", "sig_key", "signed"}``.

    ``signer`` / ``sig_key``: None when modinfo prints none or an empty one (a module built without a
    signing key: ``signat: PKCS#7`` with an empty signer is unsigned). ``version``: None for modules that
    carry none (many inbox ones). ParseError when no ``filename:`` line is printed, when two modules'
    output is given, or when the version is not one (a garbled copy such as ``[   5.0-0]``).
    """
    fields = {}
    for line in whole_lines(text or "").splitlines():
        match = _MODINFO_LINE.match(line)
        if not match:
            continue
        key, value = match.group("key"), match.group("value")
        if key == "filename" and "filename" in fields:
            raise ParseError(f"{MODINFO}: two 'filename:' lines ({fields['filename']!r} and {value!r}): the output of one module was expected")
        if key in ("parm", "alias", "firmware"):
            continue  # repeated lines the checks do not read
        fields.setdefault(key, value)
    if "filename" not in fields:
        raise ParseError(f"{MODINFO}: no 'filename:' line in {(text or '').strip()[:200]!r}: modinfo found no such module")
    filename = fields["filename"]
    if not filename.startswith("/") and filename != "(builtin)":
        raise ParseError(f"{MODINFO}: filename {filename!r} is not a module path")
    version = fields.get("version") or None
    if version is not None and not _MODULE_VERSION.fullmatch(version):
        raise ParseError(f"{MODINFO}: version {version!r} is not a module version (for example 23.10-1.1.9 or 580.95.05)")
    name = fields.get("name") or re.sub(r"\.ko(?:\.[a-z]+)?$", "", filename.rsplit("/", 1)[-1])
    signer = fields.get("signer") or None
    depends = fields.get("depends")
    return {
        "name": name,
        "filename": filename,
        "version": version,
        "vermagic": fields.get("vermagic") or None,
        "srcversion": fields.get("srcversion") or None,
        "depends": [item for item in (depends or "").split(",") if item],
        "signer": signer,
        "sig_key": fields.get("sig_key") or None,
        "signed": signer is not None,
    }


# The module loader's refusals (kernel/module/main.c): a symbol no loaded module exports, or one exported with another CRC.
_SYMBOL_ERROR = re.compile(
    r"(?:^|[\s\]:;])(?P<module>[A-Za-z0-9_-]{1,64}): (?:Unknown symbol (?P<unknown>[A-Za-z0-9_.$]{1,128}) \(err (?P<err>-?[0-9]{1,6})\)"
    r"|disagrees about version of symbol (?P<version>[A-Za-z0-9_.$]{1,128}))[ \t]*$"
)


def parse_symbol_errors(text):
    """Kernel log text -> ``[{"module", "symbol", "problem": "unknown" | "version", "err"}]``, in log order, repeats kept.

    The loader's lines for a module that could not be linked (``nvidia_peermem: Unknown symbol
    ib_register_peer_memory_client (err -2)``, ``... disagrees about version of symbol ...``), whatever time stamp or
    syslog prefix comes before them; ``module`` is spelled as lsmod spells it (underscores). A last line that no newline
    ends is not read. Never raises on other text: a log without such a line gives [].
    """
    errors = []
    for line in whole_lines(text or "").splitlines():
        match = _SYMBOL_ERROR.search(line)
        if not match:
            continue
        unknown = match.group("unknown")
        errors.append(
            {
                "module": match.group("module").replace("-", "_"),
                "symbol": unknown or match.group("version"),
                "problem": "unknown" if unknown else "version",
                "err": int(match.group("err")) if unknown else None,
            }
        )
    return errors


def symbol_provider(modules_symbols, symbol):
    """The module that exports ``symbol`` per ``/lib/modules/<kernel>/modules.symbols`` (``alias symbol:NAME MODULE``), or None.

    ``ib_register_peer_memory_client`` is exported by OFED's ib_uverbs / ib_core only: None on the inbox RDMA stack.
    """
    match = re.search(rf"^alias symbol:{re.escape(symbol)}[ \t]+(?P<module>[A-Za-z0-9_-]+)[ \t]*$", modules_symbols or "", re.MULTILINE)
    return match.group("module") if match else None
