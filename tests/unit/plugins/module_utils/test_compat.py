"""The compatibility logic and the consistency of its data tables (the filters are tested in
tests/unit/plugins/filter/test_compat_filters.py, row by row against NVIDIA's tables)."""

from __future__ import annotations

import datetime
import re

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _compat
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _compat_data as data


@pytest.mark.parametrize(("text", "expected"), [("550.54.14", (550, 54, 14)), (" 570.26 ", (570, 26)), ("418", (418,)), (12.4, (12, 4))])
def test_parse_version(text, expected):
    assert _compat.parse_version(text) == expected


@pytest.mark.parametrize("text", ["", "550.", ".550", "550..1", "v550", "550.54.14-1", None, True, [550], "\uff15\uff15\uff10"])
def test_parse_version_refuses(text):
    with pytest.raises(_compat.CompatError):
        _compat.parse_version(text, "driver version")


def test_compat_error_is_a_value_error_naming_the_value():
    with pytest.raises(ValueError, match=r"'12\.7'"):
        _compat.cuda_min_driver("12.7")


def test_toolkit_rows_are_unique_and_newest_first():
    versions = [_compat.parse_version(row[1]) for row in data.TOOLKIT_DRIVER_ROWS]
    assert len(set(versions)) == len(versions)
    assert versions == sorted(versions, reverse=True)
    for label, version, linux, windows, kind in data.TOOLKIT_DRIVER_ROWS:
        assert kind in ("ga", "update", "rc", "ga+"), label
        assert version.split(".")[0] in label and _compat.parse_version(linux)
        assert windows is None or _compat.parse_version(windows)


def test_one_ga_row_per_major_minor():
    ga = [tuple(row[1].split(".")[:2]) for row in data.TOOLKIT_DRIVER_ROWS if row[4] in ("ga", "ga+")]
    assert len(ga) == len(set(ga))
    every = {tuple(row[1].split(".")[:2]) for row in data.TOOLKIT_DRIVER_ROWS}
    assert every == set(ga)


def test_toolkit_minimum_never_falls_as_toolkits_rise():
    rows = sorted(data.TOOLKIT_DRIVER_ROWS, key=lambda row: _compat.parse_version(row[1]))
    linux = [_compat.parse_version(row[2]) for row in rows]
    assert linux == sorted(linux)


def test_every_table3_driver_falls_in_its_branch_window():
    for label, _version, linux, windows, _kind in data.TOOLKIT_DRIVER_ROWS:
        assert _compat.driver_branch(linux) == f"R{linux.split('.')[0]}", label
        if windows is not None:
            assert _compat.driver_branch(windows) == _compat.driver_branch(linux), label


def test_branch_table_sorted_and_well_formed():
    numbers = [entry[0] for entry in data.BRANCH_LIFECYCLE]
    assert numbers == sorted(set(numbers))
    for number, kind, end_of_life, declared in data.BRANCH_LIFECYCLE:
        assert kind in (None, "lts", "production", "new feature", "developer"), number
        assert end_of_life is None or re.match(r"^20\d\d-(0[1-9]|1[0-2])$", end_of_life), number
        assert isinstance(declared, bool)
        if kind in ("lts", "production") and number >= 470:
            assert end_of_life is not None, f"R{number}: production branches have a published end of life"


def test_gpu_patterns_and_architectures_are_covered():
    for pattern, capability in data.GPU_NAME_PATTERNS:
        assert capability in data.COMPUTE_CAPABILITIES, pattern
        re.compile(pattern)
    for architecture, _first in data.COMPUTE_CAPABILITIES.values():
        assert architecture in data.ARCHITECTURE_DRIVER_BRANCHES
    known = {entry[0] for entry in data.BRANCH_LIFECYCLE}
    for architecture, (first, last) in data.ARCHITECTURE_DRIVER_BRANCHES.items():
        assert first is None or first in known, architecture
        assert last is None or last in known, architecture


def test_architecture_first_branch_is_the_branch_of_its_first_toolkit():
    # The rule in _compat_data: first branch = branch of the Table 3 driver of the first
    # toolkit that builds for the architecture (where this data reaches that far back).
    first_toolkit = {}
    for arch, cuda in data.COMPUTE_CAPABILITIES.values():
        version = tuple(int(part) for part in cuda.split("."))
        first_toolkit[arch] = min(first_toolkit.get(arch, version), version)
    for arch, (first, _last) in data.ARCHITECTURE_DRIVER_BRANCHES.items():
        cuda = ".".join(str(part) for part in first_toolkit[arch])
        if first is None:
            with pytest.raises(_compat.CompatError):
                _compat.cuda_min_driver(cuda)  # older than Table 3
        else:
            assert _compat.driver_branch(_compat.cuda_min_driver(cuda)) == f"R{first}", arch


def test_check_bom_accepts_each_driver_form_and_flattens_names():
    for bom in ({"driver": "580.95.05"}, {"driver": {"version": "580.95.05"}}, {"driver_version": "580.95.05"}):
        assert _compat.check_bom(bom, [["NVIDIA H200"], "NVIDIA H200"], "12.8", today=datetime.date(2026, 1, 1)) == []


def test_check_bom_refuses_what_it_cannot_judge():
    with pytest.raises(_compat.CompatError, match="mapping"):
        _compat.check_bom(["580.95.05"], [], [])
    with pytest.raises(_compat.CompatError, match="'bsd'"):
        _compat.check_bom({"driver": "580.95.05", "os": "bsd"}, [], [])
    with pytest.raises(_compat.CompatError, match="GPU names must be a list"):
        _compat.check_bom({"driver": "580.95.05"}, {"gpu": "H100"}, [])


def test_check_bom_today_default_uses_the_clock(monkeypatch):
    class FrozenDate(datetime.date):
        @classmethod
        def today(cls):
            return cls(2026, 6, 30)

    monkeypatch.setattr(_compat.datetime, "date", FrozenDate)
    assert _compat.check_bom({"driver": "535.104.05"}, [], []) == []

    class LaterDate(FrozenDate):
        @classmethod
        def today(cls):
            return cls(2026, 7, 1)

    monkeypatch.setattr(_compat.datetime, "date", LaterDate)
    assert [v["rule"] for v in _compat.check_bom({"driver": "535.104.05"}, [], [])] == ["branch-eol"]
