"""_driver_node.Node.gpu_processes: an empty list only when no driver is loaded; anything else unreadable fails."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _tools
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.node import DriverError, Node
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._host import Host

APPS = ["/usr/bin/nvidia-smi", "--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]
PROC_VERSION = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  (dvs-builder@U16-I3-B03-4-3)  Wed May 29 2024\n"


class FakeModule:
    """Just what the tool wrappers use: get_bin_path and run_command, answering from a table."""

    def __init__(self, smi=True, answer=(0, "", "")):
        self.smi = smi
        self.answer = answer
        self.calls = []

    def get_bin_path(self, name, required=False, opt_dirs=None):
        if name == "timeout":
            return "/usr/bin/timeout"
        return "/usr/bin/nvidia-smi" if name == "nvidia-smi" and self.smi else None

    def run_command(self, cmd, **_kwargs):
        assert cmd[:2] == ["/usr/bin/timeout", "--kill-after=10"], cmd
        self.calls.append(cmd[3:])
        return self.answer


@pytest.fixture(autouse=True)
def fake_processes(monkeypatch):
    """The wrappers start every process through _tools.run_process: here the FakeModule answers instead."""
    monkeypatch.setattr(_tools, "run_process", lambda module, cmd, **kwargs: module.run_command(cmd, **kwargs))


def make_node(tmp_path, loaded, **module):
    root = tmp_path / "root"
    (root / "proc/driver/nvidia").mkdir(parents=True)
    if loaded:
        (root / "proc/driver/nvidia/version").write_text(PROC_VERSION)
    fake = FakeModule(**module)
    return Node(fake, host=Host(str(root))), fake


def test_no_driver_loaded_means_no_processes(tmp_path):
    node, fake = make_node(tmp_path, loaded=False, answer=(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", ""))
    assert node.gpu_processes() == []
    assert fake.calls == [APPS]


def test_no_nvidia_smi_and_no_driver_means_no_processes(tmp_path):
    node, fake = make_node(tmp_path, loaded=False, smi=False)
    assert node.gpu_processes() == []
    assert fake.calls == []


@pytest.mark.parametrize(
    ("rc", "stderr"),
    [
        (15, "Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error\n"),
        (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"),
        (18, "Failed to initialize NVML: Driver/library version mismatch\n"),
        (124, ""),
    ],
    ids=["gpu-lost", "no-driver-but-loaded", "version-mismatch", "timeout"],
)
def test_unreadable_processes_with_a_loaded_driver_fail(tmp_path, rc, stderr):
    node, _fake = make_node(tmp_path, loaded=True, answer=(rc, "", stderr))
    with pytest.raises(DriverError) as caught:
        node.gpu_processes()
    if rc == 124:  # a hung nvidia-smi: stopped by its time limit, and the message says so
        assert caught.value.msg.startswith("cannot list the GPU processes (nvidia-smi did not finish within 120 s")
        assert caught.value.cmd == ["/usr/bin/timeout", "--kill-after=10", "120", *APPS]
    else:
        assert caught.value.msg.startswith(f"cannot list the GPU processes (nvidia-smi exit status {rc}: ")
        assert (caught.value.cmd, caught.value.stderr) == (APPS, stderr)
    assert "nothing was changed" in caught.value.msg
    assert caught.value.rc == rc


def test_loaded_driver_without_nvidia_smi_fails(tmp_path):
    node, _fake = make_node(tmp_path, loaded=True, smi=False)
    with pytest.raises(DriverError, match=r"^cannot list the GPU processes \(the nvidia module is loaded but nvidia-smi was not found\)"):
        node.gpu_processes()


@pytest.mark.parametrize("policy", ["refuse", "wait", "kill"])
def test_no_policy_passes_an_unreadable_busy_node(tmp_path, policy):
    node, fake = make_node(tmp_path, loaded=True, answer=(15, "424242, python3, GPU-5d3c0b8e, 30712\n", "Unknown Error\n"))
    node.kill = lambda pid, sig: pytest.fail(f"signal {sig} sent to {pid}")
    with pytest.raises(DriverError, match=r"^cannot list the GPU processes"):
        node.clear_gpu_processes(policy, timeout=1)
    assert fake.calls == [APPS]


def test_listed_processes_are_parsed(tmp_path):
    node, _fake = make_node(tmp_path, loaded=True, answer=(0, "424242, python3, GPU-5d3c0b8e-1a2b-3c4d-5e6f-708192a3b4c5, 30712\n", ""))
    [proc] = node.gpu_processes()
    assert (proc["pid"], proc["process_name"], proc["used_memory"]) == (424242, "python3", 30712)
