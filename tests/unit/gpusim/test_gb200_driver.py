"""The simulated GB200 tray as the driver role meets it (issue 23): the IMEX daemon's node map is the tray's own
nodes_config.cfg, `nvidia-imex-ctl -N -j` reads back with the project's parser, the simulated apt offers nvidia-imex only at
published versions (what the role's availability check asks), and IMEX installed ahead of its driver does not start."""

from __future__ import annotations

import json

import pytest
from gpusim import spec
from gpusim import state as st
from test_gb200 import DRIVER, SPEC, Tray, _parsers


@pytest.fixture
def fleet(tmp_path):
    root = tmp_path / "nodes"
    return {plan.name: Tray(root, plan) for plan in spec.parse(SPEC).nodes}


def _config(tray):
    return tray.dir / "disk" / "etc" / "upper" / "nvidia-imex" / "nodes_config.cfg"


def test_the_daemon_node_map_is_the_trays_nodes_config(fleet):
    imex = _parsers("imex")
    tray = fleet["nvla1"]
    members = [m["address"] for m in tray.plan.spec["nvlink"]["members"]]
    _config(tray).write_text("".join(a + "\n" for a in [*members, "127.0.9.9"]))
    result = imex.parse_ctl_nodes(tray.run("nvidia-imex-ctl", "-N").stdout)
    assert [n["address"] for n in result["nodes"]] == [*members, "127.0.9.9"]
    assert result["nodes"][4]["state"] == "UNAVAILABLE" and not result["domain_up"]
    # every tray with the same file: UP again once the unknown address is gone
    for other in ("nvla1", "nvla2", "nvla3", "nvla4"):
        _config(fleet[other]).write_text("".join(a + "\n" for a in members))
    assert imex.parse_ctl_nodes(tray.run("nvidia-imex-ctl", "-N").stdout)["domain_up"]


def test_ctl_json_reads_back_like_the_text(fleet):
    imex = _parsers("imex")
    tray = fleet["nvla2"]
    text = imex.parse_ctl_nodes(tray.run("nvidia-imex-ctl", "-N").stdout)
    raw = tray.run("nvidia-imex-ctl", "-N", "-j").stdout
    document = imex.parse_ctl_nodes_json(raw)
    assert json.loads(raw)["nodes"]["0"]["version"] == DRIVER
    assert document["domain_state"] == text["domain_state"] == "UP"
    assert document["connectivity"] == text["connectivity"]
    assert [n["address"] for n in document["nodes"]] == [n["address"] for n in text["nodes"]]


@pytest.mark.parametrize(("version", "rc"), [("590.48.01", 0), ("590.48.99", 100)])
def test_apt_simulate_offers_imex_only_at_published_versions(fleet, version, rc):
    tray = fleet["nvla3"]
    result = tray.run("apt-get", "install", "-s", "-q", "--allow-change-held-packages", "--allow-downgrades", f"nvidia-imex={version}-1")
    assert result.returncode == rc, result.stdout + result.stderr
    if rc:
        assert f"Version '{version}-1' for 'nvidia-imex' was not found" in result.stderr + result.stdout
    assert tray.update(lambda s: s["imex"]["version"]) == DRIVER  # -s changes nothing


def test_imex_installed_ahead_of_its_driver_does_not_start_until_the_driver_loads(fleet):
    tray = fleet["nvla4"]
    assert tray.run("systemctl", "stop", "nvidia-imex").returncode == 0
    assert tray.run("apt-get", "install", "-y", "-q", "nvidia-imex=590.48.01-1").returncode == 0
    started = tray.run("systemctl", "start", "nvidia-imex")
    assert started.returncode != 0 and tray.run("systemctl", "is-active", "nvidia-imex").stdout == "failed\n"
    tray.update(lambda s: s["driver"].update(version="590.48.01"))
    assert tray.run("systemctl", "start", "nvidia-imex").returncode == 0
    assert tray.run("systemctl", "is-active", "nvidia-imex").stdout == "active\n"
    assert tray.update(lambda s: s["imex"]["running"]) == "590.48.01" and st.driver_loaded(tray.update(lambda s: s))
