"""A simulated node's own disk (overlays of the controller's folders), its inventory entry and its spec vars.

What the kernel does with the mounts is tested in tests/integration/test_gpusim_node.py (root, real sshd);
here: the boot script mounts the overlays before the binds that land under them, the folders are made,
the workdir may not lie under an overlaid folder, and the inventory carries the Slurm client and the
spec's host variables.
"""

from __future__ import annotations

import copy
import json
import pathlib
import sys

import pytest
import yaml

TESTS = pathlib.Path(__file__).resolve().parents[2]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from gpusim import fleet, node, slurm, spec  # noqa: E402

MINIMAL = {
    "fleet": {"name": "t", "loopback": 21, "slurm_port": 18100},
    "skus": {"hgx": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvswitch": True}},
    "nodes": [
        {"count": 2, "prefix": "a", "sku": "hgx", "driver": "570.124.06", "vars": {"rack": "r1", "nvlink_domain": "nvl-a"}},
        {"count": 1, "prefix": "b", "sku": "hgx", "driver": "570.124.06"},
    ],
}


def boot_lines(tmp_path, binds=None):
    return node.boot_script(name="a01", node_dir=tmp_path / "a01", slurm_conf=tmp_path / "slurm" / "etc" / "slurm.conf",
                            slurmd_args=["/usr/sbin/slurmd"], binds=binds or {"/usr/bin/systemctl": "systemctl"}).splitlines()


def test_boot_mounts_every_overlay_before_any_bind(tmp_path):
    lines = boot_lines(tmp_path)
    overlay_at = [i for i, line in enumerate(lines) if "mount -t overlay" in line]
    bind_at = [i for i, line in enumerate(lines) if "mount --bind" in line]
    assert len(overlay_at) == len(node.OVERLAYS) and bind_at
    assert max(overlay_at) < min(bind_at)
    for target in ("/etc", "/var/lib"):
        upper, work = node.overlay_dirs(tmp_path / "a01", target)
        assert any(f"mount -t overlay gpusim-disk -o lowerdir={target},upperdir={upper},workdir={work} {target};" in line
                   for line in lines), target
    # The node folder lands on /var/lib/gpusim and the Slurm config on /etc/slurm: both under an overlay.
    assert any(line.endswith(f" {node.NODE_MOUNT}") for line in lines if "--bind" in line)
    assert any("/etc/slurm" in line for line in lines if "--bind" in line)


def test_the_node_makes_its_own_mount_point_after_its_disk_and_before_the_bind(tmp_path):
    """Another fleet's `down` may remove the controller's /var/lib/gpusim while this node reboots (two test files at
    once): the node makes the mount point on its own /var/lib overlay before binding its folder there."""
    lines = boot_lines(tmp_path)
    made = lines.index(f"mkdir -p {node.NODE_MOUNT}")
    bound = next(i for i, line in enumerate(lines) if "--bind" in line and line.endswith(f" {node.NODE_MOUNT}"))
    var_lib = next(i for i, line in enumerate(lines) if "mount -t overlay" in line and "lowerdir=/var/lib," in line)
    assert var_lib < made < bound


def test_overlay_dirs_are_under_the_node_folder_one_per_target(tmp_path):
    dirs = {node.overlay_dirs(tmp_path, t) for t in node.OVERLAYS}
    assert len(dirs) == len(node.OVERLAYS)
    for upper, work in dirs:
        assert upper.parent == work.parent and tmp_path / node.DISK in upper.parents


def test_prepare_disk_gives_the_node_its_hostname_and_machine_id_once(tmp_path):
    nd = tmp_path / "a01"
    node.prepare_disk(nd, "a01")
    etc = node.overlay_dirs(nd, "/etc")[0]
    assert (etc / "hostname").read_text() == "a01\n"
    machine_id = (etc / "machine-id").read_text()
    assert len(machine_id.strip()) == 32
    for target in node.OVERLAYS:
        assert all(d.is_dir() for d in node.overlay_dirs(nd, target))
    # A second prepare (or a reboot) keeps what the node has.
    (etc / "hostname").write_text("renamed\n")
    node.prepare_disk(nd, "a01")
    assert (etc / "hostname").read_text() == "renamed\n"
    assert (etc / "machine-id").read_text() == machine_id


def test_files_mounted_over_the_controllers_etc_are_copied_to_the_node_once(tmp_path, monkeypatch):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    mountinfo = tmp_path / "mountinfo"
    # A container's /etc/hosts is a bind mount: the overlay's lower layer does not hold it.
    mountinfo.write_text("1 0 8:1 / / rw - ext4 /dev/vda rw\n2 1 8:1 /hosts /etc/hosts rw - ext4 /dev/vda rw\n")
    real_isfile = node.os.path.isfile
    monkeypatch.setattr(node.os.path, "isfile", lambda p: p == "/etc/hosts" or real_isfile(p))
    real_path = node.Path
    monkeypatch.setattr(node, "Path", lambda p: hosts if p == "/etc/hosts" else real_path(p))
    nd = tmp_path / "a01"
    assert node.copy_submount_files(nd, str(mountinfo)) == ["/etc/hosts"]
    etc = nd / node.DISK / "etc" / "upper"
    assert (etc / "hosts").read_text() == "127.0.0.1 localhost\n"
    (etc / "hosts").write_text("node's own\n")
    assert node.copy_submount_files(nd, str(mountinfo)) == []
    assert (etc / "hosts").read_text() == "node's own\n"


@pytest.mark.parametrize("path, what", [
    ("/var/tmp/fleet", "lies under /var/tmp"),
    ("/etc", "lies under /etc"),
    ("/root/gpusim", "lies under /root"),
    ("/tmp/a,b", "overlayfs options cannot carry"),
    ("/tmp/a:b", "overlayfs options cannot carry"),
])
def test_a_workdir_the_nodes_overlay_is_refused(path, what):
    assert what in node.overlay_problem(pathlib.Path(path))


@pytest.mark.parametrize("path", ["/tmp/fleet-a/fleet", "/srv/checkout/.gpusim", "/var/libx", "/etcetera"])
def test_a_workdir_outside_the_overlays_is_accepted(path):
    assert node.overlay_problem(pathlib.Path(path)) is None


def test_up_refuses_a_workdir_under_an_overlay_before_doing_anything(tmp_path):
    spec_file = tmp_path / "s.yml"
    spec_file.write_text(yaml.safe_dump(MINIMAL))
    with pytest.raises(fleet.FleetError, match="lies under /var/tmp"):
        fleet.up(spec_file, pathlib.Path("/var/tmp/gpusim-never-made"))
    assert not pathlib.Path("/var/tmp/gpusim-never-made").exists()


def inventory(tmp_path, data=None):
    fl = spec.parse(copy.deepcopy(MINIMAL if data is None else data))
    path = fleet._inventory(fl, tmp_path, "pw")
    return yaml.safe_load(path.read_text())


def test_inventory_has_a_local_slurm_client_outside_the_gpu_groups(tmp_path):
    inv = inventory(tmp_path)
    children = inv["all"]["children"]
    client = children["slurm_clients"]["hosts"]["slurmctl"]
    assert client["ansible_connection"] == "local"
    assert client["ansible_python_interpreter"] == sys.executable
    assert client["gpufleet_slurm_environment"] == {"SLURM_CONF": str(tmp_path / "slurm" / "etc" / "slurm.conf")}
    sku_hosts = children["gpu_nodes"]["children"]["hgx"]["hosts"]
    assert "slurmctl" not in sku_hosts and set(sku_hosts) == {"a01", "a02", "b01"}
    assert children["gpu"] == {"children": {"gpu_nodes": {}}}


def test_inventory_groups_resolve_as_ansible_reads_them(tmp_path):
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    inventory(tmp_path)
    manager = InventoryManager(loader=DataLoader(), sources=[str(tmp_path / "inventory" / "hosts.yml")])
    assert sorted(h.name for h in manager.get_hosts("gpu")) == ["a01", "a02", "b01"]
    assert [h.name for h in manager.get_hosts("slurm_clients")] == ["slurmctl"]
    assert "slurmctl" not in [h.name for h in manager.get_hosts("gpu_nodes")]
    a01 = manager.get_host("a01").get_vars()
    assert (a01["rack"], a01["nvlink_domain"]) == ("r1", "nvl-a")
    assert "rack" not in manager.get_host("b01").get_vars()


def test_group_vars_become_host_vars_and_never_replace_the_simulators(tmp_path):
    hosts = inventory(tmp_path)["all"]["children"]["gpu_nodes"]["children"]["hgx"]["hosts"]
    assert hosts["a01"]["rack"] == "r1" and hosts["a02"]["nvlink_domain"] == "nvl-a"
    assert hosts["a01"]["ansible_host"] == "127.0.21.1"
    assert "rack" not in hosts["b01"]


def with_vars(value):
    data = copy.deepcopy(MINIMAL)
    data["nodes"][0]["vars"] = value
    return data


@pytest.mark.parametrize("value, where, what", [
    ({"Rack": "r1"}, "nodes[0].vars", "is not a variable name"),
    ({"rack\n": "r1"}, "nodes[0].vars", "is not a variable name"),
    ({"1rack": "r1"}, "nodes[0].vars", "is not a variable name"),
    ({"nv-link": "a"}, "nodes[0].vars", "is not a variable name"),
    ({"ansible_host": "10.0.0.1"}, "nodes[0].vars.ansible_host", "reserved"),
    ({"bmc_address": "10.0.0.1"}, "nodes[0].vars.bmc_address", "reserved"),
    ({"groups": "x"}, "nodes[0].vars.groups", "reserved"),
    ({"rack": None}, "nodes[0].vars.rack", "must be a string"),
    (["rack"], "nodes[0].vars", "must be a mapping"),
])
def test_bad_group_vars_are_refused_naming_the_place(value, where, what):
    with pytest.raises(spec.SpecError) as err:
        spec.parse(with_vars(value))
    assert str(err.value).startswith(where + ":") and what in str(err.value)


def test_group_vars_are_not_shared_between_nodes():
    fl = spec.parse(with_vars({"rack": "r1", "tags": ["a"]}))
    fl.nodes[0].host_vars["tags"].append("b")
    assert fl.nodes[1].host_vars["tags"] == ["a"]


# --- Slurm across a simulated reboot ---------------------------------------------------------------------


def test_slurmd_at_boot_runs_as_a_real_boot_runs_it():
    conf = pathlib.Path("/w/slurm/etc/slurm.conf")
    # The time namespace gives slurmd the node's own uptime: no -b, at the first boot or after a reboot.
    assert slurm.slurmd_args("n1", conf, rebooted=True, time_namespace=True) == ["/usr/sbin/slurmd", "-f", str(conf), "-N", "n1"]
    # Without one, -b makes slurmd report its own start as the boot, or Slurm would never see the reboot.
    assert slurm.slurmd_args("n1", conf, rebooted=True, time_namespace=False)[-1] == "-b"
    assert "-b" not in slurm.slurmd_args("n1", conf, rebooted=False, time_namespace=False)


def test_slurmd_pid_file_is_on_the_nodes_run_tmpfs(tmp_path):
    conf = slurm.config(spec.parse(copy.deepcopy(MINIMAL)), tmp_path)
    assert "SlurmdPidFile=/run/slurmd.pid" in conf.splitlines()
    assert f"BatchStartTimeout={slurm.BATCH_START_TIMEOUT}" in conf.splitlines()
    assert f"MessageTimeout={slurm.MESSAGE_TIMEOUT}" in conf.splitlines()


def test_boot_mounts_a_fresh_run_and_can_start_slurmd_later(tmp_path):
    lines = boot_lines(tmp_path)
    assert "mount -t tmpfs -o mode=755,size=64m gpusim-run /run" in lines
    text = "\n".join(lines)
    assert 'if [ -n "${GPUSIM_SLURMD_DELAY:-}" ]; then' in text
    assert '(sleep "$GPUSIM_SLURMD_DELAY"; exec /usr/sbin/slurmd)' in text


def test_a_reboot_that_killed_jobs_holds_slurmd_back_for_slurms_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "jobs_on", lambda workdir, node: ["7", "9"])
    assert slurm.record_lost_jobs(tmp_path, "n1", tmp_path) == ["7", "9"]
    delay, jobs = slurm.slurmd_delay(tmp_path)
    assert jobs == ["7", "9"] and slurm.JOB_GRACE_S - 2 < delay <= slurm.JOB_GRACE_S
    assert slurm.JOB_GRACE_S > slurm.BATCH_START_TIMEOUT + min(10, slurm.MESSAGE_TIMEOUT)
    # Consumed: the next boot (no job died) starts slurmd at once.
    assert slurm.slurmd_delay(tmp_path) == (0.0, [])


