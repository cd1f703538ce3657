"""Simulated node tools other than nvidia-smi: driver install, modules, services, reboot,
diagnostics, firmware tools, and boot()."""

import json

import pytest
from gpusim import artifacts, state
from test_tools_support import SimNode, node_factory


@pytest.fixture
def make_node(tmp_path):
    return node_factory(tmp_path)


def _unload_all(node: SimNode) -> None:
    node.run("systemctl", "stop", "nvidia-persistenced")
    for mod in ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"):
        assert node.run("rmmod", mod).returncode == 0, mod


def test_rmmod_refuses_while_in_use(make_node):
    node = make_node()
    r = node.run("rmmod", "nvidia")
    assert r.returncode == 1
    assert "rmmod: ERROR: Module nvidia is in use by: nvidia_modeset nvidia_uvm" in r.stderr
    node.fault("gpu_process", gpu=0)
    for mod in ("nvidia_drm", "nvidia_modeset"):
        assert node.run("rmmod", mod).returncode == 0
    r = node.run("rmmod", "nvidia_uvm")
    assert r.returncode == 1 and "Module nvidia_uvm is in use" in r.stderr


def test_runfile_install_needs_unloaded_modules(make_node):
    node = make_node()
    run = artifacts.write_driver_runfile(node.dir / "art", "570.124.06")
    assert len(artifacts.sha256_file(run)) == 64
    r = node.exec(str(run), "--silent", "--dkms", "-m=kernel-open")
    assert r.returncode == 1
    assert "ERROR: An NVIDIA kernel module 'nvidia' appears to already be loaded in your kernel." in r.stdout
    assert node.state["driver"]["version"] == "550.90.07"
    _unload_all(node)
    assert not (node.dir / "proc_driver" / "nvidia").exists()
    r = node.exec(str(run), "--silent", "--no-questions", "--ui=none", "--dkms", "-m=kernel-open")
    assert r.returncode == 0, r.stdout + r.stderr
    assert node.state["driver"]["version"] == "570.124.06"
    # nvidia-smi loads the module again, like nvidia-modprobe
    assert node.run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0").stdout == "570.124.06\n"
    assert "570.124.06" in (node.dir / "proc_driver" / "nvidia" / "version").read_text()


def test_runfile_dkms_failure_and_bad_flag(make_node):
    node = make_node(faults=[{"kind": "dkms_fail"}])
    run = artifacts.write_driver_runfile(node.dir / "art", "570.124.06")
    _unload_all(node)
    r = node.exec(str(run), "--silent", "--dkms")
    assert r.returncode == 1
    assert "Error! Bad return status for module build on kernel: 5.15.0-119-generic (x86_64)" in r.stdout
    assert "ERROR: Installation has failed." in r.stdout
    assert "dkms build -m nvidia -v 570.124.06" in (node.dir / "nvidia-installer.log").read_text()
    assert node.state["driver"]["version"] == "550.90.07"
    r = node.exec(str(run), "--no-such-flag")
    assert r.returncode == 1 and 'unrecognized option: "--no-such-flag"' in r.stdout


def test_shutdown_writes_reboot_request(make_node):
    node = make_node()
    r = node.run("shutdown", "-r", "+1", "Reboot initiated by Ansible")
    assert r.returncode == 0
    assert r.stdout.startswith("Reboot scheduled for ")
    req = json.loads((node.dir / "reboot.request").read_text())
    assert req["delay_s"] == 60 and req["action"] == "reboot"
    assert node.run("shutdown", "-c").returncode == 0
    assert not (node.dir / "reboot.request").exists()
    assert node.run("systemctl", "reboot").returncode == 0
    assert json.loads((node.dir / "reboot.request").read_text())["delay_s"] == 0


def test_fabricmanager_mismatch(make_node):
    node = make_node()
    assert node.run("systemctl", "is-active", "nvidia-fabricmanager").stdout == "active\n"
    node.fault("fm_mismatch", version="550.90.06")
    r = node.run("systemctl", "status", "nvidia-fabricmanager")
    assert r.returncode == 3
    assert ("fabric manager NVIDIA GPU driver interface version 550.90.06 don't match with driver version 550.90.07. "
            "Please update with matching NVIDIA driver package.") in r.stdout
    r = node.run("systemctl", "restart", "nvidia-fabricmanager.service")
    assert r.returncode == 1 and "Job for nvidia-fabricmanager.service failed" in r.stderr
    assert node.run("nv-fabricmanager", "--version").stdout == "Fabric Manager version is : 550.90.06\n"
    assert node.run("systemctl", "status", "slurmd").returncode == 4


