"""Fleet spec: read a fleet YAML file, check it, and expand it into one plan per node.

The format is documented in tests/gpusim/README.md. `load(path)` returns a `Fleet`; each
`Fleet.nodes[i].spec` is the node spec dict of the simulator contract (the input of
`state.new_node_state`). Every mistake raises `SpecError` with the place in the file
(`nodes[2].sku`) and what is allowed there.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_TIMING: dict[str, Any] = {"reboot": 5.0, "flash": 3.0, "diag": {1: 2.0, 2: 5.0, 3: 10.0}, "burn": 5.0, "nccl": 2.0,
                                 "bmc_reset": 3.0, "aux_power_cycle": 6.0}
DEFAULT_KERNEL = "6.1.0-18-amd64"
DEFAULT_SSH_PORT = 22
DEFAULT_LOOPBACK = 10
DEFAULT_SLURM_PORT = 16817
DEFAULT_BMC_PORT = 443
DEFAULT_BMC_USER = "admin"
BMC_LOOPBACK_OFFSET = 100  # default fleet.bmc_loopback: fleet.loopback + this
MAX_NODES_PER_OCTET = 250

_FLEET_KEYS = {"name", "ssh_port", "loopback", "slurm_port", "partition", "bmc_loopback", "bmc_port", "bmc_user"}
_SKU_KEYS = {"gpu_model", "gpu_count", "nvswitch", "nics", "bom", "cpus", "memory_mb", "perf", "kernel", "vbios", "gpu_firmware"}
_NIC_KEYS = {"type", "psid", "part_number", "fw", "count"}
_GROUP_KEYS = {
    "count", "prefix", "start", "width", "names", "sku", "driver", "kernel_module", "fabricmanager", "vbios", "gpu_firmware",
    "nics", "nic_fw", "kernel", "faults", "timing", "perf", "jobs", "bmc_firmware", "bios",
    "vars", "nvlink_domain", "clique_id", "imex", "cdmm", "secure_boot", "ofed",
}
_TOP_KEYS = {"fleet", "timing", "skus", "nodes", "defaults"}
_DEFAULTS_KEYS = {"kernel", "kernel_module", "driver"}

# Always used with fullmatch: `$` would let a trailing newline through.
_HOSTNAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VERSION = re.compile(r"\d+\.\d+(\.\d+)?")
_FW_BUNDLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_BMC_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_KERNEL_MODULES = ("open", "proprietary")
# Host variables a node group may set (nodes[i].vars: topology such as rack, nvlink_domain): Ansible variable names,
# never one the simulator writes itself nor one Ansible reserves.
_VAR_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_RESERVED_VARS = {"bmc_address", "inventory_hostname", "inventory_hostname_short", "hostvars", "groups", "group_names",
                  "omit", "play_hosts", "environment", "vars", "gpusim_fleet", "gpusim_workdir"}


class SpecError(ValueError):
    """The fleet spec is wrong; the message says where and what is allowed."""


@dataclass
class NodePlan:
    """One node: the contract's node spec plus where the fleet puts it."""

    spec: dict[str, Any]
    address: str
    cpus: int
    memory_mb: int
    bmc_address: str = ""
    host_vars: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec["name"]


@dataclass
class Fleet:
    name: str
    ssh_port: int
    slurm_port: int
    partition: str
    skus: dict[str, dict[str, Any]]
    nodes: list[NodePlan] = field(default_factory=list)
    source: str = ""
    bmc_port: int = DEFAULT_BMC_PORT
    bmc_user: str = DEFAULT_BMC_USER

    def node(self, name: str) -> NodePlan:
        for plan in self.nodes:
            if plan.name == name:
                return plan
        raise KeyError(name)

    def slurmd_port(self, index: int) -> int:
        return self.slurm_port + 1 + index


def _fail(where: str, message: str) -> SpecError:
    return SpecError(f"{where}: {message}")


def _mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise _fail(where, f"must be a mapping, got {type(value).__name__}")
    return value


