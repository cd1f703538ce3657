"""Simulated Debian package tools: apt-get, apt-mark and dpkg-query, for the NVIDIA packages only.

They know exactly the packages the nvidia_driver module installs from NVIDIA's CUDA repository:
``nvidia-fabricmanager-<branch>``, ``nvidia-driver-<branch>[-open]`` and, on GB200 trays, ``nvidia-imex[-<branch>]``,
at the versions of
REPOSITORY (plus the node state's ``apt.extra_versions``), release ``-1``. Installing changes the
node state (fabric manager version, driver); ``apt-mark hold`` sets ``apt.held``. Anything else
(another package, another command) ends with a clear error: these tools shadow the real ones in the
node's /usr/local/bin, and a playbook must not silently install on the controller.

The dpkg database is derived from the node state, so it always agrees with what the other tools
report: the fabric manager package exists when the node has a fabric manager; the driver package
exists when the driver was installed by apt (``driver.method == "package"``).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import re
from pathlib import Path

from .. import catalog, secureboot
from .. import ofed as sim_ofed
from .. import state as st
from . import ofed
from ._common import err, fail, load, out, update

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any

# Published NVIDIA data-center driver versions the simulated CUDA repository offers: these, plus every
# Linux driver the collection's compatibility data knows (plugins/module_utils/_compat_data.py, CUDA's
# Table 3) on a branch from OLDEST_BRANCH on, so that any BOM the compatibility filters accept installs here.
_PUBLISHED = (
    "535.161.08", "535.183.01", "535.216.03", "550.54.15", "550.90.07", "550.127.05", "550.144.03",
    "550.163.01", "560.35.03", "565.57.01", "570.86.15", "570.124.06", "570.133.20", "570.148.08",
    "575.57.08", "580.65.06", "580.82.07",
)
OLDEST_BRANCH = 535
COMPAT_DATA = Path(__file__).resolve().parents[3] / "plugins" / "module_utils" / "_compat_data.py"


def _compat_releases(path: Path = COMPAT_DATA) -> tuple[str, ...]:
    """The Linux drivers of the compatibility data's toolkit table (a data-only module, read by path)."""
    spec = importlib.util.spec_from_file_location("gpusim_compat_data", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(row[2] for row in module.TOOLKIT_DRIVER_ROWS if row[2])


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


REPOSITORY = tuple(sorted({v for v in (*_PUBLISHED, *_compat_releases()) if _vkey(v)[0] >= OLDEST_BRANCH}, key=_vkey))
RELEASE = "1"
ARCH = "amd64"
FM = re.compile(r"^nvidia-fabricmanager-(?P<branch>\d+)$")
DRIVER = re.compile(r"^nvidia-driver-(?P<branch>\d+)(?P<open>-open)?$")
# nvidia-imex-570 (the R570 name, gpu-driver-container PR 200) and nvidia-imex (R580 on: `nvidia-imex=<driver version>`).
IMEX = re.compile(r"^nvidia-imex(?:-(?P<branch>\d+))?$")
SIMULATED = "gpusim simulates only nvidia-fabricmanager-<branch>, nvidia-driver-<branch>[-open] and nvidia-imex[-<branch>]"
APT_HEAD = "Reading package lists...\nBuilding dependency tree...\nReading state information..."


class AptError(Exception):
    """An apt-get / apt-mark failure: message lines (E: ...) and exit code 100."""


def _apt(state: dict[str, Any]) -> dict[str, Any]:
    data = state.setdefault("apt", {})
    data.setdefault("held", [])
    data.setdefault("extra_versions", [])
    return data


def available(state: dict[str, Any], name: str) -> list[str]:
    """Versions (upstream, without release) of a simulated package in the repository, oldest first."""
    match = FM.match(name) or DRIVER.match(name) or IMEX.match(name)
    if not match:
        return []
    versions = set(REPOSITORY) | set(_apt(state)["extra_versions"])
    return sorted((v for v in versions if match.group("branch") in (None, str(catalog.branch(v)))), key=_vkey)


def imex_package(state: dict[str, Any]) -> str | None:
    """The installed IMEX package's name (nvidia-imex-<branch> before R580, nvidia-imex after), None without IMEX."""
    imex = state.get("imex") or {}
    if not imex.get("version"):
        return None
    return imex.get("package") or ("nvidia-imex" if catalog.branch(imex["version"]) >= 580 else f"nvidia-imex-{catalog.branch(imex['version'])}")


def installed(state: dict[str, Any]) -> dict[str, str]:
    """The dpkg database: {package: "<version>-<release>"} of the installed simulated packages."""
    pkgs: dict[str, str] = {}
    fm = state.get("fabricmanager")
    if fm and (fm.get("staged") or fm.get("version")):
        version = fm.get("staged") or fm["version"]
        pkgs[f"nvidia-fabricmanager-{catalog.branch(version)}"] = f"{version}-{RELEASE}"
    drv = state["driver"]
    staged = drv.get("staged") or {}
    if (staged.get("method") or drv.get("method")) == "package":
        version = staged.get("version") or drv["version"]
        flavor = staged.get("flavor") or drv["flavor"]
        if version:
            suffix = "-open" if flavor == "open" else ""
            pkgs[f"nvidia-driver-{catalog.branch(version)}{suffix}"] = f"{version}-{RELEASE}"
    if imex_package(state):
        pkgs[imex_package(state)] = f"{state['imex']['version']}-{RELEASE}"
    return pkgs


# --- dpkg-query ----------------------------------------------------------------------------------

DEFAULT_FORMAT = "${binary:Package}\\t${Version}\\n"


def _unescape(fmt: str) -> str:
    return fmt.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")


def _field(state: dict[str, Any], name: str, version: str, field: str) -> str:
    held = name in _apt(state)["held"]
    values = {
        "Package": name, "binary:Package": name, "Version": version, "Architecture": ARCH,
        "db:Status-Abbrev": ("h" if held else "i") + "i ", "db:Status-Want": "hold" if held else "install",
        "db:Status-Status": "installed", "db:Status-Eflag": "ok",
        "Status": ("hold" if held else "install") + " ok installed", "Maintainer": "cudatools <cudatools@nvidia.com>",
        "Source": name, "Section": "multiverse/devel", "Priority": "optional",
    }
    return values.get(field, "")


def _format(state: dict[str, Any], fmt: str, name: str, version: str) -> str:
    def sub(match: re.Match[str]) -> str:
        text = _field(state, name, version, match.group(1))
        width = match.group(2)
        if width:
            n = int(width)
            text = text.rjust(n) if n > 0 else text.ljust(-n)  # like printf: negative widths align left
        return text

    return re.sub(r"\$\{([^};]+)(?:;(-?\d+))?\}", sub, _unescape(fmt))


def dpkg_query_main(argv: list[str]) -> int:
    mode = None
    fmt = DEFAULT_FORMAT
    patterns: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("-W", "--show"):
            mode = "show"
        elif a in ("-s", "--status"):
            mode = "status"
        elif a in ("-f", "--showformat"):
            fmt = next(it, "")
        elif a.startswith(("-f=", "--showformat=")):
            fmt = a.split("=", 1)[1]
        elif a.startswith("-f") and len(a) > 2:
            fmt = a[2:]
        elif a.startswith("-"):
            fail(f"dpkg-query: error: unknown option {a} ({SIMULATED}: -W [-f FORMAT] and -s)\n\n"
                 "Type dpkg-query --help for help about querying packages.", 2)
        else:
            patterns.append(a)
    if mode is None:
        fail("dpkg-query: error: need an action option\n\nType dpkg-query --help for help about querying packages.", 2)
    if not patterns:
        fail(f"dpkg-query: error: --{mode} needs at least one package name argument ({SIMULATED})", 2)
    if mode == "show" and all(ofed.is_ofed_package(p) for p in patterns):
        return ofed.dpkg_query(patterns, fmt)  # DOCA-OFED and mlnx-fw-updater (tools/ofed.py, issue 24)
    for p in patterns:
        if not p.startswith("nvidia-"):
            fail(f"dpkg-query: error: package pattern '{p}' is not simulated: {SIMULATED}", 2)
    state = load()
    pkgs = installed(state)
    rc = 0
    chunks: list[str] = []
    for p in patterns:
        names = sorted(n for n in pkgs if fnmatch.fnmatchcase(n, p))
        if not names:
            if mode == "status":
                err(f"dpkg-query: package '{p}' is not installed and no information is available")
            else:
                err(f"dpkg-query: no packages found matching {p}")
            rc = 1
            continue
        for n in names:
            if mode == "show":
                chunks.append(_format(state, fmt, n, pkgs[n]))
            else:
                chunks.append(f"Package: {n}\nStatus: {_field(state, n, pkgs[n], 'Status')}\nPriority: optional\n"
                              f"Section: multiverse/devel\nMaintainer: cudatools <cudatools@nvidia.com>\n"
                              f"Architecture: {ARCH}\nVersion: {pkgs[n]}\n\n")
    out("".join(chunks), end="")
    return rc


# --- apt-mark ------------------------------------------------------------------------------------

def apt_mark_main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("-")]
    if not args:
        fail("E: No command given (apt-mark hold|unhold|showhold)", 100)
    verb, names = args[0], args[1:]
    if verb == "showhold":
        state = load()
        held = [n for n in sorted(installed(state)) if n in _apt(state)["held"]]
        out("\n".join(held), end="\n" if held else "")
        return 0
    if verb not in ("hold", "unhold"):
        fail(f"E: Invalid operation {verb} ({SIMULATED}: hold, unhold, showhold)", 100)
    if not names:
        fail(f"E: No packages found ({verb} needs package names)", 100)
    for n in names:
        if not (FM.match(n) or DRIVER.match(n) or IMEX.match(n)):
            fail(f"E: Unable to locate package {n} ({SIMULATED})", 100)

    def _mark(s: dict[str, Any]) -> list[str]:
        held = _apt(s)["held"]
        lines = []
        for n in names:
            if verb == "hold":
                if n in held:
                    lines.append(f"{n} was already set on hold.")
                else:
                    held.append(n)
                    lines.append(f"{n} set on hold.")
            elif n in held:
                held.remove(n)
                lines.append(f"Canceled hold on {n}.")
            else:
                lines.append(f"{n} was already not on hold.")
        return lines

    out("\n".join(update(_mark)))
    return 0


