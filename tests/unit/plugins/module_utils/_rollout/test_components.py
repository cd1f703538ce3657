"""The rollout's decisions about a node's components: which change, the one activation, what is verified after it, the next
phase of the record and the versions a record shows. Each a table; the filters that expose them to the YAML at the end."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.rollout_components import FilterModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import components as c

ALL = ["nic_firmware", "gpu_firmware", "nvidia_driver"]
FILTERS = FilterModule().filters()


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ({}, []),  # no plan ran (a node held by someone else): nothing
        ({"nvidia_driver_needs_change": True}, ["nvidia_driver"]),
        ({"nvidia_driver_needs_change": "True", "nic_firmware_needs_change": "false"}, ["nvidia_driver"]),  # strings as bool does
        ({"nvidia_driver_needs_change": True, "gpu_firmware_needs_change": "yes", "nic_firmware_needs_change": 1}, ALL),  # order kept
        ({"gpu_firmware_needs_change": None, "nvidia_driver_needs_change": "no"}, []),
        ({"nvidia_driver_needs_change": "tru"}, []),  # not a truth word
        ({"driver_needs_change": True}, []),  # only the documented fact counts
    ],
)
def test_components_to_change(host, expected):
    assert c.to_change(ALL, host) == expected


STACK = ["ofed", "nic_firmware", "gpu_firmware", "nvidia_driver"]
DRIVER = {"driver": {"version": "580.95.05"}}


@pytest.mark.parametrize(
    ("bom", "expected"),
    [
        ({}, []),
        (None, []),  # no BOM on the node: nothing planned there
        (DRIVER, ["nvidia_driver"]),
        # issue 24: gpufleet_components [ofed, ...] planned nothing for OFED (the selection knew three components only)
        ({**DRIVER, "stack": {"ofed": {"flavor": "mlnx-ofed", "version": "24.10-1.1.4.0"}}}, ["ofed", "nvidia_driver"]),
        ({**DRIVER, "stack": {"ofed": {"flavor": "doca-ofed", "version": "24.10-1.1.4.0.200"}}}, ["ofed", "nvidia_driver"]),
        ({**DRIVER, "stack": {"ofed": {"flavor": "inbox"}}}, ["nvidia_driver"]),  # the inbox stack: the ofed role changes nothing
        ({**DRIVER, "stack": {"ofed": {"flavor": ""}}}, ["nvidia_driver"]),
        ({**DRIVER, "stack": {"peermem": True}}, ["nvidia_driver"]),  # a stack without ofed
        ({**DRIVER, "stack": "mlnx-ofed"}, ["nvidia_driver"]),  # not a mapping: nothing read from it (the BOM check refuses it)
        ({"nic_firmware": {"MT_0000000838": "28.43.2026"}, "gpu_firmware": {"package": "hgx.fwpkg"}, **DRIVER},
         ["nic_firmware", "gpu_firmware", "nvidia_driver"]),
        ({"nic_firmware": {}, "gpu_firmware": {"package": ""}, "driver": {"version": ""}}, []),
    ],
)
def test_components_in_bom(bom, expected):
    assert c.in_bom(STACK, bom) == expected


def test_components_in_bom_keep_the_order_given_and_only_those_given():
    bom = {**DRIVER, "stack": {"ofed": {"flavor": "mlnx-ofed", "version": "24.10-1.1.4.0"}}}
    assert c.in_bom(["nvidia_driver", "ofed"], bom) == ["nvidia_driver", "ofed"]
    assert c.in_bom(["nvidia_driver"], bom) == ["nvidia_driver"]  # ofed not in gpufleet_components: left alone
    with pytest.raises(c.ComponentError, match=r"'bios' is not a component role"):
        c.in_bom(["nvidia_driver", "bios"], bom)


def test_components_to_change_keeps_the_order_given():
    host = {"nvidia_driver_needs_change": True, "nic_firmware_needs_change": True}
    assert c.to_change(["nvidia_driver", "nic_firmware"], host) == ["nvidia_driver", "nic_firmware"]


def test_ofed_is_a_component_whose_facts_the_rollout_reads():
    host = {"ofed_needs_change": True, "ofed_activation_pending": "reboot", "nvidia_driver_needs_change": False}
    assert c.to_change(["ofed", "nvidia_driver"], host) == ["ofed"]
    assert c.pending_activations(["ofed"], host) == {"ofed": "reboot"}
    assert c.next_phase(["ofed", "nvidia_driver"], "ofed") == "driver"
    assert c.next_phase(["ofed", "nvidia_driver"]) == "ofed"


def test_an_unknown_component_is_refused_by_name():
    with pytest.raises(c.ComponentError, match=r"'bios' is not a component role of the rollout: gpufleet_components may name ofed, nic_firmware"):
        c.to_change(["nvidia_driver", "bios"], {})


@pytest.mark.parametrize(
    ("changed", "host", "expected"),
    [
        ([], {"nvidia_driver_activation_pending": "reboot"}, {}),
        (["nvidia_driver"], {}, {"nvidia_driver": "none"}),  # unset
        (["nvidia_driver"], {"nvidia_driver_activation_pending": ""}, {"nvidia_driver": "none"}),  # empty
        (["nvidia_driver"], {"nvidia_driver_activation_pending": None}, {"nvidia_driver": "none"}),
        (["gpu_firmware", "nvidia_driver"], {"gpu_firmware_activation_pending": "power_cycle", "nvidia_driver_activation_pending": "reboot"},
         {"gpu_firmware": "power_cycle", "nvidia_driver": "reboot"}),
        (["nic_firmware"], {"nic_firmware_activation_pending": "reboot", "nvidia_driver_activation_pending": "power_cycle"},
         {"nic_firmware": "reboot"}),  # a component that did not change is not asked
    ],
)
def test_pending_activations(changed, host, expected):
    assert c.pending_activations(changed, host) == expected


def test_an_unknown_pending_activation_names_the_role_and_its_fact():
    with pytest.raises(c.ComponentError, match=r"the role gpu_firmware asked for the activation 'kexec' \(gpu_firmware_activation_pending\)"):
        c.pending_activations(["gpu_firmware"], {"gpu_firmware_activation_pending": "kexec"})


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        ([], "none"),
        (["none"], "none"),
        (["gpu_reset", "none"], "gpu_reset"),
        (["none", "reboot", "gpu_reset"], "reboot"),
        (["reboot", "power_cycle", "gpu_reset"], "power_cycle"),
        (["power_cycle", "reboot"], "power_cycle"),  # the first strongest stays
        (["reboot", "reboot"], "reboot"),
    ],
)
def test_strongest_activation(kinds, expected):
    assert c.strongest_activation(kinds) == expected


def test_an_unknown_activation_is_refused():
    with pytest.raises(c.ComponentError, match=r"activation 'warm_boot' is not one the rollout knows \(none, gpu_reset, reboot, power_cycle\)"):
        c.strongest_activation(["reboot", "warm_boot"])


@pytest.mark.parametrize(
    ("changed", "pending", "activation", "expected"),
    [
        # The driver loaded in place and verified itself in main: not verified again.
        (["nvidia_driver"], {"nvidia_driver": "none"}, "none", []),
        # Its reboot was deferred: verified after the rollout's reboot.
        (["nvidia_driver"], {"nvidia_driver": "reboot"}, "reboot", ["nvidia_driver"]),
        # The node was activated for another component: everything that changed runs anew and is verified.
        (["nic_firmware", "nvidia_driver"], {"nic_firmware": "reboot", "nvidia_driver": "none"}, "reboot", ["nic_firmware", "nvidia_driver"]),
        (["gpu_firmware", "nvidia_driver"], {"gpu_firmware": "gpu_reset", "nvidia_driver": "none"}, "gpu_reset", ["gpu_firmware", "nvidia_driver"]),
        # GPU firmware never verifies itself in main.
        (["gpu_firmware", "nvidia_driver"], {"gpu_firmware": "none", "nvidia_driver": "none"}, "none", ["gpu_firmware"]),
        (["nic_firmware"], {"nic_firmware": "none"}, "none", []),
        ([], {}, "power_cycle", []),
        # A pending activation the node did not get (a caller's mistake): verified, so that verify says what does not run.
        (["nvidia_driver"], {"nvidia_driver": "reboot"}, "none", ["nvidia_driver"]),
    ],
)
def test_components_to_verify(changed, pending, activation, expected):
    assert c.to_verify(changed, pending, activation) == expected


@pytest.mark.parametrize(
    ("changed", "after", "expected"),
    [
        ([], None, "activate"),  # the drain of a resumed node whose components are done: the activation next
        (["nvidia_driver"], None, "driver"),
        (ALL, None, "nic_firmware"),
        (ALL, "nic_firmware", "gpu_firmware"),
        (ALL, "gpu_firmware", "driver"),
        (ALL, "nvidia_driver", "activate"),
        (["gpu_firmware", "nvidia_driver"], "gpu_firmware", "driver"),
        (["nvidia_driver"], "gpu_firmware", "activate"),  # a component not in the list has nothing after it
    ],
)
def test_next_phase(changed, after, expected):
    assert c.next_phase(changed, after) == expected


NIC_A = {"psid": "MT_0000000359", "fw_current": "22.43.1014"}


@pytest.mark.parametrize(
    ("facts", "gpu_firmware", "expected"),
    [
        ({}, None, {"driver": None, "fabricmanager": None, "gpu_firmware": None, "nic_firmware": {}}),
        ({"driver": {"version": "570.124.06"}, "fabricmanager": {"version": "570.124.06"}}, "96.00.9F.00.01",
         {"driver": "570.124.06", "fabricmanager": "570.124.06", "gpu_firmware": "96.00.9F.00.01", "nic_firmware": {}}),
        ({"driver": {"version": None, "loaded": False}, "fabricmanager": None}, None,
         {"driver": None, "fabricmanager": None, "gpu_firmware": None, "nic_firmware": {}}),
        # Two ports of one PSID on one version: shown once; on two versions: both, in the order first seen.
        ({"nics": [NIC_A, dict(NIC_A, fw_current="22.43.1014")]}, None,
         {"driver": None, "fabricmanager": None, "gpu_firmware": None, "nic_firmware": {"MT_0000000359": "22.43.1014"}}),
        ({"nics": [NIC_A, dict(NIC_A, fw_current="22.41.1000"), NIC_A, {"psid": "MT_X", "fw_current": "1.2.3"}]}, None,
         {"driver": None, "fabricmanager": None, "gpu_firmware": None,
          "nic_firmware": {"MT_0000000359": "22.43.1014/22.41.1000", "MT_X": "1.2.3"}}),
        # A port without a PSID (or not a dict) is left out, not an error.
        ({"nics": [{"fw_current": "1"}, "x", NIC_A]}, None,
         {"driver": None, "fabricmanager": None, "gpu_firmware": None, "nic_firmware": {"MT_0000000359": "22.43.1014"}}),
        (None, None, {"driver": None, "fabricmanager": None, "gpu_firmware": None, "nic_firmware": {}}),
        # OFED where the read had the stack (an ofed rollout): its flavor and release, or the inbox stack by name.
        ({"stack": {"ofed": {"installed": True, "flavor": "mlnx-ofed", "version": "24.10-1.1.4.0", "release": "MLNX_OFED_LINUX-24.10-1.1.4.0"}}},
         None, {"driver": None, "fabricmanager": None, "gpu_firmware": None, "nic_firmware": {}, "ofed": "mlnx-ofed 24.10-1.1.4.0"}),
        ({"stack": {"ofed": {"installed": False, "flavor": "inbox", "version": None, "release": None}}}, None,
         {"driver": None, "fabricmanager": None, "gpu_firmware": None, "nic_firmware": {}, "ofed": "inbox"}),
        ({"stack": {"ofed": None}}, None, {"driver": None, "fabricmanager": None, "gpu_firmware": None, "nic_firmware": {}}),
        ({"stack": "garbled"}, None, {"driver": None, "fabricmanager": None, "gpu_firmware": None, "nic_firmware": {}}),
    ],
)
def test_record_versions(facts, gpu_firmware, expected):
    assert c.record_versions(facts, gpu_firmware) == expected


# --- the filters -------------------------------------------------------------------------------------


def test_filters_answer_as_the_functions_do():
    host = {"nvidia_driver_needs_change": True, "gpu_firmware_needs_change": True,
            "gpu_firmware_activation_pending": "power_cycle", "nvidia_driver_activation_pending": "none"}
    changed = FILTERS["components_to_change"](ALL, host)
    assert changed == ["gpu_firmware", "nvidia_driver"]
    pending = FILTERS["component_activations"](changed, host)
    assert FILTERS["strongest_activation"](pending) == "power_cycle"
    assert FILTERS["strongest_activation"](["none"], ["reboot"]) == "reboot"  # the rollback's extra reboot
    assert FILTERS["components_to_verify"](changed, host, "power_cycle") == changed
    assert FILTERS["component_next_phase"](changed) == "gpu_firmware"
    assert FILTERS["components_in_bom"](STACK, {**DRIVER, "stack": {"ofed": {"flavor": "doca-ofed"}}}) == ["ofed", "nvidia_driver"]
    assert FILTERS["record_versions"]({"driver": {"version": "580.95.05"}})["driver"] == "580.95.05"


@pytest.mark.parametrize(
    ("name", "args", "words"),
    [
        ("components_to_change", (["bmc"], {}), "gpufleet.lifecycle.components_to_change: 'bmc' is not a component role"),
        ("components_in_bom", (["bmc"], {}), "gpufleet.lifecycle.components_in_bom: 'bmc' is not a component role"),
        ("components_to_change", (ALL, "gpu-01"), "gpufleet.lifecycle.components_to_change: the node's variables must be a mapping"),
        ("component_activations", (["nvidia_driver"], {"nvidia_driver_activation_pending": "later"}),
         "gpufleet.lifecycle.component_activations: the role nvidia_driver asked for the activation 'later'"),
        ("strongest_activation", (["reboot", "soon"],), "gpufleet.lifecycle.strongest_activation: activation 'soon' is not one"),
        ("components_to_verify", (["nvidia_driver"], {}, "kexec"), "gpufleet.lifecycle.components_to_verify: activation 'kexec'"),
    ],
)
def test_filters_refuse_naming_themselves(name, args, words):
    with pytest.raises(AnsibleFilterError, match=words):
        FILTERS[name](*args)


def _phases(*names, status="ok"):
    return [{"name": name, "start": 1.0, "end": 2.0, "status": status} for name in names]


@pytest.mark.parametrize(
    ("section", "rollout_id", "expected"),
    [
        # The last rollout changed OFED and the driver: both, in the rollout's order (not the phases').
        ({"id": "r1", "status": "done", "phases": _phases("preflight", "drain", "driver", "ofed", "activate")}, "rb-1", ["ofed", "nvidia_driver"]),
        ({"id": "r1", "status": "done", "phases": _phases("drain", "nic_firmware", "gpu_firmware", "driver")}, "rb-1",
         ["nic_firmware", "gpu_firmware", "nvidia_driver"]),
        # A phase that failed or was skipped changed nothing that a rollback restores.
        ({"id": "r1", "phases": _phases("drain", "ofed") + _phases("driver", status="failed")}, "rb-1", ["ofed"]),
        ({"id": "r1", "phases": _phases("drain", "driver", status="skipped")}, "rb-1", []),
        # Nothing known: no section, no phases, a node a rollout only drained.
        (None, "rb-1", []),
        ({}, "rb-1", []),
        ({"id": "r1", "phases": _phases("preflight", "drain", "resume")}, "rb-1", []),
        # The same rollback run again: its own section, the rollout it took the node from kept under superseded.
        ({"id": "rb-1", "status": "running", "phases": [], "superseded": {"id": "r1", "phases": _phases("ofed", "driver")}}, "rb-1",
         ["ofed", "nvidia_driver"]),
        # ... and once its first phase dropped that: nothing known (the playbook then restores the driver).
        ({"id": "rb-1", "status": "running", "phases": _phases("rollback", status="started")}, "rb-1", []),
        # Garbage in a section is not a component.
        ({"id": "r1", "phases": ["driver", {"name": "ofed"}, {"name": "gpu", "status": "ok"}, None]}, "rb-1", []),
    ],
)
def test_components_changed_by_last_rollout(section, rollout_id, expected):
    assert c.changed_by_last_rollout(section, rollout_id) == expected
    assert FILTERS["components_changed_by_last_rollout"](section, rollout_id) == expected