def _check_keys(value: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise _fail(where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")


def _int(value: Any, where: str, *, low: int = 0, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise _fail(where, f"must be {bounds}, got {value}")
    return value


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise _fail(where, f"must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(where, f"must be a non-empty string, got {value!r}")
    return value


def _version(value: Any, where: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    text = str(value)
    if not _VERSION.fullmatch(text):
        raise _fail(where, f"must be a version like 550.90.07, got {value!r}")
    return text


def _timing(value: Any, base: dict[str, Any], where: str) -> dict[str, Any]:
    result = copy.deepcopy(base)
    for key, item in _mapping(value, where).items():
        if key not in DEFAULT_TIMING:
            raise _fail(where, f"unknown key {key!r}; allowed: {', '.join(DEFAULT_TIMING)}")
        if key == "diag":
            if isinstance(item, dict):
                for level, seconds in item.items():
                    if level not in (1, 2, 3):
                        raise _fail(f"{where}.diag", f"levels are 1, 2, 3, got {level!r}")
                    result["diag"][level] = _seconds(seconds, f"{where}.diag.{level}")
            else:
                seconds = _seconds(item, f"{where}.diag")
                result["diag"] = {1: seconds, 2: seconds, 3: seconds}
        else:
            result[key] = _seconds(item, f"{where}.{key}")
    return result


def _nics(value: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise _fail(where, f"must be a list of NICs, got {type(value).__name__}")
    nics = []
    for i, nic in enumerate(value):
        here = f"{where}[{i}]"
        _check_keys(_mapping(nic, here), _NIC_KEYS, here)
        for key in ("type", "psid", "fw"):
            if key not in nic:
                raise _fail(here, f"{key} is required")
        entry = {
            "type": _str(nic["type"], f"{here}.type"),
            "psid": _str(nic["psid"], f"{here}.psid"),
            "part_number": str(nic.get("part_number", "")),
            "fw": _version(nic["fw"], f"{here}.fw", optional=False),
        }
        count = _int(nic.get("count", 1), f"{here}.count", low=1, high=16)
        nics.extend(dict(entry) for _ in range(count))
    return nics


def _faults(value: Any, where: str, known: set[str] | None) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _fail(where, "must be a list of {kind: ..., param: value}")
    faults = []
    for i, item in enumerate(value):
        here = f"{where}[{i}]"
        fault = _mapping({"kind": item} if isinstance(item, str) else item, here)
        kind = fault.get("kind")
        if not isinstance(kind, str):
            raise _fail(here, "kind is required")
        if known is not None and kind not in known:
            raise _fail(f"{here}.kind", f"unknown fault {kind!r}; known: {', '.join(sorted(known))}")
        faults.append(dict(fault))
    return faults


def _known_faults() -> set[str]:
    from gpusim import state

    return set(state.FAULT_KINDS)


def _known_models() -> set[str]:
    from gpusim import catalog

    return set(catalog.GPU_MODELS)


def _gpu_firmware(value: Any, where: str) -> str | None:
    """The HGX firmware bundle (the HMC's version): a name like HGX-22.10-1, or {version: NAME}."""
    if isinstance(value, dict):
        _check_keys(value, {"version"}, where)
        value = value.get("version")
        where = f"{where}.version"
    if value is None:
        return None
    if not isinstance(value, str) or not _FW_BUNDLE.fullmatch(value):
        raise _fail(where, f"must be a firmware bundle name like HGX-22.10-1, got {value!r}")
    return value


def _host_firmware(value: Any, where: str) -> str | None:
    """The host BMC's or BIOS's firmware version (None: gpusim's default)."""
    if value is None:
        return None
    if not isinstance(value, str) or not _FW_BUNDLE.fullmatch(value):
        raise _fail(where, f"must be a firmware version like 24.01.1 (letters, digits, . _ -), got {value!r}")
    return value


def _sku(name: Any, value: Any, models: set[str] | None) -> dict[str, Any]:
    where = f"skus.{name}"
    if not isinstance(name, str) or not _GROUP_NAME.fullmatch(name):
        raise _fail(where, "SKU names become Ansible group names: letters, digits and _ only, not starting with a digit")
    _check_keys(_mapping(value, where), _SKU_KEYS, where)
    for key in ("gpu_model", "gpu_count"):
        if key not in value:
            raise _fail(where, f"{key} is required")
    model = _str(value["gpu_model"], f"{where}.gpu_model")
    if models is not None and model not in models:
        raise _fail(f"{where}.gpu_model", f"unknown GPU model {model!r}; known: {', '.join(sorted(models))}")
    bom = value.get("bom", {})
    _mapping(bom, f"{where}.bom")
    return {
        "gpu_model": model,
        "gpu_count": _int(value["gpu_count"], f"{where}.gpu_count", low=1, high=16),
        "nvswitch": bool(value.get("nvswitch", False)),
        "nics": _nics(value.get("nics", []), f"{where}.nics"),
        "bom": bom,
        "cpus": _int(value.get("cpus", 8), f"{where}.cpus", low=1, high=1024),
        "memory_mb": _int(value.get("memory_mb", 1024), f"{where}.memory_mb", low=1),
        "perf": dict(_mapping(value.get("perf", {}), f"{where}.perf")),
        "kernel": value.get("kernel"),
        "vbios": value.get("vbios"),
        "gpu_firmware": _gpu_firmware(value.get("gpu_firmware"), f"{where}.gpu_firmware"),
    }


def _secure_boot(value: Any, where: str) -> dict[str, Any]:
    from . import secureboot

    try:
        return secureboot.spec_value(value, where)
    except ValueError as exc:
        raise SpecError(str(exc)) from exc


def _ofed(value: Any, where: str) -> dict[str, Any]:
    from . import ofed

    try:
        return ofed.spec_value(value, where)
    except ValueError as exc:
        raise SpecError(str(exc)) from exc


def _host_vars(value: Any, where: str) -> dict[str, Any]:
    """nodes[i].vars: {name: value} written as host variables of the group's nodes in the inventory."""
    result = {}
    for key, item in _mapping(value, where).items():
        if not isinstance(key, str) or not _VAR_NAME.fullmatch(key):
            raise _fail(where, f"{key!r} is not a variable name: lower-case letters, digits and _, not starting with a digit")
        if key.startswith("ansible_") or key in _RESERVED_VARS:
            raise _fail(f"{where}.{key}", "is set by the simulator or reserved by Ansible; choose another name")
        if item is None or not isinstance(item, (str, int, float, bool, list, dict)):
            raise _fail(f"{where}.{key}", f"must be a string, number, boolean, list or mapping, got {item!r}")
        result[key] = copy.deepcopy(item)
    return result


def _names(group: dict, where: str) -> list[str]:
    if "names" in group and "count" in group:
        raise _fail(where, "give either names or count (with prefix), not both")
    if "names" in group:
        names = group["names"]
        if not isinstance(names, list) or not names:
            raise _fail(f"{where}.names", "must be a non-empty list of host names")
        result = [str(n) for n in names]
    elif "count" in group:
        count = _int(group["count"], f"{where}.count", low=1)
        prefix = _str(group.get("prefix"), f"{where}.prefix") if "prefix" in group else None
        if prefix is None:
            raise _fail(where, "count needs a prefix (names are prefix + number)")
        start = _int(group.get("start", 1), f"{where}.start")
        width = _int(group.get("width", 2), f"{where}.width", low=1, high=6)
        result = [f"{prefix}{n:0{width}d}" for n in range(start, start + count)]
    else:
        raise _fail(where, "needs names: [...] or count: N with prefix")
    for i, name in enumerate(result):
        if not _HOSTNAME.fullmatch(name):
            raise _fail(f"{where}.names[{i}]", f"{name!r} is not a valid host name (lower-case letters, digits, -)")
    return result


def parse(data: Any, source: str = "<spec>") -> Fleet:
    """Check a loaded fleet spec and expand it; raise SpecError on the first mistake."""
    top = _mapping(data, source)
    _check_keys(top, _TOP_KEYS, source)
    for key in ("fleet", "skus", "nodes"):
        if key not in top:
            raise _fail(source, f"{key} is required")

    fleet_in = _mapping(top["fleet"], "fleet")
    _check_keys(fleet_in, _FLEET_KEYS, "fleet")
    name = _str(fleet_in.get("name"), "fleet.name")
    if not _HOSTNAME.fullmatch(name):
        raise _fail("fleet.name", f"{name!r}: use lower-case letters, digits and -")
    ssh_port = _int(fleet_in.get("ssh_port", DEFAULT_SSH_PORT), "fleet.ssh_port", low=1, high=65535)
    loopback = _int(fleet_in.get("loopback", DEFAULT_LOOPBACK), "fleet.loopback", low=1, high=254)
    slurm_port = _int(fleet_in.get("slurm_port", DEFAULT_SLURM_PORT), "fleet.slurm_port", low=1024, high=60000)
    partition = _str(fleet_in.get("partition", "gpu"), "fleet.partition")
    bmc_default = loopback + BMC_LOOPBACK_OFFSET if loopback + BMC_LOOPBACK_OFFSET <= 254 else loopback - BMC_LOOPBACK_OFFSET
    bmc_loopback = _int(fleet_in.get("bmc_loopback", bmc_default), "fleet.bmc_loopback", low=1, high=254)
    if bmc_loopback == loopback:
        raise _fail("fleet.bmc_loopback", f"must differ from fleet.loopback ({loopback}): the BMCs have a management network of their own")
    bmc_port = _int(fleet_in.get("bmc_port", DEFAULT_BMC_PORT), "fleet.bmc_port", low=1, high=65535)
    bmc_user = fleet_in.get("bmc_user", DEFAULT_BMC_USER)
    if not isinstance(bmc_user, str) or not _BMC_USER.fullmatch(bmc_user):
        raise _fail("fleet.bmc_user", f"must be a user name (letters, digits, _ . -; at most 32), got {bmc_user!r}")

    timing = _timing(top.get("timing", {}), DEFAULT_TIMING, "timing")
    defaults = _mapping(top.get("defaults", {}), "defaults")
    _check_keys(defaults, _DEFAULTS_KEYS, "defaults")

    models = _known_models()
    skus_in = _mapping(top["skus"], "skus")
    if not skus_in:
        raise _fail("skus", "define at least one SKU")
    skus = {sku_name: _sku(sku_name, value, models) for sku_name, value in skus_in.items()}

    groups = top["nodes"]
    if not isinstance(groups, list) or not groups:
        raise _fail("nodes", "must be a non-empty list of node groups")
    known_faults = _known_faults()
    fleet = Fleet(name=name, ssh_port=ssh_port, slurm_port=slurm_port, partition=partition, skus=skus, source=source,
                  bmc_port=bmc_port, bmc_user=bmc_user)
    seen: dict[str, str] = {}
    for g, group in enumerate(groups):
        where = f"nodes[{g}]"
        _check_keys(_mapping(group, where), _GROUP_KEYS, where)
        sku_name = group.get("sku")
        if sku_name not in skus:
            raise _fail(f"{where}.sku", f"unknown SKU {sku_name!r}; defined: {', '.join(skus)}")
        sku = skus[sku_name]
        driver = _version(group.get("driver", defaults.get("driver")), f"{where}.driver")
        kernel_module = group.get("kernel_module", defaults.get("kernel_module", "open"))
        if kernel_module not in _KERNEL_MODULES:
            raise _fail(f"{where}.kernel_module", f"must be one of {', '.join(_KERNEL_MODULES)}, got {kernel_module!r}")
        if "fabricmanager" in group:
            fabricmanager = _version(group["fabricmanager"], f"{where}.fabricmanager")
        else:  # NVSwitch systems run a fabric manager of the driver's version
            fabricmanager = driver if sku["nvswitch"] else None
        nics = _nics(group["nics"], f"{where}.nics") if "nics" in group else copy.deepcopy(sku["nics"])
        for index, fw in _mapping(group.get("nic_fw", {}), f"{where}.nic_fw").items():
            if not isinstance(index, int) or not 0 <= index < len(nics):
                raise _fail(f"{where}.nic_fw", f"NIC index {index!r} out of range 0..{len(nics) - 1}")
            nics[index]["fw"] = _version(fw, f"{where}.nic_fw.{index}", optional=False)
        jobs = _int(group.get("jobs", 0), f"{where}.jobs", high=sku["cpus"])
        faults = _faults(group.get("faults", []), f"{where}.faults", known_faults)
        node_timing = _timing(group.get("timing", {}), timing, f"{where}.timing")
        perf = dict(sku["perf"])
        perf.update(_mapping(group.get("perf", {}), f"{where}.perf"))
        host_vars = _host_vars(group.get("vars", {}), f"{where}.vars")
        for node_name in _names(group, where):
            if node_name in seen:
                raise _fail(where, f"node {node_name!r} is already defined in {seen[node_name]}")
            seen[node_name] = where
            index = len(fleet.nodes)
            octet = loopback + index // MAX_NODES_PER_OCTET
            if octet > 254:
                raise _fail("nodes", f"too many nodes for fleet.loopback={loopback}: addresses run past 127.254.x.x")
            spec = {
                "name": node_name,
                "sku": sku_name,
                "gpu_model": sku["gpu_model"],
                "gpu_count": sku["gpu_count"],
                "nvswitch": sku["nvswitch"],
                "driver": driver,
                "kernel_module": kernel_module,
                "fabricmanager": fabricmanager,
                "vbios": group.get("vbios", sku["vbios"]),
                "gpu_firmware": (_gpu_firmware(group["gpu_firmware"], f"{where}.gpu_firmware") if "gpu_firmware" in group
                                 else sku["gpu_firmware"]),
                "nics": copy.deepcopy(nics),
                "kernel": str(group.get("kernel") or sku["kernel"] or defaults.get("kernel") or DEFAULT_KERNEL),
                "faults": copy.deepcopy(faults),
                "timing": copy.deepcopy(node_timing),
                "perf": dict(perf),
                "jobs": jobs,
            }
            if model_mnnvl(sku["gpu_model"]):
                _nvlink_spec(spec, group, where, driver)
            elif any(key in group for key in ("nvlink_domain", "clique_id", "imex", "cdmm")):
                raise _fail(where, f"nvlink_domain, clique_id, imex and cdmm are for multi-node NVLink trays (NVIDIA GB200), "
                                   f"not {sku['gpu_model']}")
            if "ofed" in group:  # MLNX_OFED / DOCA-OFED, opensm, nvme-rdma (gpusim/ofed.py)
                spec["ofed"] = _ofed(group["ofed"], f"{where}.ofed")
            if "secure_boot" in group:  # UEFI Secure Boot and the enrolled MOKs (gpusim/secureboot.py)
                spec["secure_boot"] = _secure_boot(group["secure_boot"], f"{where}.secure_boot")
            for key in ("bmc_firmware", "bios"):  # the host BMC's and BIOS's versions, only where a group sets them
                if key in group:
                    spec[key] = _host_firmware(group[key], f"{where}.{key}")
            bmc_octet = bmc_loopback + index // MAX_NODES_PER_OCTET
            if bmc_octet > 254 or loopback <= bmc_octet <= octet or bmc_loopback <= octet <= bmc_octet:
                raise _fail("fleet.bmc_loopback", f"{bmc_loopback}: with {index + 1} nodes the BMC addresses overlap the "
                                                  f"node addresses (fleet.loopback={loopback}) or run past 127.254.x.x")
            address = f"127.0.{octet}.{1 + index % MAX_NODES_PER_OCTET}"
            bmc_address = f"127.0.{bmc_octet}.{1 + index % MAX_NODES_PER_OCTET}"
            fleet.nodes.append(NodePlan(spec=spec, address=address, cpus=sku["cpus"], memory_mb=sku["memory_mb"],
                                        bmc_address=bmc_address, host_vars=copy.deepcopy(host_vars)))
    _nvlink_members(fleet)
    if fleet.slurmd_port(len(fleet.nodes)) > 65535:
        raise _fail("fleet.slurm_port", "too high for this many nodes (one slurmd port per node follows it)")
    return fleet


def model_mnnvl(name: str) -> bool:
    from . import catalog

    model = catalog.GPU_MODELS.get(name)
    return bool(model and model.mnnvl)


def _nvlink_spec(spec: dict[str, Any], group: dict, where: str, driver: str | None) -> None:
    """A GB200 tray's NVLink domain (nodes[i].nvlink_domain: its name; the ClusterUUID is derived from it), CliqueId,
    IMEX version (the driver's unless nodes[i].imex says otherwise: a tray one release off) and CDMM module option."""
    domain = group.get("nvlink_domain")
    if domain is not None and (not isinstance(domain, str) or not _HOSTNAME.fullmatch(domain)):
        raise _fail(f"{where}.nvlink_domain", f"must be a name of lower-case letters, digits and -, got {domain!r}")
    spec["nvlink"] = {"domain": domain or spec["name"], "clique_id": _int(group.get("clique_id", 1), f"{where}.clique_id", low=1, high=32767)}
    spec["imex"] = _version(group["imex"], f"{where}.imex") if "imex" in group else driver
    cdmm = group.get("cdmm")
    if cdmm is not None and cdmm not in ("driver", "default"):
        raise _fail(f"{where}.cdmm", f"must be driver or default (NVreg_CoherentGPUMemoryMode), got {cdmm!r}")
    spec["cdmm"] = cdmm


def _nvlink_members(fleet: Fleet) -> None:
    """Every tray learns the trays of its NVLink domain (names and addresses, in fleet order: IMEX node ids)."""
    members: dict[str, list[dict[str, str]]] = {}
    for plan in fleet.nodes:
        if "nvlink" in plan.spec:
            members.setdefault(plan.spec["nvlink"]["domain"], []).append({"name": plan.name, "address": plan.address})
    for plan in fleet.nodes:
        if "nvlink" in plan.spec:
            plan.spec["nvlink"]["members"] = copy.deepcopy(members[plan.spec["nvlink"]["domain"]])


def load(path: str | Path) -> Fleet:
    """Read and check a fleet spec file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the fleet spec: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from exc
    return parse(data, source=str(path))
