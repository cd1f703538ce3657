"""The example inventory's BOMs are sound: valid shape, and compatible with their own GPUs and CUDA list."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom import validate_bom
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._compat import check_bom

GROUP_VARS = pathlib.Path(__file__).resolve().parents[3] / "inventories" / "example" / "group_vars"
SKU_FILES = sorted(p for p in GROUP_VARS.glob("*.yml") if "gpufleet_bom" in p.read_text())


def test_every_sku_group_has_a_bom():
    assert {p.stem for p in SKU_FILES} == {"hgx_h100", "hgx_b200", "pcie_l40s"}


@pytest.mark.parametrize("path", SKU_FILES, ids=lambda p: p.stem)
def test_example_bom_is_sound(path):
    data = yaml.safe_load(path.read_text())
    bom = validate_bom(data["gpufleet_bom"])
    assert data["gpufleet_sku"] == path.stem
    assert check_bom(bom, [bom["gpu"]["model"]], bom["cuda"], today="2026-11-30") == []
    if "fabricmanager" in bom:
        assert bom["fabricmanager"]["version"] == bom["driver"]["version"]
