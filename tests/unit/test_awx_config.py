"""The AWX / Automation Platform objects as code (extensions/awx/controller/*.yml) against what the playbooks really read.

* every job template's playbook exists in the project (this repository);
* every survey variable is a variable its playbook reads: a default in the playbook, in the defaults / argument specs /
  vars mappings (``NAME | default(...)``) of a role the playbook reaches; the survey's type fits the default's type (an
  int default asks an ``integer``, a list a ``multiselect``) and its choices are values the role accepts;
* no survey variable is a per-host BOM variable (an extra var outranks every host's group_vars: one answer would become
  every SKU's target);
* the BMC credential type injects the job's environment only (GPUFLEET_BMC_*, never extra vars, which would outrank every
  host's bmc_*), each variable is read by the audit and the firmware and maintenance roles only as the fallback of a
  host's own bmc_* value, its password is ``secret: true``, and every task that hands the password to a module has
  ``no_log: true`` (invariant 7);
* a launch chooses neither the code (no branch asked, the project pinned to a release tag, ``allow_override: false``) nor
  variables beyond the survey (no ``ask_*_on_launch``);
* the upgrade and rollback templates never run twice at once (``allow_simultaneous: false``).

``test_each_check_catches_a_broken_mapping`` breaks one mapping of each kind and watches the check fail.
"""

from __future__ import annotations

import copy
import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTROLLER = ROOT / "extensions" / "awx" / "controller"
ROLES = ROOT / "roles"
PLAYBOOKS = ROOT / "playbooks"
# Per-host variables that decide a node's target: never a survey answer (an extra var would override every SKU's).
PER_HOST = ("gpufleet_bom", "gpufleet_sku", "nvidia_driver_version", "gpu_firmware_package", "gpu_firmware_version",
            "nic_firmware_images", "gpufleet_slurm_node_name", "bmc_address")
SURVEY_TYPES = {int: ("integer",), str: ("text", "textarea", "multiplechoice", "password"), list: ("multiselect",), float: ("float",)}


class _Loader(yaml.SafeLoader):
    """Reads `!unsafe` (Ansible's tag for a value it must not render) as the plain string."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def load(name: str) -> dict:
    return yaml.load((CONTROLLER / name).read_text(), Loader=_Loader)  # noqa: S506  (a SafeLoader subclass)


@pytest.fixture(scope="module")
def config() -> dict:
    merged: dict = {}
    for path in sorted(CONTROLLER.glob("*.yml")):
        for key, value in yaml.load(path.read_text(), Loader=_Loader).items():  # noqa: S506
            assert key not in merged, f"{key} is defined twice under {CONTROLLER}"
            merged[key] = value
    return merged


# --- what the playbooks read ---------------------------------------------------------------------------------------


def roles_reached(playbook: pathlib.Path) -> set[str]:
    """The collection's roles a playbook uses, and the roles they include in turn (gpufleet.lifecycle.NAME anywhere)."""
    pattern = re.compile(r"gpufleet\.lifecycle\.([a-z_]+)")
    found = {name for name in pattern.findall(playbook.read_text()) if (ROLES / name).is_dir()}
    todo = list(found)
    while todo:
        role = todo.pop()
        for path in (ROLES / role).rglob("*.yml"):
            for name in pattern.findall(path.read_text()):
                if (ROLES / name).is_dir() and name not in found:
                    found.add(name)
                    todo.append(name)
    return found


_DEFAULTED = re.compile(r"\b([a-z][a-z0-9_]*) \| default\(((?:[^()]|\([^()]*\))*)\)")


def _literal(text: str):
    """The value of a Jinja default's argument when it is a literal (number, string, list), else a marker."""
    try:
        return yaml.safe_load(text.strip()) if text.strip() else ""
    except yaml.YAMLError:
        return _UNKNOWN


_UNKNOWN = object()


