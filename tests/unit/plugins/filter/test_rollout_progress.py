"""gpufleet.lifecycle.rollout_progress as the rollout role calls it: each node's state read from the role's facts, and the
exact Jinja of the role's two progress lines (admit.yml "Show where the rollout is", batch_end.yml at a gate's end)
rendered by Ansible's own templar, so that the text pasted into the role is the text tested here."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter import rollout_progress as filters

# The link tree (made by the repository's conftest.py) through which the repository is this collection.
COLLECTIONS = pathlib.Path(__file__).resolve().parents[4] / ".collections"
RID = "r-0123456789"
T = 1_764_590_000.0

# The msg of admit.yml's "Show where the rollout is" (inside the block whose vars give __plan and __failed).
ADMIT_MSG = (
    "wave {{ __rollout_wave }} of {{ __plan.waves | length }} ({{ __plan.waves[__rollout_wave | int - 1] | join(', ') }});\n"
    "{{ (__plan.order | gpufleet.lifecycle.rollout_progress(hostvars, slots=__plan.budget | default(__plan.order | length, true),\n"
    "    failure_budget=__rollout_failure_budget, failed=__failed, waiting={inventory_hostname: 'asks for a slot'},\n"
    "    rollout=__rollout_id)).line }}"
)
# The msg of admit_unit.yml's "Show where the rollout is" (a unit gate: the unit's members that want a slot ask at once).
UNIT_ADMIT_MSG = (
    "{{ 'canary' if __rollout_wave | int == 0 else 'wave ' ~ __rollout_wave }}, unit {{ __rollout_unit }} ({{ ansible_play_batch | join(', ') }});\n"
    "{{ (__plan.order | gpufleet.lifecycle.rollout_progress(hostvars, slots=__plan.budget | default(__plan.order | length, true),\n"
    "    failure_budget=__rollout_failure_budget, failed=__failed, waiting=__asking, rollout=__rollout_id)).line }}"
)
# The msg of the new last task of batch_end.yml (run_once: true).
BATCH_END_MSG = (
    "{{ 'canary' if __rollout_wave | int == 0 else 'wave ' ~ __rollout_wave }} ended;\n"
    "{{ (__plan.order | gpufleet.lifecycle.rollout_progress(hostvars, slots=__plan.budget | default(__plan.order | length, true),\n"
    "    failure_budget=__rollout_failure_budget, failed=hostvars.localhost.__rollout_lost | default([]), rollout=__rollout_id)).line }}"
)


def phase(name, start, end, status="ok"):
    return {"name": name, "start": T + start, "end": None if end is None else T + end, "status": status, "detail": None}


DONE_PHASES = [phase("preflight", 0, 1), phase("drain", 5, 10), phase("driver", 10, 50), phase("activate", 50, 80),
               phase("validate", 80, 89), phase("resume", 89, 90)]  # 80 s of own work


def registered(phases, beat, rollout=RID):
    return {"changed": True, "rollout": {"id": rollout, "heartbeat_at": T + beat, "phases": phases}}


def hostvars():
    """The role's facts of a 6-node rollout in its first gate: 2 done, 1 in flight, 1 asking for a slot, 2 queued."""
    plan = {"canary": ["gpu-01"], "waves": [["gpu-02", "gpu-03", "gpu-04", "gpu-05", "gpu-06"]], "budget": 2,
            "order": ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05", "gpu-06"]}
    return {
        "localhost": {"rollout_plan": plan, "__rollout_lost": []},
        # finished: its finish record is the latest section
        "gpu-01": {"rollout_result": "upgraded", "__rollout_slurm_name": "gpu-01",
                   "__rollout_phase_result": registered(DONE_PHASES[:-1], 89), "__rollout_finish": registered(DONE_PHASES, 95)},
        "gpu-02": {"rollout_result": "rolled_back", "__rollout_phase_result": registered(
            [*DONE_PHASES[:4], phase("validate", 80, 90, "failed"), phase("rollback", 90, 190)], 190)},
        # in flight: its driver phase is open (a stale read of the preflight is older)
        "gpu-03": {"rollout_result": "not_started", "__rollout_read": registered([phase("preflight", 0, 1)], 1),
                   "__rollout_phase_result": registered([phase("preflight", 0, 1), phase("drain", 200, 210), phase("driver", 210, None, "started")], 210)},
        "gpu-04": {"rollout_result": "not_started", "__rollout_phase_result": registered([phase("preflight", 0, 1)], 1)},
        # another rollout's section says nothing of this one
        "gpu-05": {"rollout_result": "not_started", "__rollout_read": registered([phase("driver", 0, None, "started")], 9, "r-other")},
        "gpu-06": {},
    }


def variables(host):
    hv = hostvars()
    plan = hv["localhost"]["rollout_plan"]
    return {"hostvars": hv, "inventory_hostname": host, "__rollout_wave": 1, "__rollout_id": RID, "__rollout_failure_budget": 1,
            "__plan": plan, "__failed": ["gpu-02"], **hv[host]}


# Ansible's templar in a fresh interpreter: its collection loader must be the first to import ansible_collections,
# which pytest's own imports of this collection have done already in this process.
_RENDER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core < 2.19 templates any text
    def trust_as_template(value):
        return value
out = []
for text, values in json.load(sys.stdin):
    try:
        out.append({"text": Templar(loader=DataLoader(), variables=values).template(trust_as_template(text))})
    except AnsibleError as exc:
        out.append({"error": str(exc)})
print(json.dumps(out))
"""


def render_all(cases):
    """Each (text, variables) through Ansible's templar, with this collection's filters by their full names: {text} or {error}."""
    done = subprocess.run([sys.executable, "-c", _RENDER, str(COLLECTIONS)], input=json.dumps(cases), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def bad(host, result):
    values = variables(host)
    values["hostvars"][host]["rollout_result"] = result
    return values


@pytest.fixture(scope="module")
def rendered():
    """The role's two lines, and one whose node has an unknown result, rendered once for the module's tests."""
    unit = dict(variables("gpu-04"), __rollout_unit="nvl-a", ansible_play_batch=["gpu-04", "gpu-05"], __asking=["gpu-04", "gpu-05"])
    return render_all([(ADMIT_MSG, variables("gpu-04")), (BATCH_END_MSG, variables("gpu-02")), (ADMIT_MSG, bad("gpu-04", "done")),
                       (UNIT_ADMIT_MSG, unit)])


def test_the_admit_line_as_the_role_renders_it(rendered):
    line = " ".join(rendered[0]["text"].split())
    assert line.startswith("wave 1 of 1 (gpu-02, gpu-03, gpu-04, gpu-05, gpu-06); rollout r-0123456789: "
                           "2/6 done (1 upgraded, 1 rolled back), 1 out for the rollout, 1 waiting for a slot, 2 queued;"), line
    assert "failures 1 of budget 1;" in line and "gpu-04 waits: asks for a slot" in line
    # two measured (80 s, and the rolled-back node's 40 + 30 + 10 + 100 = 180 s): mean 130 s; gpu-03 has been in flight for long
    assert "time left about" in line and "the mean service time of 2 measured node(s), 2m 10s" in line


def test_the_gate_end_line_as_the_role_renders_it(rendered):
    line = " ".join(rendered[1]["text"].split())
    assert line.startswith("wave 1 ended; rollout r-0123456789: 2/6 done (1 upgraded, 1 rolled back), 1 out for the rollout, "
                           "0 waiting for a slot, 3 queued; out of service 1 of the rollout's nodes; budget 2;"), line


def test_each_node_is_read_from_its_latest_section_of_this_rollout():
    p = filters.rollout_progress(hostvars()["localhost"]["rollout_plan"]["order"], hostvars(), slots=2, failure_budget=1, rollout=RID,
                                 now=T + 230)
    assert p["nodes"] == {"done": ["gpu-01", "gpu-02"], "in_flight": ["gpu-03"], "waiting": [], "queued": ["gpu-04", "gpu-05", "gpu-06"],
                          "deferred": []}
    assert p["measured"] == 2 and p["mean_service_s"] == 130.0
    # gpu-03 out since T+200, 30 s of the mean spent: 100 s left on its slot; 3 queued on 2 slots: 130, 100+130, 260
    assert p["time_left_s"] == 260.0


def test_slots_held_by_others_come_from_slurms_view_by_slurm_name():
    hv = hostvars()
    hv["gpu-03"]["__rollout_slurm_name"] = "node-03"
    unavailable = [{"node": "node-03", "state": "DRAIN"}, {"node": "person-07", "state": "DRAIN", "ours": False}]
    p = filters.rollout_progress(hv["localhost"]["rollout_plan"]["order"], hv, slots=3, unavailable=unavailable, rollout=RID, now=T + 230)
    assert p["others_out"] == 1 and p["free_slots"] == 1


FILTER_ERRORS = [
    # order, hostvars change, kwargs, words
    (["gpu-01", "gpu-09"], None, {"slots": 2}, "host gpu-09 of the plan's order is not in hostvars"),
    (["gpu-01"], ("gpu-01", "rollout_result", "finished"), {"slots": 2}, "nodes.gpu-01.result is 'finished'"),
    (["gpu-01"], None, {}, "hostvars and slots are required"),
    (["gpu-01"], None, {"slots": "all"}, "slots (gpufleet_max_unavailable as a count) must be a whole number"),
    ("gpu-01", None, {"slots": 2}, "the input must be the plan's order"),
]


@pytest.mark.parametrize(("order", "change", "kwargs", "words"), FILTER_ERRORS)
def test_bad_input_fails_naming_the_filter_node_and_field(order, change, kwargs, words):
    hv = hostvars()
    if change:
        hv[change[0]][change[1]] = change[2]
    with pytest.raises(AnsibleFilterError) as caught:
        filters.rollout_progress(order, hv, **kwargs)
    assert str(caught.value).startswith("gpufleet.lifecycle.rollout_progress: ") and words in str(caught.value)


def test_a_bad_node_fails_the_rendered_line_naming_it(rendered):
    assert "gpufleet.lifecycle.rollout_progress: nodes.gpu-04.result is 'done'" in rendered[2]["error"]


def test_the_most_recent_section_wins_whatever_task_registered_it():
    older, newer = registered([phase("drain", 0, None, "started")], 5), registered([phase("drain", 0, 10), phase("driver", 10, None, "started")], 10)
    for facts in ({"__rollout_finish": older, "__rollout_read": newer}, {"__rollout_finish": newer, "__rollout_read": older}):
        assert filters._section(facts, RID)["phases"][-1]["name"] == "driver"
    assert filters._section({"__rollout_read": registered([], 99, "r-other"), "__rollout_finish": {"skipped": True}}, RID) == {}


def test_the_unit_admit_line_as_the_role_renders_it(rendered):
    line = " ".join(rendered[3]["text"].split())
    assert line.startswith("wave 1, unit nvl-a (gpu-04, gpu-05); rollout r-0123456789: 2/6 done (1 upgraded, 1 rolled back), "
                           "1 out for the rollout, 2 waiting for a slot, 1 queued;"), line
    assert "gpu-04 waits: asks for a slot; gpu-05 waits: asks for a slot" in line


FACTS = ("rollout_result", "__rollout_phase_result", "__rollout_finish", "__rollout_read", "__rollout_slurm_name")


def test_the_admit_line_in_a_real_play_reads_hostvars(tmp_path):
    """Through ansible-playbook (hostvars is Ansible's lazy HostVars there, facts set by set_fact as the role sets them)."""
    hv = hostvars()
    plan = hv["localhost"]["rollout_plan"]
    hosts = plan["order"]
    inventory = {"all": {"hosts": {h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in hosts}}}
    play = [{
        "name": "A gate", "hosts": "all", "gather_facts": False,
        "vars": {"__plan": plan, "__rollout_wave": 1, "__rollout_id": RID, "__rollout_failure_budget": "1", "__failed": ["gpu-02"]},
        "tasks": [
            {"name": "Set the role's facts of the node",
             "ansible.builtin.set_fact": {name: f"{{{{ facts[inventory_hostname]['{name}'] | default(none) }}}}" for name in FACTS},
             "vars": {"facts": {h: hv[h] for h in hosts}}},
            {"name": "Show where the rollout is", "ansible.builtin.debug": {"msg": ADMIT_MSG.replace("\n", " ")},
             "when": "inventory_hostname == 'gpu-04'"},
        ],
    }]
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.json").write_text(json.dumps(play))
    env = {"PATH": str(pathlib.Path(sys.executable).parent) + ":/usr/bin:/bin", "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json", "ANSIBLE_NOCOLOR": "1",
           "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    done = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inventory.json"),
                           str(tmp_path / "play.json")], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout[done.stdout.index("{"):])["plays"][0]["tasks"][1]["hosts"]["gpu-04"]
    line = " ".join(result["msg"].split())
    assert "rollout r-0123456789: 2/6 done (1 upgraded, 1 rolled back), 1 out for the rollout, 1 waiting for a slot, 2 queued;" in line, line


