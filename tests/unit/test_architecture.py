"""The layering of plugins/, read from every file's imports and calls (ast), whatever files exist.

Rules (docs/DESIGN.md, layout; STYLE.md 1, 2 and 7):

* only ``module_utils/_tools.py`` starts a process (``run_command``, subprocess, os.system...);
* a parser (``module_utils/_parsers/``) is pure: it starts nothing and imports nothing of
  module_utils outside ``_parsers/``;
* module_utils never imports a module (``plugins/modules``);
* a filter starts nothing and imports no ``_tools``;
* a module imports, of module_utils, the flat shared helpers and one capability package (its own);
* a name that a flat shared helper defines is imported from that helper, never from another
  capability's package (``Host`` comes from ``_host``, not from ``_facts``);
* nothing passes ``use_unsafe_shell``.

Each rule is a function from (file, syntax tree) to violations; ``test_each_rule_catches_a_breach``
breaks every rule once in a small source text and checks that it is caught.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
PREFIX = "ansible_collections.gpufleet.lifecycle.plugins."
MODULE_UTILS = PREFIX + "module_utils"
# The flat helpers every capability may share (module_utils/<name>.py, or the _parsers package).
SHARED = ("_errors", "_fileio", "_version", "_host", "_artifact", "_state", "_tools", "_compat", "_compat_data", "_bom", "_xid_catalog", "_parsers")
# Modules of the standard library (and their functions) that start processes.
PROCESS_MODULES = ("subprocess", "pty", "pexpect", "multiprocessing", "commands", "popen2")
PROCESS_CALLS = {
    "os": ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp", "execvpe", "execl", "execle",
           "execlp", "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe"),
    "asyncio": ("create_subprocess_exec", "create_subprocess_shell"),
}
# Known breaches, each with the reason it stands and who fixes it; test_known_breaches_still_exist fails once one is gone.
KNOWN = {}


# --------------------------------------------------------------------------- reading the tree


def module_name(path):
    """Dotted name of a plugins/ file (``ansible_collections.gpufleet.lifecycle.plugins.module_utils._host``)."""
    parts = list(path.relative_to(PLUGINS).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return PREFIX + ".".join(parts)


def imports(path, tree):
    """``(dotted module, imported name or None, line)`` for every import, relative ones resolved."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            for alias in node.names:
                # "from pkg import sub" may import a submodule: keep both readings.
                found.append((base, alias.name, node.lineno))
    return found


def targets(path, tree):
    """The dotted modules an import reaches: ``from a.b import c`` reaches ``a.b`` and may reach ``a.b.c``."""
    reached = []
    for base, name, line in imports(path, tree):
        reached.append((base, line))
        if name and name != "*":
            reached.append((f"{base}.{name}", line))
    return reached


def under(dotted, package):
    return dotted == package or dotted.startswith(package + ".")


def kind(path):
    rel = path.relative_to(PLUGINS).parts
    if rel[0] == "module_utils":
        if len(rel) > 1 and rel[1] == "_parsers":
            return "parser"
        return "module_utils"
    return {"modules": "module", "filter": "filter"}.get(rel[0], rel[0])


def rel(path):
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


# --------------------------------------------------------------------------- rules


