"""The ofed role on simulated nodes over real SSH (gpusim): one small fleet of 2 nodes (tests/fixtures/ofed/fleet-ofed.yml).

MLNX_OFED 24.04 -> 24.10 from a bundle whose mlnxofedinstall is the simulator's (gpusim/ofed.py writes it; the real tool's
output and behaviour: without --without-fw-update it burns every NIC older than 24.10's bundled 28.43.2026). Shows, on
the nodes: check mode changes nothing; the install leaves the NICs' firmware (running and on flash) untouched; the stack
is reloaded in place (openibd restart) on ofed-01 and by a reboot on ofed-sm, where opensm holds it; nvidia_peermem,
built against the old OFED, is rebuilt (DKMS) and loaded after; a second run changes nothing; the last known good OFED
is recorded, and the rollback entry point restores it. On ofed-sb, which enforces Secure Boot, the DKMS rebuild (which
reinstalls nvidia.ko too) is refused without the fleet's enrolled key and signed with it when given. Run:
    .venv/bin/python -m pytest tests/integration/test_ofed.py -m integration -q
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from fleet import TESTS, fleet_up, json_doc, needs_fleet
from fleet import Fleet as BaseFleet
from gpusim import ofed as sim_ofed
from gpusim import state as gstate

SPEC = TESTS / "fixtures" / "ofed" / "fleet-ofed.yml"
OLD, NEW = "24.04-0.6.6", "24.10-1.1.4.0"
NIC_FW = "28.39.1002"
STATE_FILE = "/var/lib/gpusim/gpufleet.fact"  # inside the node's own folder
NODES = ("ofed-01", "ofed-sm")

pytestmark = needs_fleet()

PLAYBOOK = """
- name: ofed role entry point on simulated nodes
  hosts: "{{ targets }}"
  gather_facts: false
  tasks:
    - name: Run the entry point
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.ofed
        tasks_from: "{{ entry }}"