# --- apt-get ------------------------------------------------------------------------------------

OPTS = {"-y", "--yes", "--assume-yes", "-q", "-qq", "--quiet", "--allow-change-held-packages", "--allow-downgrades",
        "--no-install-recommends", "-s", "--simulate", "--dry-run", "--purge", "-f", "--fix-broken"}


def _plan(state: dict[str, Any], specs: list[str]) -> list[tuple[str, str, str | None]]:
    """[(name, version, replaced package or None)] for `apt-get install specs`; AptError when apt would refuse."""
    pkgs = installed(state)
    result = []
    for spec in specs:
        name, eq, wanted = spec.partition("=")
        if not (FM.match(name) or DRIVER.match(name) or IMEX.match(name)):
            raise AptError(f"E: Unable to locate package {name}\n({SIMULATED}; this node's apt-get is simulated)")
        versions = available(state, name)
        if eq:
            upstream, _, release = wanted.rpartition("-")
            if not upstream or release != RELEASE or upstream not in versions:
                raise AptError(f"E: Version '{wanted}' for '{name}' was not found")
            version = upstream
        elif versions:
            version = versions[-1]
        else:
            raise AptError(f"E: Package '{name}' has no installation candidate")
        kind = FM if FM.match(name) else IMEX if IMEX.match(name) else DRIVER
        replaced = next((p for p in pkgs if kind.match(p) and p != name), None)
        result.append((name, version, replaced))
    return result