def _process_starts(path, tree):
    """Lines that start a process: run_command, a process module, os.system and friends."""
    found = []
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                aliases[alias.asname or top] = alias.name
                if top in PROCESS_MODULES:
                    found.append((node.lineno, f"imports {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            top = node.module.split(".")[0]
            if top in PROCESS_MODULES:
                found.append((node.lineno, f"imports from {node.module}"))
            for alias in node.names:
                if alias.name in PROCESS_CALLS.get(top, ()):
                    found.append((node.lineno, f"imports {node.module}.{alias.name}"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "run_command") or (isinstance(func, ast.Name) and func.id == "run_command"):
            found.append((node.lineno, "calls run_command"))
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = aliases.get(func.value.id, func.value.id).split(".")[0]
            if func.attr in PROCESS_CALLS.get(owner, ()):
                found.append((node.lineno, f"calls {owner}.{func.attr}"))
    return found


def rule_only_tools_starts_processes(path, tree):
    if path == PLUGINS / "module_utils" / "_tools.py":
        return []
    return [f"{rel(path)}:{line}: {what}: only module_utils/_tools.py starts processes" for line, what in _process_starts(path, tree)]


def rule_parsers_are_pure(path, tree):
    if kind(path) != "parser":
        return []
    problems = [f"{rel(path)}:{line}: a parser {what}: parsers take text, they start nothing" for line, what in _process_starts(path, tree)]
    for dotted, line in targets(path, tree):
        if under(dotted, PREFIX.rstrip(".")) and not under(dotted, MODULE_UTILS + "._parsers"):
            problems.append(f"{rel(path)}:{line}: a parser imports {dotted}: parsers import nothing above _parsers/")
    return problems


def rule_module_utils_never_imports_modules(path, tree):
    if kind(path) not in ("module_utils", "parser"):
        return []
    return [
        f"{rel(path)}:{line}: module_utils imports the module {dotted}: modules use module_utils, never the other way"
        for dotted, line in targets(path, tree)
        if under(dotted, PREFIX + "modules")
    ]


def rule_filters_start_nothing(path, tree):
    if kind(path) != "filter":
        return []
    problems = [f"{rel(path)}:{line}: a filter {what}: filters run on the controller and start nothing" for line, what in _process_starts(path, tree)]
    problems += [
        f"{rel(path)}:{line}: a filter imports {dotted}: filters start no tool"
        for dotted, line in targets(path, tree)
        if under(dotted, MODULE_UTILS + "._tools")
    ]
    return problems


def _module_utils_part(dotted):
    """``_host`` for ...module_utils._host.Host, ``_facts`` for ...module_utils._facts.gather; None outside module_utils."""
    if not under(dotted, MODULE_UTILS) or dotted == MODULE_UTILS:
        return None
    return dotted[len(MODULE_UTILS) + 1 :].split(".")[0]


def rule_modules_import_one_capability_package(path, tree):
    if kind(path) != "module":
        return []
    packages = {}
    for base, name, line in imports(path, tree):
        part = _module_utils_part(base) if base != MODULE_UTILS else name
        if part and part not in SHARED:
            packages.setdefault(part, line)
    if len(packages) <= 1:
        return []
    return [
        "{}:{}: imports the capability packages {}: a module imports its own package and the flat shared helpers ({})".format(
            rel(path), min(packages.values()), ", ".join(sorted(packages)), " ".join(SHARED)
        )
    ]


def shared_names():
    """``{name: helper}`` for every top-level class, function and constant a flat shared helper defines."""
    found = {}
    for helper in SHARED:
        path = PLUGINS / "module_utils" / f"{helper}.py"
        if not path.is_file():
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                found.setdefault(node.name, helper)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and not target.id.startswith("__"):
                        found.setdefault(target.id, helper)
    return found


def rule_shared_names_come_from_their_helper(path, tree, names=None):
    names = shared_names() if names is None else names
    own = _module_utils_part(module_name(path))
    problems = []
    for base, name, line in imports(path, tree):
        part = _module_utils_part(base)
        if not name or part is None or part in SHARED or part == own:
            continue
        helper = names.get(name)
        if helper:
            problems.append(f"{rel(path)}:{line}: imports {name} from {base}: import it from the shared helper {helper}")
    return problems


def rule_no_unsafe_shell(path, tree):
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "use_unsafe_shell":
            problems.append(f"{rel(path)}:{node.value.lineno}: passes use_unsafe_shell: commands are argument lists, never a shell")
        elif isinstance(node, ast.Constant) and node.value == "use_unsafe_shell":
            problems.append(f"{rel(path)}:{node.lineno}: names use_unsafe_shell: commands are argument lists, never a shell")
    return problems


RULES = {
    "only-tools-starts-processes": rule_only_tools_starts_processes,
    "parsers-are-pure": rule_parsers_are_pure,
    "module-utils-never-imports-modules": rule_module_utils_never_imports_modules,
    "filters-start-nothing": rule_filters_start_nothing,
    "modules-one-package": rule_modules_import_one_capability_package,
    "shared-names-from-their-helper": rule_shared_names_come_from_their_helper,
    "no-unsafe-shell": rule_no_unsafe_shell,
}


def plugin_files():
    return sorted(path for path in PLUGINS.rglob("*.py") if "__pycache__" not in path.parts)


def violations(rule_name, files=None):
    rule = RULES[rule_name]
    found = []
    for path in files or plugin_files():
        if (rule_name, rel(path)) in KNOWN:
            continue
        found.extend(rule(path, ast.parse(path.read_text(), str(path))))
    return found


# --------------------------------------------------------------------------- the tree as it is


def test_the_tree_is_read():
    files = plugin_files()
    assert PLUGINS / "module_utils" / "_tools.py" in files
    assert any(kind(path) == "parser" for path in files) and any(kind(path) == "module" for path in files)
    assert any(kind(path) == "filter" for path in files)
    # The one place that starts processes is seen doing so (the detector sees its subprocess).
    tools = PLUGINS / "module_utils" / "_tools.py"
    assert _process_starts(tools, ast.parse(tools.read_text())) != []


@pytest.mark.parametrize("rule_name", sorted(RULES))
def test_plugins_keep_the_rule(rule_name):
    assert violations(rule_name) == []


@pytest.mark.parametrize(("rule_name", "path"), sorted(KNOWN))
def test_known_breaches_still_exist(rule_name, path):
    """A known breach that was fixed leaves KNOWN, so that it cannot come back unseen."""
    file = ROOT / path
    assert file.is_file(), f"{path} is gone: remove it from KNOWN"
    assert RULES[rule_name](file, ast.parse(file.read_text(), str(file))) != [], f"{path} keeps {rule_name} now: remove it from KNOWN"


# --------------------------------------------------------------------------- every rule can fail

MU = "ansible_collections.gpufleet.lifecycle.plugins.module_utils"
BREACHES = [
    ("only-tools-starts-processes", "module_utils/_driver/helper.py", "def f(module):\n    return module.run_command(['ls'])\n"),
    ("only-tools-starts-processes", "module_utils/_validate/helper.py", "import subprocess\n"),
    ("only-tools-starts-processes", "modules/thing.py", "import os as o\no.system('ls')\n"),
    ("only-tools-starts-processes", "module_utils/_facts/helper.py", "from os import popen\n"),
    ("parsers-are-pure", "module_utils/_parsers/thing.py", f"from {MU}._tools import NvidiaSmi\n"),
    ("parsers-are-pure", "module_utils/_parsers/thing.py", f"from {MU} import _version\n"),
    ("parsers-are-pure", "module_utils/_parsers/thing.py", "from .. import _errors\n"),
    ("parsers-are-pure", "module_utils/_parsers/thing.py", "import subprocess\n"),
    ("module-utils-never-imports-modules", "module_utils/_facts/helper.py",
     "from ansible_collections.gpufleet.lifecycle.plugins.modules import gpu_facts\n"),
    ("module-utils-never-imports-modules", "module_utils/_facts/helper.py", "from ...modules.gpu_facts import main\n"),
    ("filters-start-nothing", "filter/thing.py", f"from {MU}._tools import Tool\n"),
    ("filters-start-nothing", "filter/thing.py", "import subprocess\n"),
    ("modules-one-package", "modules/thing.py", f"from {MU}._facts.gather import gather\nfrom {MU}._validate.levels import Validator\n"),
    ("modules-one-package", "modules/thing.py", f"from {MU} import _facts, _driver\n"),
    ("shared-names-from-their-helper", "module_utils/_driver/node.py", f"from {MU}._facts.gather import Host\n"),
    ("shared-names-from-their-helper", "modules/thing.py", f"from {MU}._facts.gather import ToolError\n"),
    ("no-unsafe-shell", "module_utils/_tools.py", "def f(module):\n    module.run_command('ls', use_unsafe_shell=True)\n"),
    ("no-unsafe-shell", "modules/thing.py", "OPTIONS = {'use_unsafe_shell': True}\n"),
]


@pytest.mark.parametrize(("rule_name", "where", "source"), BREACHES, ids=[f"{b[0]}:{i}" for i, b in enumerate(BREACHES)])
def test_each_rule_catches_a_breach(rule_name, where, source):
    path = PLUGINS / where
    tree = ast.parse(source)
    assert RULES[rule_name](path, tree) != []


@pytest.mark.parametrize(
    ("rule_name", "where", "source"),
    [
        ("only-tools-starts-processes", "module_utils/_tools.py", "def f(module):\n    return module.run_command(['ls'])\n"),
        ("parsers-are-pure", "module_utils/_parsers/thing.py", f"import re\nfrom {MU}._parsers._common import ParseError\nfrom . import _common\n"),
        ("modules-one-package", "modules/thing.py",
         f"from {MU}._facts.gather import gather\nfrom {MU}._errors import GpufleetError\nfrom {MU}._parsers._common import ParseError\n"),
        ("shared-names-from-their-helper", "module_utils/_facts/other.py", f"from {MU}._facts.gather import Host\n"),
        ("shared-names-from-their-helper", "module_utils/_validate/levels.py", f"from {MU}._facts.gather import GpuFactsCollector\n"),
    ],
)
def test_what_the_rules_allow(rule_name, where, source):
    assert RULES[rule_name](PLUGINS / where, ast.parse(source)) == []