def ansible_hostvars(hv):
    """Ansible's own HostVars over an inventory of the hosts of ``hv``, their facts set as set_fact and register set them."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[])
    manager = VariableManager(loader=loader, inventory=inventory)
    for host, facts in hv.items():
        inventory.add_host(host, group="all")
        if facts:
            manager.set_nonpersistent_facts(host, dict(facts))
    return HostVars(inventory=inventory, variable_manager=manager, loader=loader), manager


def test_ansibles_hostvars_give_the_same_progress_without_building_every_hosts_variables(monkeypatch):
    """One line over N nodes read hostvars[host] for each (VariableManager.get_vars: every variable of the host), 0.28 s a
    line at 1,000 nodes (bench/bench_progress.py), on every node's admission. The facts the line needs are the play's own:
    they are read where the play keeps them, the same values; a host without them (gpu-06, never reached) is read through
    hostvars as before."""
    from ansible.vars.manager import VariableManager

    hv = hostvars()
    order = hv["localhost"]["rollout_plan"]["order"]
    expected = filters.rollout_progress(order, hv, slots=2, failure_budget=1, rollout=RID, now=T + 230)
    real, _manager = ansible_hostvars(hv)
    built = []
    plain_get_vars = VariableManager.get_vars
    monkeypatch.setattr(VariableManager, "get_vars", lambda self, *a, **k: (built.append(k.get("host")), plain_get_vars(self, *a, **k))[1])
    got = filters.rollout_progress(order, real, slots=2, failure_budget=1, rollout=RID, now=T + 230)
    assert got == expected
    assert [str(h) for h in built] == ["gpu-06"], built  # not once per host


def test_rollout_facts_is_extract_for_the_plays_facts_without_building_every_host(monkeypatch):
    from ansible.vars.manager import VariableManager

    hv = hostvars()
    order = hv["localhost"]["rollout_plan"]["order"]
    plain = filters.rollout_facts(order, hv, "rollout_result")
    assert plain == ["upgraded", "rolled_back", "not_started", "not_started", "not_started", None]
    real, _manager = ansible_hostvars(hv)
    built = []
    plain_get_vars = VariableManager.get_vars
    monkeypatch.setattr(VariableManager, "get_vars", lambda self, *a, **k: (built.append(str(k.get("host"))), plain_get_vars(self, *a, **k))[1])
    assert filters.rollout_facts(order, real, "rollout_result") == plain
    assert filters.rollout_facts(order, real, "__rollout_slurm_name") == ["gpu-01", None, None, None, None, None]
    assert built == ["gpu-06", "gpu-02", "gpu-03", "gpu-04", "gpu-05", "gpu-06"], built  # only where the play set no such fact


@pytest.mark.parametrize(("hosts", "args", "words"), [
    ("gpu-01", ("rollout_result",), "must be a list of inventory host names"),
    (["gpu-01", 7], ("rollout_result",), "must hold inventory host names"),
    (["gpu-01"], (), "give hostvars and the fact's name"),
    (["gpu-99"], ("rollout_result",), "host gpu-99 is not in hostvars"),
])
def test_rollout_facts_refuses_bad_input_by_name(hosts, args, words):
    with pytest.raises(AnsibleFilterError, match=words):
        filters.rollout_facts(hosts, hostvars(), *args)


def test_the_roles_admission_facts_render_as_before():
    """vars/main.yml's __rollout_admit_failed and __rollout_slurm_domains, rendered by Ansible's templar as the role reads
    them: the failed nodes of the plan, and each Slurm name's domain."""
    import yaml

    role_vars = yaml.safe_load((COLLECTIONS / "ansible_collections/gpufleet/lifecycle/roles/rollout/vars/main.yml").read_text())
    hv = hostvars()
    hv["localhost"]["rollout_plan"]["domains"] = {h: f"rack-{i // 2}" for i, h in enumerate(hv["localhost"]["rollout_plan"]["order"])}
    hv["localhost"]["__rollout_lost"] = ["gpu-05"]
    for host in hv["localhost"]["rollout_plan"]["order"]:
        if host in hv and "__rollout_slurm_name" not in hv[host]:
            hv[host]["__rollout_slurm_name"] = host.replace("gpu", "node")
    values = {"hostvars": hv, "__rollout_failed_results": role_vars["__rollout_failed_results"]}
    out = render_all([(role_vars["__rollout_admit_failed"].strip(), values), (role_vars["__rollout_slurm_domains"].strip(), values)])
    assert "text" in out[0] and "text" in out[1], out
    assert out[0]["text"] == ["gpu-02", "gpu-05"], out
    domains = {"gpu-01": "rack-0", "node-02": "rack-0", "node-03": "rack-1", "node-04": "rack-1", "node-05": "rack-2", "node-06": "rack-2"}
    assert out[1]["text"] == domains, out