def variables_read(playbook: pathlib.Path) -> dict[str, dict]:
    """{variable: {"default": value or _UNKNOWN, "choices": [...] or None}} of what the playbook and its roles read."""
    out: dict[str, dict] = {}
    texts = [playbook.read_text()]
    for role in roles_reached(playbook):
        base = ROLES / role
        defaults = base / "defaults" / "main.yml"
        if defaults.exists():
            for name, value in (yaml.safe_load(defaults.read_text()) or {}).items():
                out.setdefault(name, {"default": value, "choices": None})
        specs = base / "meta" / "argument_specs.yml"
        if specs.exists():
            for entry in (yaml.safe_load(specs.read_text())["argument_specs"] or {}).values():
                for name, option in (entry.get("options") or {}).items():
                    known = out.setdefault(name, {"default": option.get("default", _UNKNOWN), "choices": None})
                    known["choices"] = option.get("choices", known["choices"])
                    known["type"] = option.get("type", known.get("type"))
        texts.extend(p.read_text() for p in base.rglob("*.yml") if "tasks" in p.parts or "vars" in p.parts)
    for text in texts:
        for name, default in _DEFAULTED.findall(text):
            out.setdefault(name, {"default": _literal(default), "choices": None})
    for text in texts:  # once every variable is known: a check may come before the file that maps its variable
        # Choices the rollout checks in its options (options.yml: `__rollout_X in ['a', 'b']`, or after filters:
        # `__rollout_X | string | lower in ['true', 'false']`).
        for name, choices in re.findall(r"__rollout_([a-z_]+)(?: \| [a-z]+)* in (\[[^\]]*\])", text):
            if f"gpufleet_{name}" in out:
                out[f"gpufleet_{name}"]["choices"] = yaml.safe_load(choices)
    return out


def survey_problems(template: dict) -> list[str]:
    """What is wrong with a job template's survey, against what its playbook reads (empty: nothing)."""
    problems = []
    playbook = ROOT / template["playbook"]
    if not playbook.is_file():
        return [f"{template['name']}: playbook {template['playbook']} does not exist in the project"]
    read = variables_read(playbook)
    for question in (template.get("survey_spec") or {}).get("spec", []):
        name, kind = question["variable"], question["type"]
        where = f"{template['name']}: survey variable {name}"
        if name in PER_HOST:
            problems.append(f"{where} is a per-host BOM variable: an extra var would be every SKU's value")
            continue
        if name not in read:
            problems.append(f"{where} is read by neither {template['playbook']} nor the roles it uses")
            continue
        default = read[name]["default"]
        if default is not _UNKNOWN and default is not None and not isinstance(default, bool):
            wanted = next((kinds for t, kinds in SURVEY_TYPES.items() if isinstance(default, t)), ())
            if kind not in wanted:
                problems.append(f"{where} is asked as {kind} but its default {default!r} is {type(default).__name__} (ask it as {wanted})")
        choices = read[name]["choices"]
        if kind in ("multiplechoice", "multiselect") and choices:
            extra = [c for c in question.get("choices", []) if c not in choices]
            if extra:
                problems.append(f"{where} offers {extra}, which the role refuses (choices {choices})")
        if kind in ("integer", "float") and "default" in question and not isinstance(question["default"], (int, float)):
            problems.append(f"{where}: the survey's default {question['default']!r} is no number")
    return problems


# Where the collection reads the BMC account that the AWX credential injects into the job's environment: each only as the
# fallback of a host's own bmc_user / bmc_password / bmc_port (the host's value wins).
ENV_READERS = [PLAYBOOKS / "audit.yml", ROLES / "gpu_firmware" / "defaults" / "main.yml", ROLES / "node_maintenance" / "defaults" / "main.yml"]


def credential_problems(credential_type: dict) -> list[str]:
    """What is wrong with the BMC credential type: injected other than through the environment, unsafe secrets, environment
    variables nobody reads or that would outrank a host's own bmc_*."""
    problems = []
    fields = {f["id"]: f for f in credential_type["inputs"]["fields"]}
    injectors = credential_type.get("injectors") or {}
    for kind in sorted(set(injectors) - {"env"}):
        problems.append(f"the credential type injects {kind}: inject the BMC account through env only "
                        "(an extra var outranks every host's bmc_* and sits in every host's variables)")
    injected = injectors.get("env") or {}
    for variable, template in injected.items():
        used = re.findall(r"\{\{\s*([a-z_]+)", template)
        for field in used:
            if field not in fields:
                problems.append(f"injector {variable} uses input {field}, which the credential type does not define")
        lookup = f"lookup('ansible.builtin.env', '{variable}')"
        host_variable = variable.removeprefix("GPUFLEET_").lower()  # GPUFLEET_BMC_USER -> bmc_user
        for reader in ENV_READERS:
            text = reader.read_text()
            where = reader.relative_to(ROOT)
            if lookup not in text:
                problems.append(f"injector {variable} is not read by {where} ({lookup})")
            elif reader.parent.name == "defaults" and not re.search(rf"\b{host_variable} \| default\({re.escape(lookup)}", text):
                problems.append(f"{where} reads {variable} other than as the default of the host's {host_variable}: the host's value must win")
            elif reader.parent.name != "defaults" and "bmc_endpoints(defaults=" not in text:
                problems.append(f"{where} reads {variable} other than as bmc_endpoints' defaults: the host's value must win")
        if "PASSWORD" in variable:
            for field in used:
                if not fields.get(field, {}).get("secret"):
                    problems.append(f"injector {variable} carries input {field}, which is not secret: true")
    if not any("PASSWORD" in v for v in injected):
        problems.append("the BMC credential type injects no password")
    else:
        problems.extend(unlogged_uses("bmc_password"))
    return problems


