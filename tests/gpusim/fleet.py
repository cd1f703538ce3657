"""Bring a simulated fleet up and down, report on it, inject faults.

Workdir layout (default .gpusim/ in the repo root):
  fleet.json                what `up` made (read by down, status, the supervisor)
  ssh/id_ed25519            the fleet's SSH key (root login on every node)
  inventory/hosts.yml       Ansible inventory; inventory/group_vars/<sku>.yml the SKU's BOM
  ansible.cfg               settings for running Ansible against the fleet by hand
  nodes/<name>/             NODE_DIR of each node (state.json, boot_id, bin/, sbin/, ssh/, log/...)
  slurm/, munge/            slurmctld and munged
  bmc/                      the BMCs' certificate (cert.pem, key.pem), credentials.json (mode 0600),
                            bmc.pid and bmc.log of the BMC process (python -m gpusim.bmc)
  supervisor.pid, supervisor.log
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from gpusim import node, progress, slurm
from gpusim import spec as spec_mod

TESTS_DIR = Path(__file__).resolve().parent.parent
REPO = TESTS_DIR.parent
DEFAULT_WORKDIR = REPO / ".gpusim"
FLEET_FILE = "fleet.json"
SUPERVISOR_PID = "supervisor.pid"
BMC_DIR = "bmc"
BMC_PID = "bmc.pid"
BOOT_WORKERS = 16
# A gpusim daemon (the BMCs, the supervisor) that neither writes its pid file nor logs for this long is stuck.
DAEMON_STALL_S = 60.0
# The inventory host (group slurm_clients) that runs Slurm commands on the controller, beside slurmctld.
SLURM_CLIENT = "slurmctl"


class FleetError(RuntimeError):
    """The fleet cannot be brought up, found, or changed as asked."""


def _state():
    from gpusim import state

    return state


def node_dir(workdir: Path, name: str) -> Path:
    return workdir / "nodes" / name


def load_fleet(workdir: Path) -> dict[str, Any]:
    try:
        return json.loads((workdir / FLEET_FILE).read_text())
    except FileNotFoundError:
        raise FleetError(f"no fleet in {workdir} (run gpusim up first)") from None


def node_record(workdir: Path, name: str) -> dict[str, Any]:
    for record in load_fleet(workdir)["nodes"]:
        if record["name"] == name:
            return record
    raise FleetError(f"no node {name!r} in the fleet in {workdir}")


def python_interpreter() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else (shutil.which("python3") or sys.executable)


# --- up ------------------------------------------------------------------------------------

def _check_free(fleet: spec_mod.Fleet) -> None:
    """Fail early, with the address, when a port the fleet needs is taken."""
    wanted = [(plan.address, fleet.ssh_port, f"sshd of {plan.name}") for plan in fleet.nodes]
    wanted += [(plan.bmc_address, fleet.bmc_port, f"BMC of {plan.name}") for plan in fleet.nodes]
    wanted.append(("127.0.0.1", fleet.slurm_port, "slurmctld"))
    wanted += [("0.0.0.0", fleet.slurmd_port(i), f"slurmd of {plan.name}") for i, plan in enumerate(fleet.nodes)]  # noqa: S104
    for address, port, what in wanted:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, port))
            except OSError as exc:
                raise FleetError(
                    f"{address}:{port} (for the {what}) is taken: {exc.strerror}; another fleet or service uses it. "
                    "Take it down, or set fleet.loopback / fleet.bmc_loopback / fleet.ssh_port / fleet.slurm_port in the spec"
                ) from None


def _inventory(fleet: spec_mod.Fleet, workdir: Path, bmc_password: str) -> Path:
    inventory = workdir / "inventory"
    (inventory / "group_vars").mkdir(parents=True, exist_ok=True)
    groups: dict[str, Any] = {}
    for plan in fleet.nodes:
        hosts = groups.setdefault(plan.spec["sku"], {"hosts": {}})["hosts"]
        # The spec group's vars (rack, nvlink_domain...) first: the simulator's own keys win.
        hosts[plan.name] = {**plan.host_vars, "ansible_host": plan.address, "ansible_port": fleet.ssh_port,
                            "bmc_address": plan.bmc_address}
    hosts_yml = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(workdir / "ssh" / "id_ed25519"),
                "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
                "ansible_python_interpreter": python_interpreter(),
                "gpusim_fleet": fleet.name,
                "gpusim_workdir": str(workdir),
                # The BMCs' one account (Redfish over HTTPS on bmc_address:bmc_port, a self-signed certificate).
                "bmc_user": fleet.bmc_user,
                "bmc_password": bmc_password,
                "bmc_port": fleet.bmc_port,
                # The certificate the BMCs serve, for playbooks that check it (the audit does by default).
                "gpufleet_bmc_ca_path": str(workdir / "bmc" / "cert.pem"),
            },
            # Every SKU group sits under gpu_nodes, the group the playbooks target by default; `gpu` (the rollout's
            # default gpufleet_targets) is the same nodes. slurm_clients: where delegated Slurm commands run.
            "children": {
                "gpu_nodes": {"children": groups},
                "gpu": {"children": {"gpu_nodes": {}}},
                "slurm_clients": {"hosts": {SLURM_CLIENT: {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "gpufleet_slurm_environment": {"SLURM_CONF": str(slurm.Paths(workdir).conf)},
                }}},
            },
        }
    }
    header = f"# Simulated fleet {fleet.name} from {fleet.source} (written by gpusim up; removed by gpusim down)\n"
    # Mode 0600: it holds the BMCs' password (like the fleet's SSH key beside it).
    fd = os.open(inventory / "hosts.yml", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(header + yaml.safe_dump(hosts_yml, sort_keys=False))
    for sku_name, sku in fleet.skus.items():
        if not any(p.spec["sku"] == sku_name for p in fleet.nodes):
            continue
        data = {"gpufleet_sku": sku_name, "gpufleet_bom": sku["bom"]}
        (inventory / "group_vars" / f"{sku_name}.yml").write_text(
            f"# BOM of SKU {sku_name} from {fleet.source}\n" + yaml.safe_dump(data, sort_keys=False))
    (workdir / "ansible.cfg").write_text(
        "[defaults]\n"
        f"inventory = {inventory / 'hosts.yml'}\n"
        "host_key_checking = False\n"
        "forks = 64\n"
        f"collections_path = {REPO / '.collections'}\n"
        "[ssh_connection]\n"
        "pipelining = True\n"
    )
    return inventory / "hosts.yml"


def _prepare_node(workdir: Path, fleet: spec_mod.Fleet, index: int, binds: dict[str, str], slurm_conf: Path) -> dict:
    plan = fleet.nodes[index]
    nd = node_dir(workdir, plan.name)
    for sub in ("log", "run", "proc_driver", "slurmd", "ssh"):
        (nd / sub).mkdir(parents=True, exist_ok=True)
    st = _state()
    st.save(nd, st.new_node_state(plan.spec, nodes_root=nd.parent))
    node.write_wrappers(nd, sys.executable, str(TESTS_DIR))
    node.make_host_key(nd, plan.name)
    node.write_shell_files(nd)
    node.prepare_disk(nd, plan.name)
    node.write_nvlink_files(nd, plan.spec)
    (nd / "ssh" / "sshd_config").write_text(node.sshd_config(
        name=plan.name, address=plan.address, port=fleet.ssh_port, node_dir=nd,
        authorized_keys=workdir / "ssh" / "authorized_keys", slurm_conf=slurm_conf))
    record = {"name": plan.name, "index": index, "address": plan.address, "bmc_address": plan.bmc_address,
              "sku": plan.spec["sku"], "node_dir": str(nd),
              "slurmd_port": fleet.slurmd_port(index), "timing": plan.spec["timing"], "jobs": plan.spec["jobs"]}
    for rebooted in (False, True):
        script = node.boot_script(name=plan.name, node_dir=nd, slurm_conf=slurm_conf, binds=binds,
                                  slurmd_args=slurm.slurmd_args(plan.name, slurm_conf, rebooted=rebooted,
                                                                time_namespace=node.time_namespace_works()))
        path = nd / ("reboot.sh" if rebooted else "boot.sh")
        path.write_text(script)
        path.chmod(0o755)
    (nd / "node.json").write_text(json.dumps(record, indent=1))
    node.set_power(nd, "down")
    return record


def up(spec_path: str | Path, workdir: Path = DEFAULT_WORKDIR, *, log=print) -> dict[str, Any]:
    """Bring the fleet of spec_path up in workdir; return the fleet record (fleet.json)."""
    started = time.monotonic()
    workdir = Path(workdir).resolve()
    if (workdir / FLEET_FILE).exists():
        raise FleetError(f"a fleet is already up in {workdir}: run gpusim down --workdir {workdir} first")
    fleet = spec_mod.load(spec_path)
    problem = node.overlay_problem(workdir)
    if problem:
        raise FleetError(f"workdir {problem}; choose a workdir elsewhere (--workdir)")
    if os.geteuid() != 0:
        raise FleetError("gpusim up needs root (namespaces, bind mounts, one sshd per node)")
    for tool in ("sshd", "slurmctld", "slurmd", "munged", "unshare"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            raise FleetError(f"{tool} is missing: run tests/gpusim/install-deps.sh")
    _check_free(fleet)

    workdir.mkdir(parents=True, exist_ok=True)
    ssh = workdir / "ssh"
    ssh.mkdir(exist_ok=True)
    key = ssh / "id_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"gpusim@{fleet.name}", "-f", str(key)], check=True)
    shutil.copyfile(key.with_suffix(".pub"), ssh / "authorized_keys")

    record: dict[str, Any] = {"name": fleet.name, "spec": str(Path(spec_path).resolve()), "workdir": str(workdir),
                              "ssh_port": fleet.ssh_port, "slurm_port": fleet.slurm_port, "bmc_port": fleet.bmc_port,
                              "created_node_mount": False, "nodes": []}
    if not os.path.isdir(node.NODE_MOUNT):
        os.makedirs(node.NODE_MOUNT)
        record["created_node_mount"] = True
    # Written first, so that gpusim down can clean up after a bring-up that failed half-way.
    (workdir / FLEET_FILE).write_text(json.dumps(record, indent=1))

    paths = slurm.prepare(fleet, workdir)
    binds = node.bind_targets()
    with ThreadPoolExecutor(BOOT_WORKERS) as pool:
        record["nodes"] = list(pool.map(lambda i: _prepare_node(workdir, fleet, i, binds, paths.conf), range(len(fleet.nodes))))
    password = _bmc_credentials(fleet, workdir)
    record["inventory"] = str(_inventory(fleet, workdir, password))
    record["binds"] = binds
    (workdir / FLEET_FILE).write_text(json.dumps(record, indent=1))
    start_bmcs(workdir)
    prepared = time.monotonic()

    slurm.start_controller(workdir)
    with ThreadPoolExecutor(BOOT_WORKERS) as pool:
        list(pool.map(lambda r: node.boot(Path(r["node_dir"])), record["nodes"]))
    booted = time.monotonic()
    slurm.wait_registered(workdir, [r["name"] for r in record["nodes"]])
    jobs: list[str] = []
    for r in record["nodes"]:
        if r["jobs"]:
            jobs += slurm.submit_sleep_jobs(workdir, r["name"], r["jobs"])
    slurm.wait_running(workdir, jobs)
    start_supervisor(workdir)
    log(f"gpusim: fleet {fleet.name} up: {len(fleet.nodes)} nodes in {time.monotonic() - started:.1f}s "
        f"(prepare {prepared - started:.1f}s, boot {booted - prepared:.1f}s); inventory {record['inventory']}")
    return record


def _bmc_credentials(fleet: spec_mod.Fleet, workdir: Path) -> str:
    """Make the BMCs' certificate and account (a random password); return the password."""
    from gpusim.bmc import cert

    bmc = workdir / BMC_DIR
    bmc.mkdir(exist_ok=True)
    password = secrets.token_urlsafe(12)
    fd = os.open(bmc / "credentials.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"user": fleet.bmc_user, "password": password}, fh)
    cert.make_self_signed(bmc / "cert.pem", bmc / "key.pem", [p.bmc_address for p in fleet.nodes],
                          [f"{p.name}-bmc" for p in fleet.nodes], f"gpusim BMCs of {fleet.name}")
    return password


def bmc_credentials(workdir: Path) -> dict[str, str]:
    """{"user", "password"} of the fleet's BMCs."""
    return json.loads((Path(workdir) / BMC_DIR / "credentials.json").read_text())


def _start_daemon(workdir: Path, module: str, pid_file: Path, log_file: Path, stall: float) -> int:
    """Start a gpusim daemon detached; return its pid once it has written its pid file (it does so when it serves).

    Waited for by progress: the daemon's log growing restarts the clock; a daemon that exits is reported at once."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(TESTS_DIR) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log_file, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", module, "--workdir", str(workdir)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, env=env, cwd="/")

    def started() -> bool:
        if slurm.pid_from(pid_file) == proc.pid:
            return True
        if proc.poll() is not None:
            raise FleetError(f"{module} exited with {proc.returncode}; its log ends:\n{progress.tail(log_file)}")
        return False

    try:
        progress.wait(started, progress=lambda: progress.size(log_file), stall=stall, interval=0.05, what=f"{module}'s start",
                      missing=lambda: f"it wrote no pid file; {log_file} ends:\n{progress.tail(log_file)}")
    except progress.Stalled as stalled:
        raise FleetError(str(stalled)) from None
    return proc.pid


def start_supervisor(workdir: Path, stall: float = DAEMON_STALL_S) -> int:
    return _start_daemon(workdir, "gpusim.supervisor", workdir / SUPERVISOR_PID, workdir / "supervisor.log", stall)


def start_bmcs(workdir: Path, stall: float = DAEMON_STALL_S) -> int:
    """Start the process serving every BMC of the fleet; return once it listens on every BMC address."""
    bmc = workdir / BMC_DIR
    return _start_daemon(workdir, "gpusim.bmc", bmc / BMC_PID, bmc / "bmc.log", stall)


# --- down ----------------------------------------------------------------------------------

def _stop_pid(pid: int, timeout: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while slurm._alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if slurm._alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _node_mount_in_use() -> bool:
    """Whether any mount namespace other than ours still has something mounted at /var/lib/gpusim."""
    own = os.readlink("/proc/self/ns/mnt")
    for inode, pids in node.namespace_table().items():
        if inode == own:
            continue
        with contextlib.suppress(OSError), open(f"/proc/{pids[0]}/mountinfo") as fh:
            if any(line.split()[4] == node.NODE_MOUNT for line in fh):
                return True
    return False


def mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as fh:
        points = [line.split()[4] for line in fh]
    return [p for p in points if p == str(path) or p.startswith(prefix)]


def down(workdir: Path = DEFAULT_WORKDIR, *, log=print) -> None:
    """Stop everything the fleet in workdir runs and remove workdir."""
    started = time.monotonic()
    workdir = Path(workdir).resolve()
    if not workdir.exists():
        log(f"gpusim: nothing in {workdir}")
        return
    try:
        record = load_fleet(workdir)
    except (FleetError, json.JSONDecodeError):
        record = {"nodes": [], "created_node_mount": False}
    pid = slurm.pid_from(workdir / SUPERVISOR_PID)
    if pid is not None and _is_ours(pid, workdir, b"gpusim.supervisor"):
        _stop_pid(pid)
    pid = slurm.pid_from(workdir / BMC_DIR / BMC_PID)
    if pid is not None and _is_ours(pid, workdir, b"gpusim.bmc"):
        _stop_pid(pid)
    node_dirs = sorted(p for p in (workdir / "nodes").glob("*") if p.is_dir()) if (workdir / "nodes").exists() else []
    # One pass kills every node (SIGKILL); repeat until no process of any node is left, for as long as some go.

    def fleet_pids() -> list[int]:
        table = node.namespace_table()
        return [pid for nd in node_dirs for pid in node.processes(nd, table)]

    def all_gone() -> bool:
        pids = fleet_pids()
        for victim in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        return not pids

    try:
        progress.wait(all_gone, progress=lambda: len(fleet_pids()), stall=DAEMON_STALL_S, interval=0.05,
                      what="the fleet's processes after SIGKILL", missing=lambda: f"still there: {fleet_pids()}")
    except progress.Stalled as stalled:
        raise FleetError(str(stalled)) from None
    slurm.stop_controller(workdir)
    left = mounts_under(workdir)
    for point in reversed(left):
        subprocess.run(["umount", "-l", point], check=False)
    if record.get("created_node_mount") and not _node_mount_in_use():
        with contextlib.suppress(OSError):
            os.rmdir(node.NODE_MOUNT)
    shutil.rmtree(workdir)
    log(f"gpusim: fleet down in {time.monotonic() - started:.1f}s; {workdir} removed")


def _is_ours(pid: int, workdir: Path, module: bytes) -> bool:
    """Whether pid is `python -m MODULE --workdir WORKDIR` (a pid file can outlive its process)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().split(b"\0")
    except FileNotFoundError:
        return False
    return module in args and str(workdir).encode() in args


# --- status and faults ---------------------------------------------------------------------

def status(workdir: Path = DEFAULT_WORKDIR) -> list[dict[str, Any]]:
    """One dict per node: name, address, power (up/down/rebooting), boot_id, driver, slurm."""
    workdir = Path(workdir).resolve()
    record = load_fleet(workdir)
    table = node.namespace_table()
    slurm_states = slurm.node_states(workdir)
    rows = []
    for r in record["nodes"]:
        nd = Path(r["node_dir"])
        power = node.power(nd)
        if power == "up" and not node.processes(nd, table):
            power = "down"  # its processes are gone (killed from outside)
        try:
            st = _state().load(nd)
            driver = st["driver"]["version"]
            boot_id = st["boot_id"]
        except (FileNotFoundError, KeyError, ValueError):
            driver, boot_id = None, None
        rows.append({"name": r["name"], "address": r["address"], "bmc_address": r.get("bmc_address"), "sku": r["sku"],
                     "power": power, "boot_id": boot_id,
                     "driver": driver, "slurm": slurm_states.get(r["name"])})
    return rows


def parse_params(items: list[str]) -> dict[str, Any]:
    """key=value arguments; values are read as YAML scalars (3 → int, true → bool)."""
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FleetError(f"fault parameter {item!r} is not key=value")
        params[key] = yaml.safe_load(value) if value else ""
    return params


def fault(workdir: Path, name: str, kind: str, params: dict[str, Any]) -> dict[str, Any]:
    workdir = Path(workdir).resolve()
    record = node_record(workdir, name)
    st = _state()
    if kind not in st.FAULT_KINDS:
        raise FleetError(f"unknown fault {kind!r}; known: {', '.join(st.FAULT_KINDS)}")
    return st.update(Path(record["node_dir"]), lambda s: st.apply_fault(s, kind, **params))


def clear_faults(workdir: Path, name: str, kind: str | None = None) -> dict[str, Any]:
    workdir = Path(workdir).resolve()
    record = node_record(workdir, name)
    st = _state()
    return st.update(Path(record["node_dir"]), lambda s: st.clear_faults(s, kind))


def power_on(workdir: Path, name: str) -> None:
    """Start a node that is down (powered off, or did not come back), as a power button would."""
    workdir = Path(workdir).resolve()
    nd = Path(node_record(workdir, name)["node_dir"])
    if node.processes(nd):
        raise FleetError(f"node {name} is already running")
    if not _state().boot(nd):
        raise FleetError(f"node {name} does not come back (fault no_return): clear its faults first")
    delay, _jobs = slurm.slurmd_delay(nd)
    node.boot(nd, script="reboot.sh", slurmd_delay=delay)
