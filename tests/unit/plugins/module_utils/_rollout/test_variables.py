"""Unknown variables with the collection's prefixes: which names are known (derived from the roles and playbooks) and
the refusal naming the closest known one."""

from __future__ import annotations

import pathlib
import re
import textwrap

import pytest
import yaml
from ansible_collections.gpufleet.lifecycle.plugins.filter import rollout as rollout_filters
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import variables as _variables

ROOT = pathlib.Path(__file__).resolve().parents[5]
NAME = re.compile(r"(?<![\w.])(?:" + "|".join(_variables.PREFIXES) + r")[a-z0-9_]*[a-z0-9](?!\w)")
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
BARE_JINJA_KEYS = {"when", "that", "failed_when", "changed_when", "until"}


@pytest.fixture(scope="module")
def known():
    """The names the installed collection knows (read from its roles and playbooks, as the filter does)."""
    return rollout_filters._known()


def _expressions(node, key=None):
    """The Jinja text of a YAML document: {{ }} and {% %} in any string, whole strings under when/that/... keys."""
    if isinstance(node, dict):
        for inner_key, value in node.items():
            yield from _expressions(value, inner_key)
    elif isinstance(node, list):
        for value in node:
            yield from _expressions(value, key)
    elif isinstance(node, str):
        yield node if key in BARE_JINJA_KEYS else " ".join(JINJA.findall(node))


def variables_read():
    """``{name: file}``: every prefixed variable a role or playbook reads in Jinja (string literals left out)."""
    read = {}
    for base in ("roles", "playbooks"):
        for path in sorted((ROOT / base).rglob("*")):
            if path.suffix in (".yml", ".yaml"):
                texts = _expressions(yaml.safe_load(path.read_text(encoding="utf-8")))
            elif path.suffix == ".j2":
                texts = JINJA.findall(path.read_text(encoding="utf-8"))
            else:
                continue
            for text in texts:
                for name in NAME.findall(QUOTED.sub("''", text)):
                    read.setdefault(name, str(path.relative_to(ROOT)))
    return read


# --- the known names are derived, and complete -------------------------------------------------------------------------


def test_every_variable_the_roles_and_playbooks_read_is_known(known):
    read = variables_read()
    assert len(read) > 100  # the scan sees the roles at all
    missing = {name: where for name, where in read.items() if name not in known}
    assert missing == {}, f"read but not declared (argument_specs, defaults, vars, set_fact/register, a playbook header): {missing}"


def test_every_prefixed_variable_of_the_example_inventory_is_known(known):
    names = set()
    for path in sorted((ROOT / "inventories").rglob("*.yml")):
        text = path.read_text(encoding="utf-8")
        names.update(name for name in re.findall(r"^\s*([a-z][a-z0-9_]*):", text, re.M) if _variables.watched(name))
    assert names, "the example inventory sets no prefixed variable: the test sees nothing"
    assert sorted(names - set(known)) == []


def test_every_variable_an_awx_survey_asks_for_is_known(known):
    text = (ROOT / "extensions" / "awx" / "controller" / "job_templates.yml").read_text(encoding="utf-8")
    asked = set(re.findall(r"^\s*variable:\s*([a-z][a-z0-9_]*)\s*$", text, re.M))
    assert "gpufleet_stop_file" in asked  # the scan sees the surveys
    assert sorted(name for name in asked if _variables.watched(name) and name not in known) == []


@pytest.mark.parametrize(
    ("name", "declared_in"),
    [
        ("gpufleet_stop_file", "playbooks/upgrade.yml"),  # a documented playbook variable
        ("gpufleet_targets", "playbooks/"),
        ("gpu_firmware_activate", "roles/gpu_firmware/"),  # a role option
        ("nvidia_driver_runfiles", "roles/nvidia_driver/"),
        ("node_maintenance_drained", "roles/node_maintenance/"),  # set by the role itself (set_fact or register)
        ("rollout_result", "roles/rollout/tasks/"),
        ("rollout_plan", "roles/rollout/tasks/"),
    ],
)
def test_known_names_come_from_the_collection_files(known, name, declared_in):
    assert known[name].startswith(declared_in), known[name]


def test_known_names_are_read_from_every_kind_of_declaration(tmp_path):
    files = {
        "roles/fw/meta/argument_specs.yml": "argument_specs: {main: {options: {gpu_firmware_alpha: {type: str}}}, rb: {options: null}}",
        "roles/fw/defaults/main.yml": "gpu_firmware_beta: 1\nother_name: 2\n",
        "roles/fw/vars/main.yml": "__gpu_firmware_private: 1\ngpu_firmware_gamma: 2\n",
        "roles/fw/tasks/main.yml": textwrap.dedent("""\
            - name: a block
              block:
                - ansible.builtin.set_fact: {gpu_firmware_delta: 1, cacheable: false}
                  register: gpu_firmware_epsilon
              rescue:
                - ansible.builtin.debug: {msg: x}
                  loop: [1]
                  loop_control: {loop_var: gpu_firmware_zeta}
                  vars: {gpu_firmware_eta: 1}
            """),
        "roles/fw/handlers/main.yml": "- {name: h, set_fact: {gpu_firmware_theta: 1}}\n",
        "playbooks/up.yml": "---\n# Roll out.\n#   gpufleet_iota   what it does\n- hosts: all\n  vars: {gpufleet_kappa: 1}\n  tasks: []\n"
                            "# gpufleet_not_a_header_name\n",
    }
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    known = _variables.known_variables(str(tmp_path), rollout_filters._load_yaml)
    assert sorted(known) == ["gpu_firmware_alpha", "gpu_firmware_beta", "gpu_firmware_delta", "gpu_firmware_epsilon", "gpu_firmware_eta",
                             "gpu_firmware_gamma", "gpu_firmware_theta", "gpu_firmware_zeta", "gpufleet_iota", "gpufleet_kappa"]
    assert known["gpufleet_iota"] == "playbooks/up.yml" and known["gpu_firmware_alpha"] == "roles/fw/meta/argument_specs.yml"