def launch_problems(config: dict) -> list[str]:
    """What a launcher could choose beyond the survey: the code that runs (a branch), or variables that skip the survey."""
    problems = []
    for project in config["controller_projects"]:
        if project.get("allow_override", False) is not False:
            problems.append(f"project {project['name']}: allow_override lets a launch run another branch: set it false")
        if not re.fullmatch(r"v\d+\.\d+\.\d+", str(project.get("scm_branch", ""))):
            problems.append(f"project {project['name']}: scm_branch {project.get('scm_branch')!r} is not a release tag (vX.Y.Z)")
    for template in config["controller_templates"]:
        for key, value in template.items():
            if key.startswith("ask_") and key.endswith("_on_launch") and value is not False:
                problems.append(f"{template['name']}: {key} is {value!r}: a launch may only answer the survey")
        if "scm_branch" in template:
            problems.append(f"{template['name']}: scm_branch {template['scm_branch']!r}: the project's release tag runs")
    for source in config.get("controller_inventory_sources", []):
        if "scm_branch" in source:
            problems.append(f"inventory source {source['name']}: scm_branch: the inventory comes from the project's release tag")
    return problems


def _tasks(items, inherited_no_log=False):
    """Every task of a task list (blocks opened), with whether no_log applies to it."""
    for task in items or []:
        if not isinstance(task, dict):
            continue
        no_log = task.get("no_log", inherited_no_log)
        for key in ("block", "rescue", "always"):
            if key in task:
                yield from _tasks(task[key], no_log)
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers"):
            if key in task:
                yield from _tasks(task[key], no_log)
        if not any(key in task for key in ("block", "tasks", "pre_tasks", "post_tasks")):
            yield task, no_log is True


COLLECTIONS = [ROOT / ".collections", ROOT / ".venv" / "lib" / "python3.11" / "site-packages"]
_MODULE_KEYS = ("name", "when", "vars", "no_log", "register", "failed_when", "changed_when", "delegate_to", "check_mode", "loop",
                "loop_control", "until", "retries", "delay", "environment", "become", "ignore_errors", "notify", "listen", "tags", "async",
                "poll", "run_once", "args")


def _module_source(fqcn: str) -> str | None:
    """The source of a collection module (this collection's, or an installed one's), None when it cannot be found. For this
    collection's, with the source of the module utility it imports its ARGUMENT_SPEC from (shared with its action plugin)."""
    namespace, collection, module = fqcn.split(".")
    if (namespace, collection) == ("gpufleet", "lifecycle"):
        path = ROOT / "plugins" / "modules" / f"{module}.py"
        if not path.exists():
            return None
        source = path.read_text()
        for name in re.findall(r"^from ansible_collections\.gpufleet\.lifecycle\.plugins\.module_utils\.([\w.]+) import .*\bARGUMENT_SPEC\b", source, re.M):
            source += (ROOT / "plugins" / "module_utils" / f"{name.replace('.', '/')}.py").read_text()
        return source
    for base in COLLECTIONS:
        path = base / "ansible_collections" / namespace / collection / "plugins" / "modules" / f"{module}.py"
        if path.exists():
            return path.read_text()
    return None


def _option_is_no_log(source: str, option: str) -> bool:
    """Whether the module's argument spec declares `option` with no_log (dict(...) or {"...": ...} form, one line)."""
    return re.search(rf"""(\b{option}\s*=\s*dict\([^\n]*no_log\s*=\s*True|["']{option}["']\s*:\s*\{{[^\n]*["']no_log["']\s*:\s*True)""",
                     source) is not None


