# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_validate's checks of the stack around the driver: RDMA ports, nvidia-peermem, DCGM's host engine (private).

Driven by the BOM's ``stack`` (the ``expected_stack`` option, normalised by _bom_stack): ``ib_ports`` judges the
``rdma_ports`` groups, ``peermem`` runs where ``peermem: true``, ``dcgm`` where the BOM names a DCGM version or the
check is asked for by name; otherwise each is a skip that says why. The reads are the audit's (_facts/stack.StackReader:
ibstat or ibv_devinfo, lsmod, modinfo; ``dcgmi -v``), each bounded by ``command_timeout``. The verdicts are the pure
``*_verdict`` functions (table tests: tests/unit/plugins/module_utils/_validate/test_validate_stack_*.py).
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _bom_stack
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts.stack import StackFactsError, StackReader, module_facts
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import dcgm as dcgm_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import dcgm_version as dcgm_version_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import kmod as kmod_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import Dcgmi, Dmesg, ToolError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.common import FAIL, PASS, SKIP, WARN, check_result

PEERMEM = "nvidia_peermem"
# The peer-memory API that nvidia_peermem links against: exported by OFED's ib_core / ib_uverbs, absent from the inbox stack.
PEER_SYMBOL = "ib_register_peer_memory_client"
REBUILD = (
    "rebuild the driver's nvidia-peermem after OFED (dkms autoinstall, or the driver package / runfile again), "
    "then modprobe nvidia-peermem"
)


def _result(name, verdict):
    status, observed, expected, message = verdict
    return check_result(name, status, observed, expected, message)


def _tool(ctx, cls, option=None):
    """A wrapper of its own (not the cached one the load checks use), every call bounded by command_timeout."""
    tools = ctx.tools
    wrapper = cls(tools.module, path=tools.paths.get(option) if option else None, counter=tools.counter)
    wrapper.default_timeout = ctx.options["command_timeout"]
    return wrapper


def _reader(ctx):
    kernel = (ctx.facts or {}).get("kernel") or ctx.host.kernel_release()
    return StackReader(lambda cls, option: _tool(ctx, cls, option), ctx.host, kernel)


def _unreadable(name, exc, what, expected):
    """A failed check for a tool that printed what cannot be read, or did not finish: never a silent pass."""
    observed = {"error": exc.msg[:300]}
    if getattr(exc, "rc", None) is not None:
        observed["rc"] = exc.rc
    return check_result(
        name, FAIL, observed, expected,
        f"{exc.msg[:400]}: run {what} by hand on the node (a garbled or cut-off output, or a tool that hangs), or add {name} to skip_checks",
    )


# --------------------------------------------------------------------------- ib_ports


def _group_text(group):
    narrow = f" {group['ca_type']}" if group.get("ca_type") else ""
    devices = f" on {', '.join(group['devices'])}" if group.get("devices") else ""
    return f"{group['count']} x {group['link_layer']}{narrow} Active/LinkUp {group['rate']:g} Gb/s{devices}"


def _port_text(port):
    state = f"{port.get('state')}/{port.get('physical_state') or '?'}"
    return f"{state} {port['rate_gbps']:g} Gb/s" if port.get("rate_gbps") is not None else state


def _names(ports):
    return ", ".join(f"{p.get('device')}/{p.get('port')}" for p in ports)


def _port_problems(chosen, group, source):
    """Sentences for the ports of one group that are not Active / LinkUp at its rate, grouped by what is wrong."""
    by_state, by_rate, no_rate = {}, {}, []
    for port in chosen:
        if not port.get("active"):
            by_state.setdefault(f"{port.get('state')}/{port.get('physical_state') or '?'}", []).append(port)
        elif port.get("rate_gbps") is None:
            no_rate.append(port)
        elif port["rate_gbps"] != group["rate"]:
            by_rate.setdefault(port["rate_gbps"], []).append(port)
    problems = [
        f"{_names(ports)} {'is' if len(ports) == 1 else 'are'} {state}, not Active/LinkUp (the rate of a port that is not Active is not read): "
        "check the cable, the switch port and the subnet manager"
        for state, ports in by_state.items()
    ]
    problems += [
        f"{_names(ports)} {'runs' if len(ports) == 1 else 'run'} at {rate:g} Gb/s, {group['rate']:g} Gb/s expected: a degraded link "
        "(cable, transceiver, switch port)"
        for rate, ports in by_rate.items()
    ]
    if no_rate:
        problems.append(f"{_names(no_rate)}: {source} prints no rate, so it cannot be checked: install infiniband-diags (ibstat)")
    return problems


