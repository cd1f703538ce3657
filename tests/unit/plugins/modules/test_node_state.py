"""node_state: reads the node state file for the rollback entry points; a damaged file fails with the repair hint."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _state
from ansible_collections.gpufleet.lifecycle.plugins.modules import node_state

DOC = {
    "schema": 1,
    "last_known_good": {
        "driver": {"version": "550.90.07", "method": "runfile", "kernel_module": "open"},
        "nic_firmware": {"version": "28.40.1000", "devices": {"0000:1a:00.0": {"psid": "MT_0000000838", "version": "28.40.1000"}}},
    },
    "rollout": {"id": "r-1", "phase": "driver", "updated_at": None},
    "history": [{"time": f"t{i}", "component": "driver", "action": "upgrade", "result": "ok"} for i in range(5)],
}


def test_reads_last_known_good_rollout_and_the_latest_history(tmp_path, run_module):
    path = tmp_path / "gpufleet.fact"
    path.write_text(json.dumps(DOC))
    result = run_module(node_state.main, {"state_file": str(path), "history": 2})
    assert not result.get("failed"), result
    assert result["changed"] is False and result["exists"] is True
    assert result["last_known_good"]["driver"]["version"] == "550.90.07"
    assert result["last_known_good"]["nic_firmware"]["devices"]["0000:1a:00.0"]["psid"] == "MT_0000000838"
    assert result["rollout"]["id"] == "r-1"
    assert [entry["time"] for entry in result["history"]] == ["t3", "t4"]


def test_a_missing_file_is_a_new_node(tmp_path, run_module):
    result = run_module(node_state.main, {"state_file": str(tmp_path / "absent.fact")}, check_mode=True)
    assert not result.get("failed"), result
    assert result["exists"] is False and result["last_known_good"] == {} and result["history"] == []


@pytest.mark.parametrize(
    ("content", "damage"),
    [
        (b"", "is empty"),
        (b"{\"schema\": 1, \"last_known_good\": {\"driver\": {\"version\": \"550.9\"", "is not valid JSON"),
        (json.dumps({"last_known_good": {"driver": {"version": "550"}}}).encode(), "last_known_good.driver.version"),
    ],
    ids=["empty", "cut-off", "bad-version"],
)
def test_a_damaged_file_fails_with_the_damage_and_how_to_repair_it(tmp_path, run_module, content, damage):
    path = tmp_path / "gpufleet.fact"
    path.write_bytes(content)
    result = run_module(node_state.main, {"state_file": str(path)})
    assert result["failed"] is True
    assert damage in result["msg"] and "To repair" in result["msg"], result["msg"]
    assert path.read_bytes() == content  # never reset


def test_a_newer_schema_is_refused(tmp_path, run_module):
    path = tmp_path / "gpufleet.fact"
    path.write_text(json.dumps({"schema": _state.SCHEMA + 1}))
    result = run_module(node_state.main, {"state_file": str(path)})
    assert result["failed"] is True and "newer gpufleet.lifecycle" in result["msg"]


@pytest.mark.parametrize(("args", "field"), [({"history": 201}, "history"), ({"history": -1}, "history"), ({"state_file": "rel.fact"}, "state_file")])
def test_bad_options_are_refused_naming_the_option(tmp_path, run_module, args, field):
    result = run_module(node_state.main, args)
    assert result["failed"] is True and result["msg"].startswith(field), result["msg"]