def _dkms_failure(state: dict[str, Any], name: str, version: str) -> str:
    kernel = state["kernel"]
    dkms = name.replace("nvidia-driver-", "nvidia-dkms-")
    return (f"Setting up {dkms} ({version}-{RELEASE}) ...\n"
            f"Loading new nvidia-{version} DKMS files...\nBuilding for {kernel}\nBuilding initial module for {kernel}\n"
            f"Error! Bad return status for module build on kernel: {kernel} (x86_64)\n"
            f"Consult /var/lib/dkms/nvidia/{version}/build/make.log for more information.\n"
            f"dpkg: error processing package {dkms} (--configure):\n"
            f" installed {dkms} package post-installation script subprocess returned error exit status 10\n"
            f"Errors were encountered while processing:\n {dkms}\n")


def _install(argv_opts: set[str], specs: list[str]) -> int:
    state = load()
    try:
        plan = _plan(state, specs)
    except AptError as exc:
        out(APT_HEAD)
        fail(str(exc), 100)
    pkgs = installed(state)
    held = _apt(state)["held"]
    new, upgraded, downgraded, removed, same = [], [], [], [], []
    for name, version, replaced in plan:
        current = pkgs.get(name)
        if replaced:
            removed.append(replaced)
        if current is None:
            new.append((name, version))
        elif current == f"{version}-{RELEASE}":
            same.append((name, version))
        elif _vkey(version) < _vkey(current):
            downgraded.append((name, version))
        else:
            upgraded.append((name, version))
    lines = [APT_HEAD]
    changed_held = [n for n, _v in upgraded + downgraded if n in held] + [n for n in removed if n in held]
    for n, v in same:
        lines.append(f"{n} is already the newest version ({v}-{RELEASE}).")
    if removed:
        lines += ["The following packages will be REMOVED:", "  " + " ".join(removed)]
    if new:
        lines += ["The following NEW packages will be installed:", "  " + " ".join(n for n, _v in new)]
    if changed_held:
        lines += ["The following held packages will be changed:", "  " + " ".join(changed_held)]
    if upgraded:
        lines += ["The following packages will be upgraded:", "  " + " ".join(n for n, _v in upgraded)]
    if downgraded:
        lines += ["The following packages will be DOWNGRADED:", "  " + " ".join(n for n, _v in downgraded)]
    down = f"{len(downgraded)} downgraded, " if downgraded else ""  # apt prints the count only when there are some
    lines.append(f"{len(upgraded)} upgraded, {len(new)} newly installed, {down}{len(removed)} to remove and 0 not upgraded.")
    out("\n".join(lines))
    if changed_held and "--allow-change-held-packages" not in argv_opts:
        fail("E: Held packages were changed and -y was used without --allow-change-held-packages.", 100)
    if downgraded and "--allow-downgrades" not in argv_opts:
        fail("E: Packages were downgraded and -y was used without --allow-downgrades.", 100)
    if argv_opts & {"-s", "--simulate", "--dry-run"}:
        return 0
    work = [(n, v) for n, v in new + upgraded + downgraded]
    for name, version in work:
        if DRIVER.match(name) and (st.dkms_fails(state, version) or st.fault(state, "headers_missing")
                                   or not state.get("kernel_headers", True)):
            out(f"Unpacking {name} ({version}-{RELEASE}) ...")
            err(_dkms_failure(state, name, version), end="")
            fail("E: Sub-process /usr/bin/dpkg returned an error code (1)", 100)
    signature = secureboot.dkms_signature()  # the driver packages' modules are built and signed by DKMS

    def _apply(s: dict[str, Any]) -> None:
        apt = _apt(s)
        for gone in removed:
            if gone in apt["held"]:
                apt["held"].remove(gone)
        for name, version in work:
            if FM.match(name):
                s["fabricmanager"] = {"version": version, "staged": None}
                s["services"]["nvidia-fabricmanager"]["enabled"] = True
                continue
            if IMEX.match(name):
                # The binary is replaced; the running daemon keeps its version until it is restarted.
                s.setdefault("imex", {}).update(version=version, package=name)
                s["services"].setdefault("nvidia-imex", {"enabled": True, "active": False, "since": 0, "pid": 5100, "failed_reason": None})
                continue
            flavor = "open" if DRIVER.match(name).group("open") else "proprietary"
            new_driver = {"version": version, "flavor": flavor, "method": "package", "dkms": True, "built": True,
                          "build_date": st._build_date(version), "signature": signature,
                          "peermem_ofed": sim_ofed.identity(s)}  # nvidia_peermem builds against the installed OFED (issue 24)
            if st.driver_loaded(s):
                # The running module stays; the new one is loaded at the next boot (or after a reload).
                s["driver"]["staged"] = new_driver
            else:
                s["driver"].update(new_driver, staged=None)
                s["services"]["nvidia-persistenced"]["enabled"] = True

    update(_apply)
    for name in removed:
        out(f"Removing {name} ...")
    for name, version in work:
        out(f"Setting up {name} ({version}-{RELEASE}) ...")
    return 0


