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
import json
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


def _tested_collection_version(name: str) -> str | None:
    """The version of a collection in the project's virtualenv (the ansible package of requirements-dev.txt bundles it)."""
    namespace, collection = name.split(".")
    for manifest in (ROOT / ".venv" / "lib").glob(f"python3*/site-packages/ansible_collections/{namespace}/{collection}/MANIFEST.json"):
        return json.loads(manifest.read_text())["collection_info"]["version"]
    return None


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.match(r"\d+(?:\.\d+)*", text).group(0).split("."))


def collection_pin_problems(spec: dict, galaxy_dependencies: dict) -> list[str]:
    """The EE's collections: each of galaxy.yml's dependencies, pinned to one version (==X.Y.Z) that meets galaxy.yml's floor
    and is the version the project is tested with (when the virtualenv has it)."""
    problems = []
    pinned = {c["name"]: str(c.get("version", "*")) for c in spec["dependencies"]["galaxy"]["collections"]}
    for name, floor in galaxy_dependencies.items():
        version = pinned.get(name)
        if version is None:
            problems.append(f"galaxy.yml depends on {name}, the EE does not install it")
            continue
        exact = re.fullmatch(r"==(\d+\.\d+\.\d+)", version)
        if not exact:
            problems.append(f"{name}: the EE installs {version!r}, not one version (==X.Y.Z)")
            continue
        low = re.fullmatch(r">=(\d+(?:\.\d+)*)", str(floor).strip())
        if low and _version_tuple(exact.group(1)) < _version_tuple(low.group(1)):
            problems.append(f"{name}: the EE pins {exact.group(1)}, below galaxy.yml's {floor}")
        tested = _tested_collection_version(name)
        if tested and tested != exact.group(1):
            problems.append(f"{name}: the EE pins {exact.group(1)}, the project is tested with {tested}")
    return problems


def python_pin_problems(requirements: str, dev_requirements: str) -> list[str]:
    """Every EE Python requirement is one version (==); one that requirements-dev.txt also pins is that version."""
    dev = {_normalise(m.group(1)): m.group(2) for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", dev_requirements, re.MULTILINE)}
    problems = []
    for raw in requirements.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.]*)", line)
        if not match:
            problems.append(f"{line!r} is not pinned to one version (name==version)")
        elif dev.get(_normalise(match.group(1)), match.group(2)) != match.group(2):
            problems.append(f"{line!r}: requirements-dev.txt tests with {match.group(1)}=={dev[_normalise(match.group(1))]}")
    return problems


def test_the_image_installs_the_collections_dependencies_from_galaxy_yml(rendered, spec):
    containerfile = (rendered / "Containerfile").read_text()
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    wanted = yaml.safe_load((ROOT / "galaxy.yml").read_text())["dependencies"]
    installed = {c["name"]: c.get("version", "*") for c in yaml.safe_load((rendered / "_build" / "requirements.yml").read_text())["collections"]}
    pinned = {c["name"]: c.get("version", "*") for c in spec["dependencies"]["galaxy"]["collections"]}
    assert set(wanted) <= set(installed)
    assert installed == pinned


def test_the_collections_are_pinned_to_the_tested_versions(spec):
    assert collection_pin_problems(spec, yaml.safe_load((ROOT / "galaxy.yml").read_text())["dependencies"]) == []


def test_the_python_packages_are_pinned(python_requirements):
    assert python_pin_problems(python_requirements, (ROOT / "requirements-dev.txt").read_text()) == []


def test_the_base_image_names_a_tag(spec):
    name = spec["images"]["base_image"]["name"]
    assert re.search(r"@sha256:[0-9a-f]{64}$", name) or re.search(r":[A-Za-z0-9][A-Za-z0-9._-]*$", name.rsplit("/", 1)[-1]), name
    assert not name.endswith(":latest"), name


def test_each_pin_check_catches_a_floor():
    collections = [{"name": "community.general", "version": ">=10.6.0"}, {"name": "kubernetes.core", "version": "==5.0.0"}]
    floors = {"dependencies": {"galaxy": {"collections": collections}}}
    problems = collection_pin_problems(floors, {"community.general": ">=10.6.0", "kubernetes.core": ">=6.0.0", "ansible.posix": "*"})
    assert "community.general: the EE installs '>=10.6.0', not one version (==X.Y.Z)" in problems
    assert "kubernetes.core: the EE pins 5.0.0, below galaxy.yml's >=6.0.0" in problems
    assert "galaxy.yml depends on ansible.posix, the EE does not install it" in problems
    assert python_pin_problems("kubernetes>=24.2.0\njmespath==1.0.0\nnetaddr==1.3.0  # ok\n", "jmespath==1.0.1\n") == [
        "'kubernetes>=24.2.0' is not pinned to one version (name==version)",
        "'jmespath==1.0.0': requirements-dev.txt tests with jmespath==1.0.1",
    ]


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
