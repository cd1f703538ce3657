"""Every module's DOCUMENTATION, EXAMPLES and RETURN is valid YAML (a plain ': ' in prose breaks ansible-doc)."""

from __future__ import annotations

import ast
import pathlib

import pytest
import yaml

MODULES = sorted((pathlib.Path(__file__).resolve().parents[4] / "plugins" / "modules").glob("*.py"))


def doc_blocks(path):
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            yield node.targets[0].id, node.value.value


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_doc_blocks_parse_as_yaml(path):
    blocks = dict(doc_blocks(path))
    assert set(blocks) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    for name, text in blocks.items():
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as exc:
            pytest.fail(f"{path.name} {name} is not valid YAML: {exc}")
    assert yaml.safe_load(blocks["DOCUMENTATION"])["module"] == path.stem
