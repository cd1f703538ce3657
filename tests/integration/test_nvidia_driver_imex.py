"""The nvidia_driver role on one GB200 NVLink domain of 4 simulated trays over real SSH (issue 23).

tests/gpusim/specs/nvl72-4.yml: trays on driver 580.95.05 with nvidia-imex 580.95.05 and a nodes_config.cfg listing the
domain. The role (not a rollout) upgrades the whole domain to 590.48.01 in one play with CDMM on: check mode first (a
tray whose nodes_config.cfg was reordered shows it as a change; nothing on any tray moves), then the real run, then the
same run again and in check mode (no change). Afterwards every tray runs the new driver with nvidia-imex held at exactly
its version, the same nodes_config.cfg, CDMM read back from /proc/driver/nvidia/params, and the IMEX domain UP.
Run: .venv/bin/python -m pytest tests/integration/test_nvidia_driver_imex.py -m integration -q
"""

from __future__ import annotations

import json

import pytest
from fleet import TESTS, Fleet, fleet_up, json_doc, needs_fleet
from gpusim import artifacts
from gpusim import state as gstate

SPEC = TESTS / "gpusim" / "specs" / "nvl72-4.yml"
OLD, NEW = "580.95.05", "590.48.01"
TRAYS = ("nvl-a01", "nvl-a02", "nvl-a03", "nvl-a04")
STATE_FILE = "/var/lib/gpusim/gpufleet.fact"  # the node's own folder (see test_nvidia_driver.py)
PLAYBOOK = """
- name: nvidia_driver role on one NVLink domain
  hosts: gb200_nvl72
  gather_facts: false
  tasks:
    - name: Upgrade the domain's driver, IMEX and module parameters
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.nvidia_driver
"""

pytestmark = needs_fleet()


class Domain(Fleet):
    def __init__(self, workdir, runfiles):
        super().__init__(workdir)
        self.runfiles = runfiles
        self.playbook = workdir / "driver.yml"
        self.playbook.write_text(PLAYBOOK)

    def role(self, *, check=False):
        variables = {
            "nvidia_driver_version": NEW, "nvidia_driver_method": "runfile", **{f"nvidia_driver_{k}": v for k, v in self.runfiles[NEW].items()},
            "nvidia_driver_runfiles": self.runfiles, "nvidia_driver_state_file": STATE_FILE, "nvidia_driver_hold_kernel": False,
            "nvidia_driver_cdmm": True, "nvidia_driver_poll_interval": 1, "nvidia_driver_imex_timeout": 60,
        }
        proc = self.ansible_playbook(self.playbook, "-e", json.dumps(variables), "--diff", *(["--check"] if check else []),
                                     timeout=600, json_output=True)
        doc = json_doc(proc)
        assert proc.returncode == 0, [(t["task"]["name"], h, r.get("msg")) for p in doc["plays"] for t in p["tasks"]
                                      for h, r in t["hosts"].items() if r.get("failed")]
        return doc

    def sim(self, name):
        return gstate.load(self.node_dir(name))

    def etc(self, name, path):
        target = self.node_dir(name) / "disk" / "etc" / "upper" / path
        return target.read_text() if target.exists() else None


def changed_tasks(doc, host):
    """The names (without the role's prefix) of the tasks that changed host."""
    return [t["task"]["name"].split(" : ", 1)[-1] for p in doc["plays"] for t in p["tasks"] if t["hosts"].get(host, {}).get("changed")]


@pytest.fixture(scope="module")
def domain(tmp_path_factory):
    base = tmp_path_factory.mktemp("gpusim-nvl4")
    runfiles = {}
    for version in (OLD, NEW):
        path = artifacts.write_driver_runfile(base / "runfiles", version)
        runfiles[version] = {"source": str(path), "checksum": "sha256:" + artifacts.sha256_file(path)}
    with fleet_up(SPEC, base / "fleet", timeout=240) as workdir:
        yield Domain(workdir, runfiles)


def test_the_role_upgrades_a_whole_domain_with_imex_pinned_and_the_domain_up(domain):
    config = domain.etc("nvl-a01", "nvidia-imex/nodes_config.cfg")
    assert config.splitlines() == [domain.address[t] for t in TRAYS]
    # a tray whose nodes_config.cfg differs (reordered: other node ids, a node-map mismatch)
    reordered = "".join(reversed(config.splitlines(keepends=True)))
    (domain.node_dir("nvl-a04") / "disk" / "etc" / "upper" / "nvidia-imex" / "nodes_config.cfg").write_text(reordered)
    before = {t: domain.sim(t) for t in TRAYS}

    check = domain.role(check=True)
    for tray in TRAYS:
        sim = domain.sim(tray)
        assert (sim["driver"]["version"], sim["imex"]["version"]) == (OLD, OLD), tray
        assert sim.get("apt") == before[tray].get("apt") and domain.etc(tray, "modprobe.d/gpufleet-nvidia.conf") is None
        assert "Write the IMEX domain's nodes_config.cfg (the same on every tray of the NVLink domain)" in changed_tasks(check, tray) or tray != "nvl-a04"
        assert "Keep the installer's result" in changed_tasks(check, tray), changed_tasks(check, tray)
    assert domain.etc("nvl-a04", "nvidia-imex/nodes_config.cfg") == reordered

    domain.role()
    for tray in TRAYS:
        sim = domain.sim(tray)
        assert sim["driver"]["version"] == NEW and sim["imex"]["version"] == NEW, tray
        assert "nvidia-imex" in sim["apt"]["held"], (tray, sim["apt"])
        assert sim["services"]["nvidia-imex"]["active"] and sim["imex"]["running"] == NEW, tray
        assert domain.etc(tray, "nvidia-imex/nodes_config.cfg") == config, tray
        assert "NVreg_CoherentGPUMemoryMode=driver" in domain.etc(tray, "modprobe.d/gpufleet-nvidia.conf")
        assert domain.ssh_ok(tray, "grep Coherent /proc/driver/nvidia/params").strip() == 'CoherentGPUMemoryMode: "driver"'
    ctl = domain.ssh_ok("nvl-a02", "nvidia-imex-ctl -N")
    nodes = ctl.split("\nNodes:\n", 1)[1]  # after the legend, which names every mark
    assert "Domain State: UP" in nodes and "!V!" not in nodes and "!M!" not in nodes and nodes.count("Version: 590.48") == 4

    again = domain.role()
    again_check = domain.role(check=True)
    for tray in TRAYS:
        assert changed_tasks(again, tray) == [], (tray, changed_tasks(again, tray))
        assert changed_tasks(again_check, tray) == [], (tray, changed_tasks(again_check, tray))
