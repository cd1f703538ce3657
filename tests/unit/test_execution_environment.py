"""meta/execution-environment.yml (ansible-builder 3) renders an image that holds what the collection needs on the
controller side: `ansible-builder create` into a temporary folder, then the Containerfile and the build context are
read. The Python requirements are checked against the imports of plugins/ (ast), so that a plugin that starts
importing a package the EE lacks fails here, not in a customer's AWX job.

ansible-builder is a development dependency (requirements-dev.txt); without it the rendering tests are skipped and say
so, the import scan still runs.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
EE = ROOT / "meta" / "execution-environment.yml"
PLUGINS = ROOT / "plugins"
# Imports that the EE provides without a requirement: ansible-core itself and this collection (and its deps).
PROVIDED = {"ansible", "ansible_collections"}


def _builder() -> str | None:
    """ansible-builder from the project's virtualenv, else from PATH."""
    local = ROOT / ".venv" / "bin" / "ansible-builder"
    return str(local) if local.exists() else shutil.which("ansible-builder")


def _requirement_names(text: str) -> set[str]:
    """The distribution names of a pip requirements file, normalised (PEP 503)."""
    names = set()
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        assert match, f"ee-requirements.txt: cannot read {raw!r}"
        names.add(_normalise(match.group(0)))
    return names


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def third_party_imports(root: pathlib.Path) -> dict[str, list[str]]:
    """{top-level module: [files]} of every absolute import under root that is neither the standard library nor provided."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".", 1)[0]
                if top not in sys.stdlib_module_names and top not in PROVIDED:
                    found.setdefault(top, []).append(str(path.relative_to(root.parent)))
    return found


def distributions_of(module: str) -> set[str]:
    """The distributions that provide a top-level module (installed ones known by importlib.metadata; else its own name)."""
    known = importlib.metadata.packages_distributions().get(module)
    return {_normalise(d) for d in known} if known else {_normalise(module)}


def missing_requirements(imports: dict[str, list[str]], requirements: set[str]) -> dict[str, list[str]]:
    return {module: files for module, files in imports.items() if not distributions_of(module) & requirements}


@pytest.fixture(scope="module")
def spec() -> dict:
    return yaml.safe_load(EE.read_text())


@pytest.fixture(scope="module")
def python_requirements(spec) -> str:
    return (EE.parent / spec["dependencies"]["python"]).read_text()


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, spec) -> pathlib.Path:
    builder = _builder()
    if builder is None:
        pytest.skip("ansible-builder is not installed (requirements-dev.txt pins it): the EE cannot be rendered here")
    context = tmp_path_factory.mktemp("ee-context")
    done = subprocess.run([builder, "create", "-f", str(EE), "-c", str(context), "--output-filename", "Containerfile"],
                          capture_output=True, text=True, timeout=120, check=False, env=dict(os.environ, LC_ALL="C.UTF-8"))
    assert done.returncode == 0, f"ansible-builder create failed:\n{done.stdout}\n{done.stderr}"
    return context


def test_the_schema_is_ansible_builder_3(spec):
    assert spec["version"] == 3
    assert spec["images"]["base_image"]["name"]
    assert set(spec["dependencies"]) >= {"python", "system", "galaxy", "ansible_core", "ansible_runner"}


def test_the_containerfile_names_the_base_image(rendered, spec):
    containerfile = (rendered / "Containerfile").read_text()
    assert f'ARG EE_BASE_IMAGE="{spec["images"]["base_image"]["name"]}"' in containerfile
    assert "FROM $EE_BASE_IMAGE AS base" in containerfile


def test_the_image_installs_the_ansible_core_the_project_is_tested_with(rendered, spec):
    dev = (ROOT / "requirements-dev.txt").read_text()
    core = re.search(r"^ansible-core==(\S+)", dev, re.MULTILINE).group(1)
    assert spec["dependencies"]["ansible_core"]["package_pip"] == f"ansible-core=={core}", "the EE runs another ansible-core than CI tests"
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"', (rendered / "Containerfile").read_text(), re.MULTILINE).group(1).split()
    assert f"ansible-core=={core}" in refs
    assert any(ref.startswith("ansible-runner") for ref in refs), refs


def test_the_image_installs_the_python_requirements(rendered, python_requirements):
    containerfile = (rendered / "Containerfile").read_text()
    assert "COPY _build/requirements.txt requirements.txt" in containerfile
    assert "--user-pip=requirements.txt" in containerfile
    assert _requirement_names((rendered / "_build" / "requirements.txt").read_text()) == _requirement_names(python_requirements)


def test_the_image_installs_the_controller_side_system_packages(rendered, spec):
    containerfile = (rendered / "Containerfile").read_text()
    assert "COPY _build/bindep.txt bindep.txt" in containerfile
    assert "/output/scripts/install-from-bindep" in containerfile
    bindep = (rendered / "_build" / "bindep.txt").read_text()
    assert bindep == (EE.parent / spec["dependencies"]["system"]).read_text()
    assert re.search(r"^openssh-clients \[platform:rpm\]", bindep, re.MULTILINE)
    assert re.search(r"^openssh-client \[platform:dpkg\]", bindep, re.MULTILINE)


def test_the_image_installs_the_collections_dependencies_from_galaxy_yml(rendered):
    containerfile = (rendered / "Containerfile").read_text()
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    wanted = yaml.safe_load((ROOT / "galaxy.yml").read_text())["dependencies"]
    installed = {c["name"]: c.get("version", "*") for c in yaml.safe_load((rendered / "_build" / "requirements.yml").read_text())["collections"]}
    for name, version in wanted.items():
        assert name in installed, f"galaxy.yml depends on {name}, the EE does not install it"
        assert installed[name] == version, f"{name}: galaxy.yml wants {version}, the EE installs {installed[name]}"


def test_the_python_requirements_cover_every_third_party_import_of_the_plugins(python_requirements):
    missing = missing_requirements(third_party_imports(PLUGINS), _requirement_names(python_requirements))
    assert not missing, f"plugins import packages that meta/ee-requirements.txt lacks: {missing}"


def test_a_plugin_importing_a_package_the_ee_lacks_is_caught(tmp_path, python_requirements):
    plugins = tmp_path / "plugins"
    (plugins / "modules").mkdir(parents=True)
    (plugins / "modules" / "uses_yaml.py").write_text("import json\nimport yaml\nfrom ansible.module_utils.basic import AnsibleModule\n")
    (plugins / "modules" / "uses_requests.py").write_text("from requests.adapters import HTTPAdapter\n")
    (plugins / "modules" / "uses_xmltodict.py").write_text("try:\n    import xmltodict\nexcept ImportError:\n    xmltodict = None\n")
    imports = third_party_imports(plugins)
    assert set(imports) == {"yaml", "requests", "xmltodict"}
    requirements = _requirement_names(python_requirements)
    # PyYAML provides `yaml` (the import name is not the distribution's), requests is required: only xmltodict is missing.
    assert set(missing_requirements(imports, requirements)) == {"xmltodict"}
    assert set(missing_requirements(imports, requirements - {"pyyaml"})) == {"xmltodict", "yaml"}