def _paths_using(value, pattern, path=()):
    """The option paths of a task's module arguments whose value mentions the pattern."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _paths_using(sub, pattern, (*path, key))
    elif isinstance(value, list):
        for sub in value:
            yield from _paths_using(sub, pattern, path)
    elif isinstance(value, str) and pattern.search(value):
        yield path


def unlogged_uses(variable: str, files=None) -> list[str]:
    """Tasks that hand `variable` (or a role variable mapped from it) to a module, neither with no_log: true on the task
    (or its block) nor in an option that the module's argument spec declares no_log (Ansible then censors the value)."""
    files = files or [*PLAYBOOKS.glob("*.yml"), *ROLES.glob("*/tasks/*.yml"), *ROLES.glob("*/handlers/*.yml")]
    names = {variable}
    for defaults in ROLES.glob("*/defaults/main.yml"):
        for name, value in (yaml.safe_load(defaults.read_text()) or {}).items():
            if isinstance(value, str) and re.search(rf"\b{re.escape(variable)}\b", value):
                names.add(name)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")\b")
    problems = []
    for path in files:
        for task, no_log in _tasks(yaml.safe_load(path.read_text())):
            if no_log or "ansible.builtin.assert" in task:
                continue
            modules = [k for k in task if k not in _MODULE_KEYS]
            for module in modules:
                for option_path in _paths_using(task[module], pattern):
                    source = _module_source(module) if module.count(".") == 2 else None
                    if option_path and source and _option_is_no_log(source, option_path[-1]):
                        continue
                    problems.append(f"{path.name}: task {task.get('name')!r} hands {pattern.search(str(task[module])).group(1)} "
                                    f"to {module} option {'.'.join(map(str, option_path)) or '(free form)'} without no_log")
    return problems


# --- the tests ---------------------------------------------------------------------------------------------------


def test_the_templates_cover_audit_validate_upgrade_and_rollback(config):
    playbooks = {t["playbook"] for t in config["controller_templates"]}
    assert playbooks >= {"playbooks/audit.yml", "playbooks/validate.yml", "playbooks/upgrade.yml", "playbooks/rollback.yml"}


@pytest.mark.parametrize("name", ["gpufleet audit", "gpufleet validate", "gpufleet upgrade", "gpufleet rollback"])
def test_each_surveys_variables_are_what_the_playbook_reads(config, name):
    template = next(t for t in config["controller_templates"] if t["name"] == name)
    assert template.get("survey_enabled") and template["survey_spec"]["spec"]
    assert survey_problems(template) == []


def test_the_upgrade_survey_asks_the_rollouts_shape(config):
    upgrade = next(t for t in config["controller_templates"] if t["playbook"] == "playbooks/upgrade.yml")
    asked = {q["variable"] for q in upgrade["survey_spec"]["spec"]}
    assert asked >= {"gpufleet_canary_count", "gpufleet_waves", "gpufleet_max_unavailable", "gpufleet_failure_budget",
                     "gpufleet_stop_file", "gpufleet_rollout_id"}
    # The target versions: the BOM release is the project's protected tag, never a branch asked at launch.
    assert upgrade["ask_scm_branch_on_launch"] is False
    project = next(p for p in config["controller_projects"] if p["name"] == upgrade["project"])
    assert project["allow_override"] is False
    assert upgrade["ask_limit_on_launch"] is False


def test_a_launch_chooses_neither_the_code_nor_variables_beyond_the_survey(config):
    assert launch_problems(config) == []


def test_rollouts_never_run_twice_at_once(config):
    for template in config["controller_templates"]:
        if template["playbook"] in ("playbooks/upgrade.yml", "playbooks/rollback.yml"):
            assert template["allow_simultaneous"] is False, template["name"]
            assert isinstance(template["job_slice_count"], int) and template["job_slice_count"] >= 1


def test_templates_name_objects_that_the_configuration_defines(config):
    credentials = {c["name"] for c in config["controller_credentials"]}
    for template in config["controller_templates"]:
        assert template["project"] in {p["name"] for p in config["controller_projects"]}
        assert template["inventory"] in {i["name"] for i in config["controller_inventories"]}
        assert template["execution_environment"] in {e["name"] for e in config["controller_execution_environments"]}
        assert set(template["credentials"]) <= credentials, template["name"]
    types = {t["name"] for t in config["controller_credential_types"]} | {"Machine"}
    assert {c["credential_type"] for c in config["controller_credentials"]} <= types


def test_the_example_credentials_hold_no_secret(config):
    for credential in config["controller_credentials"]:
        for key, value in credential["inputs"].items():
            if any(word in key for word in ("password", "key_data", "token", "secret")):
                assert re.fullmatch(r"\{\{ vault_[a-z0-9_]+ \}\}", value), f"{credential['name']}: {key} must come from a vault variable"