def test_a_broken_role_file_is_an_error_naming_it(tmp_path):
    (tmp_path / "roles" / "fw" / "defaults").mkdir(parents=True)
    (tmp_path / "roles" / "fw" / "defaults" / "main.yml").write_text("a: [\n")
    with pytest.raises(_variables.UnknownVariablesError, match=r"roles/fw/defaults/main\.yml"):
        _variables.known_variables(str(tmp_path), rollout_filters._load_yaml)
    with pytest.raises(_variables.UnknownVariablesError, match="is missing"):
        _variables.known_variables(str(tmp_path / "nothing"), rollout_filters._load_yaml)


# --- the decision ------------------------------------------------------------------------------------------------------

TABLE_KNOWN = {name: "x" for name in ("gpufleet_stop_file", "gpufleet_targets", "gpu_firmware_activate", "nvidia_driver_version",
                                      "rollout_result")}


@pytest.mark.parametrize(
    ("names_by_host", "expected"),
    [
        ({"gpu-01": ["gpufleet_stop_file", "ansible_host", "rack"]}, []),  # known, or not ours
        ({"gpu-01": ["gpufleet_stop_flie"]}, [("gpufleet_stop_flie", ["gpu-01"], "gpufleet_stop_file")]),
        ({"gpu-02": ["gpufleet_target"], "gpu-01": ["gpufleet_target"]}, [("gpufleet_target", ["gpu-01", "gpu-02"], "gpufleet_targets")]),
        ({"gpu-01": ["gpu_firmware_activte"]}, [("gpu_firmware_activte", ["gpu-01"], "gpu_firmware_activate")]),
        ({"gpu-01": ["nvidia_driver_verison", "rollout_reslt"]},
         [("nvidia_driver_verison", ["gpu-01"], "nvidia_driver_version"), ("rollout_reslt", ["gpu-01"], "rollout_result")]),
        ({"gpu-01": ["gpufleet_something_else"]}, [("gpufleet_something_else", ["gpu-01"], None)]),
        ({"gpu-01": ["preflight_x", "gpu_validate_x", "node_maintenance_x", "nic_firmware_x"]},
         [("gpu_validate_x", ["gpu-01"], None), ("nic_firmware_x", ["gpu-01"], None), ("node_maintenance_x", ["gpu-01"], None),
          ("preflight_x", ["gpu-01"], None)]),
        ({"gpu-01": ["__rollout_id", "gpufleet", "rollout", "my_gpufleet_x", 5]}, []),  # private, a fact, no prefix, not a name
    ],
)
def test_unknown_variables_table(names_by_host, expected):
    found = _variables.unknown_variables(names_by_host, TABLE_KNOWN)
    assert [(e["variable"], e["hosts"], e["closest"]) for e in found] == expected


@pytest.mark.parametrize(
    ("entry", "text"),
    [
        ({"variable": "gpufleet_target", "hosts": ["gpu-01"], "closest": "gpufleet_targets"},
         "gpufleet_target (set for gpu-01) is not a variable of gpufleet.lifecycle: did you mean gpufleet_targets?"),
        ({"variable": "gpufleet_zz", "hosts": ["a", "b", "c", "d", "e"], "closest": None},
         "gpufleet_zz (set for a, b, c and 2 more) is not a variable of gpufleet.lifecycle: no known variable is close; see docs/rollout.md "
         "and the roles' READMEs"),
    ],
)
def test_describe_names_variable_hosts_and_closest(entry, text):
    assert _variables.describe(entry) == text


# --- the filter ----------------------------------------------------------------------------------------------------------


def test_the_filter_refuses_typos_with_the_closest_name_and_never_the_value():
    hostvars = {"gpu-01": {"gpufleet_stop_flie": "/x", "gpu_firmware_activte": False, "gpufleet_bom": {}, "gpu_firmware_bmc_password": "s3cr3t"},
                "gpu-02": {"gpufleet_target": "gpu-07", "nvidia_driver_version": "570.86.15"}}
    lines = rollout_filters.unknown_variables(hostvars, ["gpu-01", "gpu-02"])
    assert lines == [
        "gpu_firmware_activte (set for gpu-01) is not a variable of gpufleet.lifecycle: did you mean gpu_firmware_activate?",
        "gpufleet_stop_flie (set for gpu-01) is not a variable of gpufleet.lifecycle: did you mean gpufleet_stop_file?",
        "gpufleet_target (set for gpu-02) is not a variable of gpufleet.lifecycle: did you mean gpufleet_targets?",
    ]
    assert not any("/x" in line or "gpu-07" in line for line in lines)
    assert rollout_filters.unknown_variables(hostvars, []) == []


@pytest.mark.parametrize(("hosts", "words"), [("gpu-01", "hosts must be a list"), (["gpu-09"], "host 'gpu-09' is not in hostvars")])
def test_the_filter_refuses_bad_input_by_name(hosts, words):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=f"gpufleet.lifecycle.unknown_variables: {words}"):
        rollout_filters.unknown_variables({"gpu-01": {}}, hosts)