def ib_ports_verdict(rdma, groups):
    """``(status, observed, expected, message)`` of the BOM's port groups against the node's ports (StackReader.rdma()).

    Every port of a group must be Active / LinkUp at the group's rate, and the group must have exactly ``count`` ports.
    A port that is not Active fails naming its state (its rate is unknown); one at another rate names both rates; a
    device the group names but the node lacks is named. No rate (ibv_devinfo prints none) fails: it cannot be checked.
    Devices ibstat could not read (``ibpanic``) warn where everything the BOM names is there, else join the failure.
    """
    expected = [_group_text(group) for group in groups]
    if not groups:
        return SKIP, None, None, "the BOM names no InfiniBand / RoCE port (expected_stack.rdma_ports): nothing to check"
    source = rdma.get("source")
    if rdma.get("ports") is None:
        return FAIL, None, expected, "neither ibstat nor ibv_devinfo is installed: install infiniband-diags (ibstat), or add ib_ports to skip_checks"
    ports = [port for port in rdma["ports"] if isinstance(port, dict)]
    errors = [str(error)[:200] for error in rdma.get("errors") or []]
    observed = {"source": source, "ports": {f"{p.get('device')}/{p.get('port')}": _port_text(p) for p in ports}}
    if errors:
        observed["errors"] = errors
    problems = []
    for group in groups:
        chosen = _bom_stack.ports_of_group(ports, group)
        if len(chosen) != group["count"]:
            text = f"{_group_text(group)} expected, {source} lists {len(chosen)}"
            lacking = [device for device in group.get("devices") or [] if not any(p.get("device") == device for p in ports)]
            if lacking:
                text += f" (no {', '.join(lacking)} on this node)"
            elif not ports:
                text += " (no RDMA device registered: is the mlx5_ib driver loaded?)"
            problems.append(text)
        problems += _port_problems(chosen, group, source)
    said = f"; {source} also said: {'; '.join(errors)}" if errors else ""
    if problems:
        return FAIL, observed, expected, "; ".join(problems) + said
    if errors:
        return WARN, observed, expected, f"every port the BOM names is Active at its rate, but {source} could not read every device: {'; '.join(errors)}"
    total = sum(group["count"] for group in groups)
    return PASS, observed, expected, f"{total} port(s) Active/LinkUp at the BOM's rate and link layer ({source})"


def check_ib_ports(ctx):
    name = "ib_ports"
    groups = (ctx.options.get("expected_stack") or {}).get("rdma_ports") or []
    if not groups:
        return _result(name, ib_ports_verdict({}, groups))
    try:
        rdma = _reader(ctx).rdma()
    except (StackFactsError, ToolError) as exc:
        return _unreadable(name, exc, "ibstat", [_group_text(group) for group in groups])
    return _result(name, ib_ports_verdict(rdma, groups))


# --------------------------------------------------------------------------- peermem