def test_dcgm_fail_fault(make_node):
    node = make_node()
    ok = node.run("dcgmi", "diag", "-r", "2")
    assert ok.returncode == 0 and "| GPU Memory                | Pass - All" in ok.stdout
    node.fault("dcgm_fail", test="GPU Memory", gpu=3)
    bad = node.run("dcgmi", "diag", "-r", "2", "-j")
    assert bad.returncode != 0
    doc = json.loads(bad.stdout)
    mem = next(t for c in doc["DCGM Diagnostic"]["test_categories"] for t in c["tests"] if t["name"] == "memory")
    assert [r["status"] for r in mem["results"]][3] == "Fail"
    assert node.run("dcgmi", "diag", "-r", "7").returncode == 1


def test_nccl_low_and_thermal_burn(make_node):
    node = make_node()

    def avg(n):
        out = n.run("all_reduce_perf", "-b", "1G", "-e", "1G", "-g", "8").stdout
        return float(out.split("# Avg bus bandwidth    : ")[1].split()[0])

    before = avg(node)
    node.fault("nccl_low", factor=0.5)
    assert avg(node) < before * 0.6
    node.fault("thermal_slowdown", gpu=7)
    out = node.run("gpu_burn", "-d", "10").stdout
    line = next(x for x in out.splitlines() if x.startswith("100.0%"))
    rates = [float(x.split(" Gflop/s")[0]) for x in line.split("(")[1:9]]
    assert rates[7] < rates[0] * 0.7
    assert out.rstrip().endswith("GPU 7: OK")
    node.fault("ecc_dbe", gpu=2)
    assert "\tGPU 2: FAULTY" in node.run("gpu_burn", "10").stdout


def test_gpu_reset_refused_while_a_process_runs(make_node):
    node = make_node()
    state.update(node.dir, lambda s: s["gpus"][1].update(staged_vbios="96.00.AF.00.01"))
    node.fault("gpu_process", gpu=1)
    r = node.run("nvidia-smi", "-r", "-i", "1")
    assert r.returncode == 255
    assert "GPU 00000000:2A:00.0: In use by another client" in r.stdout
    assert node.state["gpus"][1]["vbios"] == "96.00.A5.00.01"
    state.update(node.dir, lambda s: s.update(processes=[]))
    r = node.run("nvidia-smi", "-r", "-i", "1")
    assert r.returncode == 0 and r.stdout == "GPU 00000000:2A:00.0 was successfully reset.\nAll done.\n"
    assert (node.state["gpus"][1]["vbios"], node.state["gpus"][1]["staged_vbios"]) == ("96.00.AF.00.01", None)


def test_mlx_psid_mismatch_and_reset_activation(make_node):
    node = make_node()
    good = artifacts.write_mlx_image(node.dir / "art", "MT_0000000838", "28.43.1014")
    other = artifacts.write_mlx_image(node.dir / "art", "MT_0000000999", "28.43.1014")
    dev = "/dev/mst/mt4129_pciconf0"
    r = node.run("flint", "-d", dev, "-i", str(other), "-y", "burn")
    assert r.returncode == 1
    assert "-E- PSID mismatch. The PSID on flash (MT_0000000838) differs from the PSID in the given image (MT_0000000999)." in r.stdout
    q = node.run("mlxfwmanager", "--query", "-i", str(other)).stdout
    assert "Status:           No matching image found" in q
    r = node.run("mlxfwmanager", "-u", "-i", str(good), "-y")
    assert r.returncode == 0 and "Restart needed for updates to take effect." in r.stdout
    assert node.state["nics"][0]["fw"] == "28.39.1002"
    assert "FW Version(Running):   28.39.1002" in node.run("flint", "-d", dev, "q").stdout
    assert node.run("mlxfwreset", "-d", dev, "--level", "3", "-y", "reset").returncode == 0
    assert node.state["nics"][0]["fw"] == "28.43.1014"
    xml = node.run("mlxfwmanager", "--query", "--query-format", "XML").stdout
    assert 'current="28.43.1014"' in xml


