"""The node state file: load/save round trip, atomic write, last known good, history, phase."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _state


def test_missing_file_is_an_empty_document(tmp_path):
    doc = _state.load(str(tmp_path / "none.fact"))
    assert doc == {"schema": 1, "last_known_good": {}, "rollout": {"id": None, "phase": None, "updated_at": None}, "history": []}


def test_round_trip_and_mode(tmp_path):
    path = str(tmp_path / "facts.d" / "gpufleet.fact")
    doc = _state.load(path)
    assert _state.record_last_known_good(doc, "driver", "550.90.07", {"kernel_module": "open"}, now="2024-06-11T09:00:00+00:00")
    _state.save(path, doc)
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    again = _state.load(path)
    assert again["last_known_good"]["driver"] == {"version": "550.90.07", "kernel_module": "open", "recorded_at": "2024-06-11T09:00:00+00:00"}
    assert json.loads(open(path).read())["schema"] == 1
    assert [p for p in os.listdir(tmp_path / "facts.d") if p.endswith(".tmp")] == []


def test_record_same_version_is_no_change_and_keeps_time(tmp_path):
    doc = _state.empty()
    _state.record_last_known_good(doc, "driver", "550.90.07", now="t1")
    assert not _state.record_last_known_good(doc, "driver", "550.90.07", now="t2")
    assert doc["last_known_good"]["driver"]["recorded_at"] == "t1"
    assert _state.record_last_known_good(doc, "driver", "570.124.06", now="t3")
    assert _state.last_known_good(doc, "driver")["version"] == "570.124.06"
    assert _state.last_known_good(doc, "fabricmanager") is None


def test_history_is_bounded_and_takes_the_rollout_id():
    doc = _state.empty()
    _state.set_phase(doc, "r-42", "driver", now="t0")
    for n in range(5):
        _state.append_history(doc, "driver", "upgrade", before=str(n), after=str(n + 1), now=f"t{n}", limit=3)
    assert [e["before"] for e in doc["history"]] == ["2", "3", "4"]
    assert doc["history"][-1]["rollout_id"] == "r-42"
    assert doc["history"][-1]["result"] == "ok"


def test_set_phase_changes_only_on_new_values():
    doc = _state.empty()
    assert _state.set_phase(doc, "r-1", "drain", now="t0")
    assert not _state.set_phase(doc, "r-1", "drain", now="t1")
    assert doc["rollout"] == {"id": "r-1", "phase": "drain", "updated_at": "t0"}


def test_corrupt_file_names_the_fix(tmp_path):
    path = tmp_path / "gpufleet.fact"
    path.write_text("{not json")
    with pytest.raises(_state.StateFileError, match=r"not valid JSON.*move it aside"):
        _state.load(str(path))
    path.write_text("[1, 2]")
    with pytest.raises(_state.StateFileError, match="not an object"):
        _state.load(str(path))


def test_failed_write_keeps_the_old_document(tmp_path, monkeypatch):
    path = str(tmp_path / "gpufleet.fact")
    _state.save(path, {"schema": 1, "history": [], "last_known_good": {"driver": {"version": "535.161.08"}}})

    def broken(*_args, **_kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(_state.os, "replace", broken)
    with pytest.raises(_state.StateFileError, match="disk full"):
        _state.save(path, _state.empty())
    assert _state.load(path)["last_known_good"]["driver"]["version"] == "535.161.08"
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_update_saves_only_when_changed(tmp_path):
    path = str(tmp_path / "gpufleet.fact")
    changed, _doc = _state.update(path, lambda doc: False)
    assert not changed and not os.path.exists(path)
    changed, _doc = _state.update(path, lambda doc: _state.set_phase(doc, "r-1", "validate"))
    assert changed and _state.load(path)["rollout"]["phase"] == "validate"