def peermem_verdict(required, driver, module, kernel, sys_version=None, symbol_errors=None, peer_api=None):
    """``(status, observed, expected, message)`` of nvidia_peermem.

    ``driver``: gpu_facts' driver dict; ``module``: _facts/stack.module_facts of nvidia_peermem; ``sys_version``:
    /sys/module/nvidia_peermem/version (the loaded module's, preferred to modinfo's file on disk). Read only where it is
    not loaded: ``symbol_errors`` (kmod.parse_symbol_errors of the kernel log; None: not read) and ``peer_api`` (the
    module exporting ib_register_peer_memory_client per the kernel's modules.symbols; "" none, None: not read).
    """
    if not required:
        return SKIP, None, None, "the BOM does not require nvidia_peermem (expected_stack.peermem is not true)"
    driver = driver or {}
    driver_version = driver.get("version")
    expected = {"loaded": True, "version": driver_version}
    if not driver.get("loaded"):
        return FAIL, {"loaded": None}, expected, "the NVIDIA driver is not loaded, so nvidia_peermem cannot be (see the driver_version check)"
    if module.get("loaded") is None:
        return FAIL, {"loaded": None}, expected, "lsmod is not installed: whether nvidia_peermem is loaded is unknown; install kmod"
    if module["loaded"]:
        version = sys_version or module.get("version")
        source = "/sys/module/nvidia_peermem/version" if sys_version else "modinfo"
        observed = {"loaded": True, "version": version, "version_source": source if version else None}
        if version is None:
            why = "reports no version" if module.get("installed") else f"has no module file for kernel {kernel} any more (modinfo finds none)"
            return FAIL, observed, expected, f"nvidia_peermem is loaded but {why}: reboot to load the installed driver's modules"
        if version != driver_version:
            return FAIL, observed, expected, (
                f"nvidia_peermem {version} ({source}) is not the loaded driver's {driver_version}: reboot to load the installed driver's modules, "
                "or reinstall the driver (nvidia-peermem ships with it)"
            )
        return PASS, observed, expected, f"nvidia_peermem {version} loaded, the driver's"
    observed = {"loaded": False, "installed": bool(module.get("installed"))}
    unknown = sorted({e["symbol"] for e in symbol_errors or [] if e.get("module") == PEERMEM})
    if unknown:
        observed["kernel_log"] = [f"nvidia_peermem: Unknown symbol {symbol}" for symbol in unknown]
    if peer_api is not None:
        observed["peer_memory_api"] = peer_api or None
    if not module.get("installed"):
        return FAIL, observed, expected, (
            f"nvidia_peermem is not installed for kernel {kernel} (modinfo finds no such module): install the driver after OFED "
            "so that its build finds OFED's symbols and builds nvidia-peermem"
        )
    if unknown or peer_api == "":
        where = "the kernel log says 'Unknown symbol {}'".format(", ".join(unknown)) if unknown else "it is not loaded"
        if peer_api == "":
            return FAIL, observed, expected, (
                f"nvidia_peermem failed to load ({where}) and kernel {kernel} has no OFED peer-memory API ({PEER_SYMBOL} is not in "
                f"/lib/modules/{kernel}/modules.symbols: the inbox RDMA stack, e.g. a kernel update that OFED's modules were not built "
                f"for): install OFED's kernel modules for {kernel}, then {REBUILD}"
            )
        return FAIL, observed, expected, (
            f"nvidia_peermem failed to load ({where}): it was built against another RDMA stack than the one loaded "
            f"(the driver was built before OFED, or OFED changed since): {REBUILD}; if OFED was just installed, "
            "restart openibd (or reboot) first so that OFED's ib_core is the loaded one"
        )
    return FAIL, observed, expected, (
        "nvidia_peermem is installed but not loaded: modprobe nvidia-peermem (and list it in /etc/modules-load.d to load it at boot); "
        f"if that fails with 'Unknown symbol {PEER_SYMBOL}' or 'Invalid argument', the driver was built before OFED: {REBUILD}"
    )


def _load_failure_evidence(ctx, kernel):
    """(kernel log symbol errors or None, peer_api or None): what says why nvidia_peermem is not loaded. Never raises."""
    symbol_errors = None
    dmesg = _tool(ctx, Dmesg)
    if dmesg.available:
        try:
            rc, out, _err = dmesg.run([], ok_rcs=None)
        except ToolError:
            rc, out = None, ""
        if rc == 0:
            symbol_errors = kmod_parser.parse_symbol_errors(out)
    symbols = ctx.host.read("lib/modules", kernel, "modules.symbols") if kernel else None
    peer_api = None if symbols is None else (kmod_parser.symbol_provider(symbols, PEER_SYMBOL) or "")
    return symbol_errors, peer_api


def check_peermem(ctx):
    name = "peermem"
    required = bool((ctx.options.get("expected_stack") or {}).get("peermem"))
    if not required:
        return _result(name, peermem_verdict(False, None, {}, None))
    if ctx.facts is None:
        return check_result(name, FAIL, None, {"loaded": True}, f"the driver state could not be read: {ctx.facts_error}")
    reader = _reader(ctx)
    try:
        module = module_facts(reader.loaded_modules(), PEERMEM, reader.module_info(PEERMEM))
    except (StackFactsError, ToolError) as exc:
        return _unreadable(name, exc, "lsmod and modinfo nvidia_peermem", {"loaded": True})
    sys_version = (ctx.host.read("sys/module", PEERMEM, "version") or "").strip() or None
    symbol_errors = peer_api = None
    if module["loaded"] is False and module["installed"]:
        symbol_errors, peer_api = _load_failure_evidence(ctx, reader.kernel)
    verdict = peermem_verdict(True, ctx.facts.get("driver"), module, reader.kernel, sys_version, symbol_errors, peer_api)
    return _result(name, verdict)


# --------------------------------------------------------------------------- dcgm

SERVICE_HINT = "start it (systemctl start nvidia-dcgm) and read why it stopped (journalctl -u nvidia-dcgm)"


def read_build_info(rc, out):
    """``dcgmi -v``'s answer -> ``{"client", "hostengine", "garbled"}`` (versions or None); never raises.

    Real dcgmi prints its own block, then the host engine's only when it connected: no ``Hostengine build info:`` is a
    host engine that did not answer (the command then exits non-zero). Output that cannot be read while dcgmi exited 0
    is garbled (a ParseError message).
    """
    try:
        info = dcgm_version_parser.parse_build_info(out)
    except ParseError as exc:
        # The parser names nv-hostengine --version, whose format dcgmi -v shares: name the command that ran.
        text = str(exc).removeprefix(dcgm_version_parser.BUILD_INFO + ": ")
        return {"client": None, "hostengine": None, "garbled": None if rc != 0 else f"dcgmi -v: {text}"}
    return {
        "client": (info.get("local") or {}).get("version"),
        "hostengine": (info.get("hostengine") or {}).get("version") if info.get("local") is not None else None,
        "garbled": None,
    }