def test_the_bmc_credential_type_injects_what_the_firmware_roles_read_and_keeps_it_secret(config):
    bmc = next(t for t in config["controller_credential_types"] if "BMC" in t["name"])
    assert credential_problems(bmc) == []
    assert set(bmc["injectors"]) == {"env"}
    assert set(bmc["injectors"]["env"]) == {"GPUFLEET_BMC_USER", "GPUFLEET_BMC_PASSWORD", "GPUFLEET_BMC_PORT"}


def test_each_check_catches_a_broken_mapping(config, tmp_path):
    upgrade = next(t for t in config["controller_templates"] if t["playbook"] == "playbooks/upgrade.yml")
    validate = next(t for t in config["controller_templates"] if t["playbook"] == "playbooks/validate.yml")

    def broken(template, asked, **change):
        out = copy.deepcopy(template)
        question = next(q for q in out["survey_spec"]["spec"] if q["variable"] == asked)
        question.update(change)
        return survey_problems(out)

    assert "read by neither" in " ".join(broken(upgrade, "gpufleet_failure_budget", variable="gpufleet_failure_budgets"))
    assert "default 1 is int" in " ".join(broken(upgrade, "gpufleet_canary_count", type="text"))
    assert "default '10%' is str" in " ".join(broken(upgrade, "gpufleet_max_unavailable", type="integer", default=1))
    assert "is list" in " ".join(broken(upgrade, "gpufleet_waves", type="text"))
    assert "which the role refuses" in " ".join(broken(validate, "gpu_validate_level", choices=["quick", "thorough"]))
    assert "which the role refuses" in " ".join(broken(upgrade, "gpufleet_fail_on_skipped", choices=["false", "always"]))
    assert "per-host BOM variable" in " ".join(broken(upgrade, "gpufleet_targets", variable="nvidia_driver_version"))
    missing = copy.deepcopy(upgrade)
    missing["playbook"] = "playbooks/upgrades.yml"
    assert "does not exist" in " ".join(survey_problems(missing))

    bmc = copy.deepcopy(next(t for t in config["controller_credential_types"] if "BMC" in t["name"]))
    next(f for f in bmc["inputs"]["fields"] if f["id"] == "password")["secret"] = False
    assert "not secret: true" in " ".join(credential_problems(bmc))
    bmc = copy.deepcopy(next(t for t in config["controller_credential_types"] if "BMC" in t["name"]))
    bmc["injectors"]["env"]["GPUFLEET_BMC_PASS"] = bmc["injectors"]["env"].pop("GPUFLEET_BMC_PASSWORD")
    assert "injector GPUFLEET_BMC_PASS is not read by playbooks/audit.yml" in " ".join(credential_problems(bmc))
    bmc = copy.deepcopy(next(t for t in config["controller_credential_types"] if "BMC" in t["name"]))
    bmc["injectors"]["extra_vars"] = {"bmc_password": "{{ password }}"}
    assert "injects extra_vars: inject the BMC account through env only" in " ".join(credential_problems(bmc))

    opened = copy.deepcopy(config)
    next(p for p in opened["controller_projects"])["allow_override"] = True
    next(p for p in opened["controller_projects"])["scm_branch"] = "main"
    next(t for t in opened["controller_templates"] if t["playbook"] == "playbooks/upgrade.yml")["ask_scm_branch_on_launch"] = True
    next(t for t in opened["controller_templates"] if t["playbook"] == "playbooks/audit.yml")["ask_variables_on_launch"] = True
    found = " ".join(launch_problems(opened))
    for expected in ("allow_override lets a launch run another branch", "'main' is not a release tag",
                     "gpufleet upgrade: ask_scm_branch_on_launch is True", "gpufleet audit: ask_variables_on_launch is True"):
        assert expected in found

    leaky = tmp_path / "leaky.yml"
    leaky.write_text(
        "- name: Print it\n  ansible.builtin.debug:\n    msg: 'BMC {{ gpu_firmware_bmc_password }}'\n"
        "- name: Pass it in the URL\n  community.general.redfish_info:\n    baseuri: 'u:{{ bmc_password }}@bmc'\n    password: x\n"
        "- name: Its password option is no_log\n  community.general.redfish_info:\n    password: '{{ bmc_password }}'\n"
        "- name: Quietly\n  block:\n    - name: Inner\n      ansible.builtin.debug:\n        msg: '{{ bmc_password }}'\n  no_log: true\n"
    )
    leaks = [p.split("task ")[1] for p in unlogged_uses("bmc_password", [leaky])]
    assert leaks == ["'Print it' hands gpu_firmware_bmc_password to ansible.builtin.debug option msg without no_log",
                     "'Pass it in the URL' hands bmc_password to community.general.redfish_info option baseuri without no_log"]