def test_boot_faults_no_return_and_gpu_missing_after_upgrade(make_node):
    node = make_node(faults=[{"kind": "gpu_missing", "gpu": 5, "when": "upgrade"}])
    assert state.boot(node.dir) is True
    assert len(state.visible_gpus(node.state)) == 8  # no upgrade yet
    state.update(node.dir, lambda s: s["driver"].__setitem__("staged", {"version": "570.124.06"}))
    assert state.boot(node.dir) is True
    assert node.state["driver"]["version"] == "570.124.06"
    assert len(state.visible_gpus(node.state)) == 7
    node.fault("no_return")
    assert state.boot(node.dir) is False


def _xid79_lines(node: SimNode) -> list[str]:
    return [e["msg"] for e in node.state["kernel_log"] if "Xid" in e["msg"] and ": 79," in e["msg"]]


def test_an_upgrade_fault_fires_when_the_new_driver_loads_in_place(make_node):
    """Runfile install + module reload, no reboot: the fault "after upgrade" fires at the new module's first load."""
    node = make_node(faults=[{"kind": "xid79", "gpu": 2, "when": "upgrade"}])
    # Reloading the running driver is no upgrade.
    _unload_all(node)
    assert node.run("modprobe", "nvidia").returncode == 0
    assert not _xid79_lines(node) and node.state["pending_faults"]
    assert node.run("rmmod", "nvidia").returncode == 0
    run = artifacts.write_driver_runfile(node.dir / "art", "570.124.06")
    r = node.exec(str(run), "--silent", "--no-questions", "--ui=none", "--dkms", "-m=kernel-open")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not _xid79_lines(node)  # installed, not loaded yet
    assert node.run("modprobe", "nvidia").returncode == 0
    assert node.state["gpus"][2]["fell_off"] is True
    assert len(_xid79_lines(node)) == 1 and node.state["pending_faults"] == []
    assert "GPU has fallen off the bus" in node.run("dmesg").stdout
    # Once: the next reload of the same driver adds nothing.
    assert node.run("rmmod", "nvidia").returncode == 0
    assert node.run("modprobe", "nvidia").returncode == 0
    assert len(_xid79_lines(node)) == 1


def test_an_upgrade_fault_fires_when_nvidia_smi_autoloads_the_new_driver(make_node):
    node = make_node(faults=[{"kind": "ecc_dbe", "gpu": 1, "count": 2, "when": "upgrade"}])
    _unload_all(node)
    run = artifacts.write_driver_runfile(node.dir / "art", "570.124.06")
    assert node.exec(str(run), "--silent", "--dkms").returncode == 0
    assert node.state["gpus"][1]["ecc"]["volatile_dbe"] == 0
    assert node.run("nvidia-smi", "-L").returncode == 0  # loads the module, as nvidia-modprobe does
    assert node.state["gpus"][1]["ecc"]["volatile_dbe"] == 2


def test_an_upgrade_fault_fires_when_a_staged_driver_boots_and_only_once(make_node):
    node = make_node(faults=[{"kind": "xid79", "gpu": 0, "when": "upgrade"}])
    state.update(node.dir, lambda s: s["driver"].__setitem__("staged", {"version": "570.124.06"}))
    assert state.boot(node.dir) is True
    assert node.state["driver"]["version"] == "570.124.06" and node.state["gpus"][0]["fell_off"] is True
    assert state.boot(node.dir) is True  # the next boot: the same driver, the GPU is back
    assert node.state["gpus"][0]["fell_off"] is False and not _xid79_lines(node)


def test_no_return_after_upgrade_keeps_only_the_upgrading_boot_down(make_node):
    node = make_node(faults=[{"kind": "no_return", "when": "upgrade"}])
    assert state.boot(node.dir) is True  # a plain reboot comes back
    state.update(node.dir, lambda s: s["driver"].__setitem__("staged", {"version": "570.124.06"}))
    assert state.boot(node.dir) is False
    assert node.state["down"] is True


def test_dkms_fail_of_one_version_lets_the_rollback_build(make_node):
    node = make_node(faults=[{"kind": "dkms_fail", "version": "570.124.06"}])
    _unload_all(node)
    new = artifacts.write_driver_runfile(node.dir / "art", "570.124.06")
    r = node.exec(str(new), "--silent", "--dkms")
    assert r.returncode == 1 and "Bad return status for module build" in r.stdout
    assert node.state["driver"]["version"] == "550.90.07"
    old = artifacts.write_driver_runfile(node.dir / "art", "550.90.07")
    r = node.exec(str(old), "--silent", "--dkms")
    assert r.returncode == 0, r.stdout + r.stderr
