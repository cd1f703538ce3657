"""_host: the one reading of PCI ids, NVSwitch presence and the fabric manager version (gpu_facts, gpu_validate, nvidia_driver)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _host
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import ToolError


def pci(root, address, vendor, pci_class):
    device = root / "sys/bus/pci/devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    (device / "class").write_text(pci_class + "\n")


@pytest.fixture
def host(tmp_path):
    pci(tmp_path, "0000:18:00.0", "0x10de", "0x030200")  # H100 (3D controller)
    pci(tmp_path, "0000:19:00.0", "0x10DE", "0x030000")  # VGA controller, vendor id in capitals
    pci(tmp_path, "0000:05:00.0", "0x10de", "0x068000")  # NVSwitch (other bridge)
    pci(tmp_path, "0000:1a:00.0", "0x15b3", "0x020700")  # ConnectX-7 (InfiniBand)
    pci(tmp_path, "0000:00:02.0", "0x8086", "0x030000")  # someone else's VGA
    pci(tmp_path, "0000:40:00.0", "0x10de0", "0x030200")  # not exactly NVIDIA's id
    return _host.Host(str(tmp_path))


def test_gpus_are_nvidia_display_and_3d_controllers_by_exact_vendor_id(host):
    assert host.gpus() == ["0000:18:00.0", "0000:19:00.0"]


def test_nics_by_vendor_and_class(host):
    assert host.pci_devices(_host.MELLANOX_VENDOR, _host.NIC_CLASS_PREFIXES) == ["0000:1a:00.0"]


def test_nvswitches_from_pci_when_the_nvswitch_driver_is_not_loaded(host):
    assert host.nvswitches() == ["0000:05:00.0"]


def test_nvswitches_from_the_nvswitch_driver_first(host, tmp_path):
    for address in ("0000:06:00.0", "0000:05:00.0"):
        (tmp_path / "proc/driver/nvidia-nvswitch/devices" / address).mkdir(parents=True)
    assert host.nvswitches() == ["0000:05:00.0", "0000:06:00.0"]


def test_no_nvswitch_on_a_pcie_node(tmp_path):
    pci(tmp_path, "0000:18:00.0", "0x10de", "0x030200")
    assert _host.Host(str(tmp_path)).nvswitches() == []


def test_unreadable_files_read_as_none(tmp_path):
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").mkdir()  # a directory, not a file
    (tmp_path / "proc/binary").write_bytes(b"\xff\xfe\x00")
    host = _host.Host(str(tmp_path))
    assert host.read("proc/driver/nvidia/version") is None
    assert host.read("proc/binary") is None
    assert host.read("proc/absent") is None
    assert host.boot_id() is None


def test_kernel_release_and_boot_id(tmp_path):
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.1.0-28-amd64\n")
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("b6c1a7f0\n")
    host = _host.Host(str(tmp_path))
    assert host.kernel_release() == "6.1.0-28-amd64"
    assert host.boot_id() == "b6c1a7f0"


class FakeFabricManager:
    """A _tools.FabricManager stand-in: answers --version from (rc, stdout, stderr)."""

    def __init__(self, answer, path="/usr/bin/nv-fabricmanager"):
        self.answer = answer
        self.path = path
        self.calls = []

    @property
    def available(self):
        return bool(self.path)

    def run(self, args, ok_rcs=(0,), timeout=None, data=None):
        self.calls.append((list(args), timeout))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_fabric_manager_version_read():
    tool = FakeFabricManager((0, "Fabric Manager version is : 550.90.07\n", ""))
    assert _host.fabricmanager_version(tool, timeout=30) == {"installed": True, "version": "550.90.07"}
    assert tool.calls == [(["--version"], 30)]


def test_fabric_manager_absent_starts_nothing():
    tool = FakeFabricManager(None, path=None)
    assert _host.fabricmanager_version(tool) == {"installed": False, "version": None}
    assert tool.calls == []


@pytest.mark.parametrize("rc", [126, 127])
def test_fabric_manager_wrapper_whose_program_is_gone_is_not_installed(rc):
    assert _host.fabricmanager_version(FakeFabricManager((rc, "", "exec: nv-fabricmanager: not found\n"))) == {"installed": False, "version": None}


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ("Segmentation fault\n", r"^nv-fabricmanager --version printed no whole version \(exit status 0; nv-fabricmanager --version: no 'Fabric Manager"),
        ("Fabric Manager version is : 535.161\n", r"^nv-fabricmanager --version printed no whole version \(exit status 0; .*535\.161"),
    ],
)
def test_fabric_manager_without_a_whole_version_raises_host_error_with_the_command(stdout, expected):
    with pytest.raises(_host.HostError, match=expected) as caught:
        _host.fabricmanager_version(FakeFabricManager((0, stdout, "")))
    assert caught.value.fail_kwargs()["cmd"] == ["/usr/bin/nv-fabricmanager", "--version"]
    assert caught.value.fail_kwargs()["stdout"] == stdout


def test_hung_fabric_manager_raises_the_tool_error():
    hung = ToolError("nv-fabricmanager --version did not finish within 30 s (timed out and was stopped)", rc=124)
    with pytest.raises(ToolError, match="did not finish within 30 s"):
        _host.fabricmanager_version(FakeFabricManager(hung), timeout=30)