"""


class Fleet(BaseFleet):
    def __init__(self, workdir: pathlib.Path, bundles: dict[str, dict[str, str]], work: pathlib.Path):
        super().__init__(workdir)
        self.bundles = bundles
        self.work = work
        self.playbook = workdir / "ofed.yml"
        self.playbook.write_text(PLAYBOOK)

    def role(self, entry: str, *, check: bool = False, targets: tuple[str, ...] = NODES, **extra) -> subprocess.CompletedProcess:
        variables = {"targets": ",".join(targets), "entry": entry, "ofed_flavor": "mlnx-ofed", "ofed_version": NEW,
                     "ofed_bundles": self.bundles, "ofed_bundle_dir": str(self.work), "ofed_state_file": STATE_FILE,
                     "ofed_reboot_timeout": 120, "ofed_rollout_id": "it-ofed", **extra}
        return self.ansible_playbook(self.playbook, "-e", json.dumps(variables), *(["--check"] if check else []), json_output=True)

    def sim(self, name: str) -> dict:
        return gstate.load(self.node_dir(name))

    def nics(self, name: str) -> list[tuple[str, str | None]]:
        return [(nic["fw"], nic.get("staged_fw")) for nic in self.sim(name)["nics"]]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("gpusim-ofed")
    bundles = sim_ofed.write_bundles(base / "bundles", (OLD, NEW))
    with fleet_up(SPEC, base / "fleet"):
        yield Fleet(base / "fleet", bundles, base / "work")


def stats(proc: subprocess.CompletedProcess) -> dict[str, dict]:
    doc = json_doc(proc)["stats"]
    for name in NODES:
        assert name in doc and doc[name]["failures"] == 0 and doc[name]["unreachable"] == 0, (proc.stdout[-5000:], proc.stderr[-2000:])
    return doc


def test_ofed_upgrade_check_real_again(fleet):
    check = stats(fleet.role("main", check=True))
    assert all(check[name]["changed"] > 0 for name in NODES)
    for name in NODES:
        assert fleet.sim(name)["stack"]["ofed"]["version"] == OLD and fleet.nics(name) == [(NIC_FW, None)] * 2
    boots = {name: fleet.sim(name)["boot_count"] for name in NODES}

    real = fleet.role("main")
    stats(real)
    for name in NODES:
        node = fleet.sim(name)
        assert node["stack"]["ofed"]["version"] == NEW and node["stack"]["ofed"]["loaded"] == NEW, name
        assert fleet.nics(name) == [(NIC_FW, None)] * 2, name  # neither running nor on flash: no firmware step ran
        assert "nvidia_peermem" in node["modules"], name
        assert node["driver"]["peermem_ofed"] == f"mlnx-ofed-{NEW}", name
        fact = json.loads((fleet.node_dir(name) / "gpufleet.fact").read_text())
        assert fact["last_known_good"]["ofed"]["version"] == OLD
        upgrade = [(h["result"], h["rollout_id"]) for h in fact["history"] if (h["component"], h["action"]) == ("ofed", "upgrade")]
        assert upgrade == [("started", "it-ofed"), ("reboot_required" if name == "ofed-sm" else "ok", "it-ofed")], fact["history"]
    # opensm held ofed-sm's stack: it was reloaded by a reboot; ofed-01's in place (openibd restart)
    assert fleet.sim("ofed-sm")["boot_count"] == boots["ofed-sm"] + 1
    assert fleet.sim("ofed-01")["boot_count"] == boots["ofed-01"]

    again = stats(fleet.role("main"))
    assert all(again[name]["changed"] == 0 for name in NODES), again
    again_check = stats(fleet.role("main", check=True))
    assert all(again_check[name]["changed"] == 0 for name in NODES), again_check

    # the rollback restores the last known good release (and rebuilds nvidia_peermem against it), NICs untouched
    stats(fleet.role("rollback"))
    for name in NODES:
        node = fleet.sim(name)
        assert (node["stack"]["ofed"]["version"], node["stack"]["ofed"]["loaded"]) == (OLD, OLD), name
        assert "nvidia_peermem" in node["modules"] and node["driver"]["peermem_ofed"] == f"mlnx-ofed-{OLD}", name
        assert fleet.nics(name) == [(NIC_FW, None)] * 2, name
        fact = json.loads((fleet.node_dir(name) / "gpufleet.fact").read_text())
        assert fact["last_known_good"]["ofed"]["version"] == OLD  # the rollback records nothing new
        downgrade = [h["result"] for h in fact["history"] if h["action"] == "downgrade"]
        assert downgrade == ["started", "reboot_required" if name == "ofed-sm" else "ok"], fact["history"]


def test_under_secure_boot_the_rebuild_needs_the_fleet_key_and_is_signed_with_it(fleet):
    """Without the key the role refuses before anything changes (DKMS would sign the rebuilt modules with a key of its own,
    which the kernel refuses: nvidia_peermem at once, nvidia at the next boot). With the enrolled key the rebuilt modules
    are the key's, nvidia_peermem loads, and nothing of the key is left on the node or in the output."""
    from test_nvidia_driver import signing_pair

    node = ("ofed-sb",)
    before = fleet.sim("ofed-sb")
    refused = fleet.role("main", targets=node)
    assert refused.returncode != 0
    said = " ".join(refused.stdout.split())
    assert "rebuilds nvidia_peermem with DKMS" in said and "no module signing key was given" in said, said[-3000:]
    sim = fleet.sim("ofed-sb")
    assert sim["stack"]["ofed"] == before["stack"]["ofed"] and sim["modules"] == before["modules"] and sim["driver"] == before["driver"]
    assert not (fleet.node_dir("ofed-sb") / "gpufleet.fact").exists()

    pem_key, pem_cert, sha1 = signing_pair()
    gstate.update(fleet.node_dir("ofed-sb"), lambda s: s["stack"]["secure_boot"]["keys"].append({"sha1": sha1, "cn": "gpufleet test MOK"}))
    done = fleet.role("main", targets=node, ofed_secure_boot="enforced", ofed_module_signing_key=pem_key,
                      ofed_module_signing_certificate=pem_cert, ofed_module_signing_certificate_sha1=sha1)
    doc = json_doc(done)["stats"]
    assert doc["ofed-sb"]["failures"] == 0, done.stdout[-5000:]
    sim = fleet.sim("ofed-sb")
    assert sim["stack"]["ofed"]["version"] == NEW and "nvidia_peermem" in sim["modules"]
    assert sim["driver"]["peermem_ofed"] == f"mlnx-ofed-{NEW}" and sim["driver"]["signature"]["sha1"] == sha1
    assert "signer:         gpufleet test MOK" in fleet.ssh_ok("ofed-sb", "modinfo nvidia_peermem")
    for line in pem_key.splitlines()[1:-1]:
        assert line not in done.stdout + done.stderr
    leftovers = fleet.ssh("ofed-sb", "ls -d /etc/dkms/framework.conf.d/gpufleet-module-signing.conf; "
                                     "find /root /tmp /var/tmp -name 'gpufleet-signing.*' 2>/dev/null")
    assert leftovers.stdout.strip() == "", leftovers.stdout
