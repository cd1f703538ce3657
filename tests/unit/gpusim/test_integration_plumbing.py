"""The integration suite's plumbing that decides its time (docs/testing.md, "The integration suite's time").

- tests/integration/conftest.py: the file order (longest first) names only files that exist, and the sort keeps a
  file's tests together and in their order (make integration: --dist loadfile --no-loadscope-reorder);
- rollout_helpers.parse_nodes: every node of one `scontrol show node -o` call (the one call a fleet-wide poll makes);
- fleet-waves.yml: the short reboot timeout is gpu-06's alone (the node the suite knows never returns).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import SimpleNamespace

import pytest
import yaml

TESTS = pathlib.Path(__file__).resolve().parents[2]
INTEGRATION = TESTS / "integration"
for path in (TESTS, INTEGRATION):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from gpusim import spec  # noqa: E402


def load_order():
    found = importlib.util.spec_from_file_location("integration_conftest", INTEGRATION / "conftest.py")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def test_the_order_names_only_integration_files_that_exist():
    order = load_order()
    missing = sorted(name for name in order.SECONDS if not (INTEGRATION / name).is_file())
    assert not missing, f"tests/integration/conftest.py SECONDS names files that do not exist: {missing}"


def test_the_order_puts_the_longest_file_first_and_keeps_each_files_tests_in_order():
    order = load_order()
    longest, second = sorted(order.SECONDS, key=lambda name: -order.SECONDS[name])[:2]
    items = [SimpleNamespace(path=INTEGRATION / name, name=test) for name, test in
             [("test_unlisted.py", "a"), (second, "b1"), (longest, "c1"), (second, "b2"), (longest, "c2")]]
    order.pytest_collection_modifyitems(None, None, items)
    assert [(item.path.name, item.name) for item in items] == \
        [(longest, "c1"), (longest, "c2"), (second, "b1"), (second, "b2"), ("test_unlisted.py", "a")]


LINES = "\n".join([
    "NodeName=gpu-01 Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 "
    "Reason=gpufleet:r-8d6c5a9a94: admitted (canary) [root@2026-12-05T14:53:01]",
    "NodeName=gpu-02 Arch=x86_64 CoresPerSocket=1 State=MIXED ThreadsPerCore=1 Partitions=gpu",
    "NodeName=gpu-03 Arch=x86_64 State=DOWN+DRAIN+REBOOT_ISSUED Reason=admin: fan 3 replaced [root@2026-12-05T14:53:01] Comment=x",
    "",
    "slurm_load_node error: Unable to contact slurm controller",
])


@pytest.mark.parametrize(("node", "state", "reason"), [
    ("gpu-01", "IDLE+DRAIN", "gpufleet:r-8d6c5a9a94: admitted (canary) [root@2026-12-05T14:53:01]"),
    ("gpu-02", "MIXED", ""),
    ("gpu-03", "DOWN+DRAIN+REBOOT_ISSUED", "admin: fan 3 replaced [root@2026-12-05T14:53:01]"),
])
def test_parse_nodes_reads_every_node_of_one_call(node, state, reason):
    from rollout_helpers import parse_nodes

    nodes = parse_nodes(LINES)
    assert sorted(nodes) == ["gpu-01", "gpu-02", "gpu-03"]
    assert nodes[node] == {"state": state, "reason": reason}


def test_only_the_node_that_never_returns_has_the_short_reboot_timeout():
    fleet = spec.parse(yaml.safe_load((TESTS / "fixtures" / "rollout" / "fleet-waves.yml").read_text()))
    short = {node.name: node.host_vars["node_maintenance_reboot_timeout"] for node in fleet.nodes
             if "node_maintenance_reboot_timeout" in node.host_vars}
    assert short == {"gpu-06": 15}, short
    # gpu-06 is the node test_rollout_waves.py gives the fault no_return (it never comes back from a reboot).
    assert 'fleet.fault("gpu-06", "no_return")' in (INTEGRATION / "test_rollout_waves.py").read_text()
