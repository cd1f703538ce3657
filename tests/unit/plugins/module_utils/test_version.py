"""_version: one rule for driver versions and branches, used by facts, compat and the driver plan."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _compat, _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import plan
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import gather


@pytest.mark.parametrize("value", ["550.90.07", "535.161.08", "572.61", "418.43", "580.95.05", "390.157", "595.80", "550.120"])
def test_whole_versions(value):
    assert _version.check_driver_version(value) == value


@pytest.mark.parametrize("value", ["550.90.07\n", " 550.90.07", "384.9", "550.1", "550", "550.90.7", "550.90.07.1", "", None, 550.9, "O550.90.07"])
def test_partial_or_decorated_versions_are_refused(value):
    assert not _version.is_driver_version(value)
    with pytest.raises(_version.VersionError, match="not a whole NVIDIA driver version"):
        _version.check_driver_version(value)


def test_one_branch_rule_everywhere():
    # Windows numbering: 572.61 is an R570 driver; packages are still named after the major.
    assert _version.driver_branch("572.61") == "R570"
    assert _compat.driver_branch("572.61") == "R570"
    assert gather.driver_branch("572.61") == "R570"
    assert plan.branch("572.61") == "572"
    assert _version.major("572.61") == "572"


def test_unknown_major_falls_back_to_its_own_number():
    assert _version.driver_branch("999.10.01") == "R999"
    assert gather.driver_branch("535.16") == "R535"
    assert gather.driver_branch("535.1") is None


def test_version_key_orders_numerically():
    assert _version.version_key("550.100.01") > _version.version_key("550.90.07")