def _remove(argv_opts: set[str], names: list[str]) -> int:
    state = load()
    pkgs = installed(state)
    held = _apt(state)["held"]
    for n in names:
        if not (FM.match(n) or DRIVER.match(n) or IMEX.match(n)):
            out(APT_HEAD)
            fail(f"E: Unable to locate package {n}\n({SIMULATED}; this node's apt-get is simulated)", 100)
    gone = [n for n in names if n in pkgs]
    lines = [APT_HEAD] + [f"Package '{n}' is not installed, so not removed" for n in names if n not in pkgs]
    if gone:
        lines += ["The following packages will be REMOVED:", "  " + " ".join(gone)]
    lines.append(f"0 upgraded, 0 newly installed, {len(gone)} to remove and 0 not upgraded.")
    out("\n".join(lines))
    if any(n in held for n in gone) and "--allow-change-held-packages" not in argv_opts:
        fail("E: Held packages were changed and -y was used without --allow-change-held-packages.", 100)
    if not gone or argv_opts & {"-s", "--simulate", "--dry-run"}:
        return 0

    def _apply(s: dict[str, Any]) -> None:
        apt = _apt(s)
        for n in gone:
            if n in apt["held"]:
                apt["held"].remove(n)
            if FM.match(n):
                s["fabricmanager"] = None
                s["services"]["nvidia-fabricmanager"].update(enabled=False, active=False)
            elif IMEX.match(n):
                s["imex"] = {"version": None}
                s["services"]["nvidia-imex"].update(enabled=False, active=False)
            else:
                s["driver"].update(version=None, method=None, staged=None, loaded=False)
                s["modules"] = []
                s["services"]["nvidia-persistenced"].update(active=False)

    update(_apply)
    for n in gone:
        out(f"Removing {n} ({pkgs[n]}) ...")
    return 0


def apt_get_main(argv: list[str]) -> int:
    opts: set[str] = set()
    words: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "-o":
            next(it, None)  # -o Dpkg::Options::=... : accepted, no effect here
        elif a.startswith("-o"):
            continue
        elif a in OPTS:
            opts.add(a)
        elif a.startswith("-"):
            fail(f"E: Command line option '{a}' is not understood in combination with the other options", 100)
        else:
            words.append(a)
    if not words:
        fail("E: Invalid operation (no command given)", 100)
    verb, names = words[0], words[1:]
    if verb in ("install", "remove", "purge") and names and any(ofed.is_ofed_package(n) for n in names):
        return ofed.apt_main(verb, names)  # DOCA-OFED and mlnx-fw-updater (tools/ofed.py, issue 24)
    if verb == "update":
        out("Reading package lists...")
        return 0
    if verb == "install":
        if not names:
            out(APT_HEAD)
            out("0 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.")
            return 0
        return _install(opts, names)
    if verb in ("remove", "purge"):
        return _remove(opts, names)
    fail(f"E: Invalid operation {verb} ({SIMULATED}: install, remove, purge, update)", 100)
    return 100
