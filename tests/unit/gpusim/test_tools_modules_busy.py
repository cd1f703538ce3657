"""The modules_busy fault: a /dev/nvidia* handle held outside nvidia-smi's view keeps the module loaded until a reboot."""

import pytest
from gpusim import state
from test_tools_support import node_factory


@pytest.fixture
def make_node(tmp_path):
    return node_factory(tmp_path)


def _lsmod_count(node, module: str) -> int:
    for line in node.run("lsmod").stdout.splitlines()[1:]:
        parts = line.split()
        if parts[0] == module:
            return int(parts[2])
    raise AssertionError(f"{module} not in lsmod")


def test_rmmod_refuses_nvidia_although_no_gpu_process(make_node):
    node = make_node(faults=[{"kind": "modules_busy"}])
    assert node.run("systemctl", "stop", "nvidia-persistenced").returncode == 0
    # The users of nvidia go; nvidia itself stays, with a use count and no process on any GPU.
    for mod in ("nvidia_drm", "nvidia_modeset", "nvidia_uvm"):
        assert node.run("rmmod", mod).returncode == 0, mod
    r = node.run("rmmod", "nvidia")
    assert (r.returncode, r.stderr) == (1, "rmmod: ERROR: Module nvidia is in use\n")
    assert _lsmod_count(node, "nvidia") == 1
    apps = node.run("nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader")
    assert (apps.returncode, apps.stdout) == (0, "")
    r = node.run("modprobe", "-r", "nvidia")
    assert (r.returncode, r.stderr) == (1, "modprobe: FATAL: Module nvidia is in use.\n")
    assert node.state["modules"] == ["nvidia"]
    assert node.run("nvidia-uninstall", "--silent").returncode == 1


def test_other_module_and_clear(make_node):
    node = make_node(faults=[{"kind": "modules_busy", "module": "nvidia_uvm"}])
    r = node.run("rmmod", "nvidia_uvm")
    assert (r.returncode, r.stderr) == (1, "rmmod: ERROR: Module nvidia_uvm is in use\n")
    assert node.run("rmmod", "nvidia_drm").returncode == 0
    state.update(node.dir, lambda s: state.clear_faults(s, "modules_busy"))
    assert node.run("rmmod", "nvidia_uvm").returncode == 0


def test_package_staged_while_busy_is_active_after_one_boot(make_node):
    node = make_node(faults=[{"kind": "modules_busy", "holder": "Xorg", "pid": 2222}])
    assert [f["kind"] for f in node.state["faults"]] == ["modules_busy"]
    r = node.run("apt-get", "install", "-y", "nvidia-driver-570-open=570.124.06-1")
    assert r.returncode == 0, r.stdout + r.stderr
    before = node.state
    assert before["driver"]["version"] == "550.90.07"
    assert before["driver"]["staged"]["version"] == "570.124.06"
    assert state.boot(node.dir) is True
    after = node.state
    assert (after["driver"]["version"], after["driver"]["method"], after["driver"]["staged"]) == ("570.124.06", "package", None)
    assert after["boot_count"] == before["boot_count"] + 1 and after["boot_id"] != before["boot_id"]
    # The holder died with the reboot: the module unloads again.
    assert after["faults"] == []
    assert node.run("systemctl", "stop", "nvidia-persistenced").returncode == 0
    for mod in ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"):
        assert node.run("rmmod", mod).returncode == 0, mod


def test_pending_modules_busy_starts_at_boot(make_node):
    node = make_node(faults=[{"kind": "modules_busy", "when": "boot"}])
    assert node.state["faults"] == []
    state.boot(node.dir)
    assert [f["kind"] for f in node.state["faults"]] == ["modules_busy"]
