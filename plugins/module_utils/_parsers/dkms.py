# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parser of ``dkms status`` (private: may change without notice).

DKMS 2.x prints ``nvidia, 396.45, 4.17.14-202.fc28.x86_64, x86_64: installed``; DKMS 3.x
``nvidia/535.86.05, 6.5.0-060500rc5-generic, x86_64: installed``. A module only added (not built) has
no kernel: ``nvidia/535.86.05: added``. A state may carry a note in brackets (``(original_module
exists)``, ``(WARNING! Diff between built and installed module!)``). A broken DKMS tree prints
``Error! ...`` lines (``Could not locate dkms.conf file.`` and the ``File: ...`` line after it).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, whole_lines

TOOL = "dkms status"

STATES = ("added", "built", "installed", "installed-weak", "broken")
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.+-]*"
_VERSION = r"[A-Za-z0-9][A-Za-z0-9_.+~-]*"
_TAIL = r"(?::[ \t]*(?P<state>[a-z][a-z-]*)(?:[ \t]+\((?P<note>[^)]*)\))?)[ \t]*$"
_NEW = re.compile(rf"^(?P<module>{_NAME})/(?P<version>{_VERSION})(?:,[ \t]*(?P<kernel>[^,\s]+),[ \t]*(?P<arch>[^,:\s]+))?{_TAIL}")
_OLD = re.compile(rf"^(?P<module>{_NAME}),[ \t]*(?P<version>{_VERSION})(?:,[ \t]*(?P<kernel>[^,\s]+),[ \t]*(?P<arch>[^,:\s]+))?{_TAIL}")
_ERROR = re.compile(r"^Error!?[ \t]+(?P<message>.*\S)[ \t]*$")
_CONTINUATION = re.compile(r"^(?:File|Path):[ \t]*\S")


def parse_status(text):
    """``dkms status`` -> ``{"modules": [{"module", "version", "kernel", "arch", "state", "note", "format"}], "errors": [...]}``.

    ``kernel`` / ``arch``: None for an ``added`` module; ``format``: ``dkms2`` (commas) or ``dkms3``
    (slash). ``errors``: the ``Error!`` messages of a broken tree, each with the line that names the file.
    Other lines (a prompt) are skipped; a last line that no newline ends is not read (it may be cut:
    ``installed`` read as ``install``). ParseError when a state is not one of DKMS's, or when nothing of
    dkms status is printed at all.
    """
    modules, errors = [], []
    for line in whole_lines(text or "").splitlines():
        match = _NEW.match(line)
        form = "dkms3"
        if not match:
            match = _OLD.match(line)
            form = "dkms2"
        if match:
            state = match.group("state")
            if state not in STATES:
                raise ParseError(f"{TOOL}: {match.group('module')}/{match.group('version')}: state {state!r} is not one DKMS prints ({', '.join(STATES)})")
            if state != "added" and match.group("kernel") is None:
                raise ParseError(f"{TOOL}: {match.group('module')}/{match.group('version')} is {state} but names no kernel")
            modules.append(
                {
                    "module": match.group("module"),
                    "version": match.group("version"),
                    "kernel": match.group("kernel"),
                    "arch": match.group("arch"),
                    "state": state,
                    "note": match.group("note"),
                    "format": form,
                }
            )
            continue
        error = _ERROR.match(line)
        if error:
            errors.append(error.group("message"))
        elif errors and _CONTINUATION.match(line):
            errors[-1] = f"{errors[-1]} {line.strip()}"
    if not modules and not errors and (text or "").strip():
        raise ParseError(f"{TOOL}: no '<module>/<version>, <kernel>, <arch>: <state>' line in {(text or '').strip()[:200]!r}")
    return {"modules": modules, "errors": errors}


def kernels_of(status, module):
    """``{"installed": [kernels], "versions": [versions]}`` of ``module`` in a parse_status result (installed on which kernels)."""
    entries = [entry for entry in status.get("modules", []) if entry["module"] == module]
    return {
        "installed": sorted({entry["kernel"] for entry in entries if entry["state"] in ("installed", "installed-weak") and entry["kernel"]}),
        "versions": sorted({entry["version"] for entry in entries}),
    }