def dcgm_verdict(wanted, client, hostengine, answered, error=None, garbled=None):
    """``(status, observed, expected, message)`` of DCGM: its host engine answers, at the BOM's version when it names one.

    ``client`` / ``hostengine``: the versions ``dcgmi -v`` printed (None: not printed); ``answered``: the host engine
    answered (its build info, or ``dcgmi discovery -l``); ``error``: what dcgmi said when it did not; ``garbled``: the
    message of output that could not be read.
    """
    expected = {"hostengine": "answers", "version": wanted}
    observed = {"answered": answered, "client_version": client, "hostengine_version": hostengine}
    if garbled:
        return FAIL, observed, expected, (
            f"dcgmi printed output that cannot be read ({garbled[:200]}): run 'dcgmi -v' and 'dcgmi discovery -l' by hand; "
            "reinstall datacenter-gpu-manager, or add dcgm to skip_checks"
        )
    if not answered:
        said = f" (dcgmi: {error.strip()[:200]})" if error and error.strip() else ""
        return FAIL, observed, expected, f"DCGM's host engine does not answer{said}: {SERVICE_HINT}"
    if wanted is None:
        return PASS, observed, expected, f"DCGM's host engine answers (version {hostengine or client or 'not reported'})"
    if hostengine is not None and hostengine != wanted:
        if client == wanted:
            return FAIL, observed, expected, (
                f"DCGM's host engine runs {hostengine} while dcgmi is {wanted}, the BOM's: the host engine was not restarted after the "
                "upgrade; systemctl restart nvidia-dcgm"
            )
        return FAIL, observed, expected, (
            f"DCGM's host engine is {hostengine}, the BOM's is {wanted}: install datacenter-gpu-manager {wanted} and restart nvidia-dcgm"
        )
    if client is not None and client != wanted:
        return FAIL, observed, expected, f"dcgmi is {client}, the BOM's DCGM is {wanted}: install datacenter-gpu-manager {wanted}"
    if hostengine is None:
        return WARN, observed, expected, (
            f"DCGM's host engine answers (dcgmi discovery -l) but did not report its version to dcgmi -v; dcgmi is "
            f"{client or 'of an unknown version'}: compare nv-hostengine --version with the BOM's {wanted}"
        )
    return PASS, observed, expected, f"DCGM's host engine answers, version {hostengine} as the BOM says"


def check_dcgm(ctx):
    name = "dcgm"
    wanted = ((ctx.options.get("expected_stack") or {}).get("dcgm") or {}).get("version")
    if wanted is None and name not in (ctx.options.get("checks") or []):
        return check_result(
            name, SKIP, None, None,
            "the BOM names no DCGM version (expected_stack.dcgm); list dcgm in checks to check that its host engine answers all the same",
        )
    expected = {"hostengine": "answers", "version": wanted}
    dcgmi = _tool(ctx, Dcgmi, "dcgmi_path")
    if not dcgmi.available:
        install = f"datacenter-gpu-manager {wanted}" if wanted else "datacenter-gpu-manager"
        return check_result(name, FAIL, None, expected, f"dcgmi is not installed: install {install}, set dcgmi_path, or add dcgm to skip_checks")
    try:
        rc, out, err = dcgmi.run(["-v"], ok_rcs=None)
        info = read_build_info(rc, out)
        answered, error = info["hostengine"] is not None, None
        if not answered and not info["garbled"]:
            # dcgmi -v waits 100 ms for the host engine: ask once more with discovery's own connection before saying it is down.
            rc, out, err = dcgmi.run(["discovery", "-l"], ok_rcs=None)
            try:
                answered = rc == 0 and dcgm_parser.parse_discovery(out) is not None
            except ParseError as exc:
                if rc == 0:
                    info["garbled"] = str(exc)
            if not answered:
                error = err or out
    except ToolError as exc:
        return _unreadable(name, exc, "dcgmi -v", expected)
    return _result(name, dcgm_verdict(wanted, info["client"], info["hostengine"], answered, error, info["garbled"]))


__all__ = [
    "check_dcgm",
    "check_ib_ports",
    "check_peermem",
    "dcgm_verdict",
    "ib_ports_verdict",
    "peermem_verdict",
    "read_build_info",
]
