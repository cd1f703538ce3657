"""Every role documents what its argument spec declares, and its defaults match it."""

from __future__ import annotations

import pathlib

import pytest
import yaml

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
ROLE_DIRS = sorted(p for p in ROLES.iterdir() if (p / "tasks").is_dir())


def specs(role):
    return yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_role_has_argument_specs_for_main_and_readme(role):
    assert "main" in specs(role)
    assert (role / "README.md").is_file()


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_readme_names_every_variable_of_every_entry_point(role):
    readme = (role / "README.md").read_text()
    missing = sorted(
        f"{entry}:{name}" for entry, spec in specs(role).items() for name in (spec.get("options") or {}) if name not in readme
    )
    assert not missing, f"{role.name}/README.md does not mention {missing}"


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_public_variables_are_prefixed_and_defaulted(role):
    defaults_file = role / "defaults" / "main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.is_file() else {}
    for entry, spec in specs(role).items():
        for name in spec.get("options") or {}:
            assert name.startswith(role.name + "_"), f"{role.name}: {entry} option {name} lacks the role prefix"
    for name in defaults:
        assert name.startswith(role.name + "_"), f"{role.name}: default {name} lacks the role prefix"
        declared = [entry for entry, spec in specs(role).items() if name in (spec.get("options") or {})]
        assert declared, f"{role.name}: default {name} is in no entry point's argument spec"
