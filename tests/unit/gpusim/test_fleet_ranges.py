"""Every simulated fleet of the test suite has its own node addresses, BMC addresses and Slurm ports.

`make integration` runs two test files at a time (pytest-xdist, --dist loadfile): two fleets brought up at once must
not share a loopback range (sshd binds 127.0.L.N:22), a BMC range (L+100 by default, port 443) or a Slurm port range
(slurmctld on P, each slurmd on P+1+index). The specs are the YAML files under tests/ (fixtures and gpusim/specs) and
the specs written inline in the integration tests.
"""

from __future__ import annotations

import itertools
import pathlib
import re
import sys

import yaml

TESTS = pathlib.Path(__file__).resolve().parents[2]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from gpusim import spec  # noqa: E402

# make demo's specs share one range on purpose: make demo brings up one of them at a time (GPUSIM_DEMO_SPEC), in its own
# workdir, and only test_fleet_e2e runs it (demo-rollout-24.yml), in a file of its own.
_DEMOS = ("tests/gpusim/specs/demo-16.yml", "tests/gpusim/specs/demo-rollout-24.yml", "tests/gpusim/specs/demo-nvl72.yml")
SHARED = {frozenset(pair) for pair in itertools.combinations(_DEMOS, 2)}
INLINE_NODES = 20  # an inline spec of an integration test is assumed to hold at most this many nodes


def fleets():
    """[(where, {node loopback}, {BMC loopback}, first Slurm port, last Slurm port)] of every spec in tests/."""
    out = []
    # The molecule scenarios' fleets (extensions/molecule/*/gpusim/fleet.yml) run from test_molecule.py beside the rest.
    molecule = sorted((TESTS.parent / "extensions" / "molecule").glob("*/gpusim/*.yml"))
    for path in [*sorted(TESTS.rglob("*.yml")), *molecule]:
        if TESTS in path.parents and "unit" in path.relative_to(TESTS).parts:
            continue
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            continue
        if not isinstance(data, dict) or not isinstance(data.get("fleet"), dict) or "nodes" not in data:
            continue
        fleet = spec.parse(data, str(path))
        nets = {octet(n.address) for n in fleet.nodes}
        bmcs = {octet(n.bmc_address) for n in fleet.nodes if n.bmc_address}
        out.append((str(path.relative_to(TESTS.parent)), nets, bmcs, fleet.slurm_port, fleet.slurm_port + 1 + len(fleet.nodes)))
    # YAML (loopback: 32), a Python dict ("loopback": 121), keywords (loopback=39) or extra vars (..._loopback=41, ...).
    for path in sorted((TESTS / "integration").glob("*.py")):
        text = path.read_text()
        for loopback, port in re.findall(r"""loopback["']?\s*[:=]\s*(\d+)\b.*?slurm_port["']?\s*[:=]\s*(\d+)""", text, re.S):
            lo = int(loopback)
            bmc = lo + 100 if lo + 100 <= 254 else lo - 100  # gpusim.spec's default BMC range
            out.append((str(path.relative_to(TESTS.parent)), {lo}, {bmc}, int(port), int(port) + 1 + INLINE_NODES))
    return out


def octet(address):
    """127.0.L.N (or 127.0.L.N:PORT) -> L."""
    return int(address.split(":")[0].split(".")[2])


def shared(a, b):
    return a == b or frozenset({a, b}) in SHARED


def test_the_specs_are_found():
    where = {f[0] for f in fleets()}
    assert "tests/fixtures/rollout/fleet-happy.yml" in where and any(w.startswith("tests/integration/") for w in where), sorted(where)
    assert any(w.startswith("extensions/molecule/") for w in where), sorted(where)
    # The inline specs of every form: a Python dict, keyword arguments, extra variables.
    assert {"tests/integration/test_mitogen.py", "tests/integration/test_rehearsal.py"} <= where, sorted(where)


def pairs():
    """Every two fleets that run apart (not the same fleet brought up by two places)."""
    return [(a, b) for a, b in itertools.combinations(fleets(), 2) if not shared(a[0], b[0])]


def test_no_two_fleets_share_node_or_bmc_addresses():
    for (where_a, lo_a, bmc_a, _p, _q), (where_b, lo_b, bmc_b, _r, _s) in pairs():
        clash = (lo_a | bmc_a) & (lo_b | bmc_b)
        assert not clash, f"{where_a} and {where_b} both use 127.0.{min(clash)}.x: give one its own fleet.loopback"


def test_no_two_fleets_share_slurm_ports():
    for (where_a, _l, _b, first_a, last_a), (where_b, _m, _c, first_b, last_b) in pairs():
        assert last_a < first_b or last_b < first_a, (
            f"{where_a} (Slurm ports {first_a}-{last_a}) and {where_b} ({first_b}-{last_b}) overlap: give one its own fleet.slurm_port")