def test_the_grace_counts_from_when_the_node_went_down(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "jobs_on", lambda workdir, node: ["7"])
    slurm.record_lost_jobs(tmp_path, "n1", tmp_path)
    record = tmp_path / slurm.LOST_JOBS
    data = json.loads(record.read_text())
    data["down_at"] -= slurm.JOB_GRACE_S + 5  # down long ago (powered off, then powered on)
    record.write_text(json.dumps(data))
    assert slurm.slurmd_delay(tmp_path) == (0.0, ["7"])


def test_a_node_without_jobs_leaves_no_record(tmp_path, monkeypatch):
    (tmp_path / slurm.LOST_JOBS).write_text('{"down_at": 1, "jobs": ["3"]}')  # from an earlier power-off
    monkeypatch.setattr(slurm, "jobs_on", lambda workdir, node: [])
    assert slurm.record_lost_jobs(tmp_path, "n1", tmp_path) == []
    assert not (tmp_path / slurm.LOST_JOBS).exists()


def test_the_node_boot_time_offset_starts_its_uptime_at_zero(monkeypatch):
    monkeypatch.setattr(node, "time_namespace_works", lambda: True)
    cmd = node.unshare_command(pathlib.Path("/nd"))
    offset = int(cmd[cmd.index("--boottime") + 1])
    with open("/proc/uptime") as fh:
        uptime = float(fh.read().split()[0])
    assert 0 <= uptime + offset < 2  # the node's uptime at its boot: 0..1 s (Slurm's BootTime = now - uptime)
