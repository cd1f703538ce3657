"""nvfwupd's BMC password through the real AnsibleModule and its action plugin: the task's bmc.password moved to the
top-level no_log bmc_password, so the "Invoked with" line (syslog, the journal) never holds it whatever it holds."""

# ruff: noqa: S106 - the passwords here are test values, checked to appear nowhere

from __future__ import annotations

import json
from typing import ClassVar

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.lifecycle.plugins.action.nvfwupd import with_top_level_password
from ansible_collections.gpufleet.lifecycle.plugins.modules import nvfwupd
from test_bmc_inventory_secrets import PASSWORDS, forms

BMC = {"address": "10.0.0.1", "user": "admin"}


class Updater:
    """FirmwareUpdater's place: records the BMC it is given, echoes its password as a hostile nvfwupd would."""

    seen: ClassVar[list] = []

    def __init__(self, module):
        self.module = module

    def run(self):
        bmc = self.module.params["bmc"]
        Updater.seen.append(bmc)
        return {"changed": False, "msg": f"nvfwupd said {bmc['password']}"}


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_password_given_in_bmc_is_logged_nowhere(log, capsys, monkeypatch, password):
    monkeypatch.setattr(nvfwupd, "FirmwareUpdater", Updater)
    task_args = {"bmc": dict(BMC, password=password), "state": "query"}
    with patch_module_args(with_top_level_password(task_args)), pytest.raises(SystemExit):
        nvfwupd.main()
    out = capsys.readouterr().out
    logged = "\n".join(log.lines)
    for form in forms(password):
        assert form not in logged, form
        assert form not in out, form
    assert "bmc_password=NOT_LOGGING_PARAMETER" in logged
    assert Updater.seen[-1] == dict(BMC, password=password, port=443, servertype="HGX", validate_certs=True, ca_path=None)  # what _firmware reads
    result = json.loads(out[out.index("{") :])
    assert result["invocation"]["module_args"]["bmc"]["address"] == "10.0.0.1"


@pytest.mark.parametrize(
    ("args", "moved"),
    [
        ({"bmc": {"address": "a", "password": "p"}}, {"bmc": {"address": "a"}, "bmc_password": "p"}),
        ({"bmc": {"address": "a"}, "bmc_password": "p"}, {"bmc": {"address": "a"}, "bmc_password": "p"}),
        ({"bmc": {"address": "a", "password": "p"}, "bmc_password": "q"}, {"bmc": {"address": "a", "password": "p"}, "bmc_password": "q"}),
        ({"state": "record", "record": {}}, {"state": "record", "record": {}}),
        ({"bmc": "{{ not templated }}"}, {"bmc": "{{ not templated }}"}),
    ],
    ids=["moved", "already-top-level", "both-left-for-the-module-to-refuse", "no-bmc", "not-a-dict"],
)
def test_the_action_moves_the_password_out_of_bmc(args, moved):
    assert with_top_level_password(args) == moved


@pytest.mark.parametrize(
    ("bmc", "bmc_password", "expected", "problem"),
    [
        (BMC, "pw-A1", dict(BMC, password="pw-A1"), None),
        (dict(BMC, password="pw-A1"), None, dict(BMC, password="pw-A1"), None),
        (dict(BMC, password="pw-A1"), "pw-B2", None, "bmc_password and bmc.password are both given: give the BMC password once"),
        (BMC, None, None, "bmc_password is missing: give the password of bmc.user"),
        (None, "pw-A1", None, None),
    ],
)
def test_the_module_takes_the_password_once_from_either_place(bmc, bmc_password, expected, problem):
    got, message = nvfwupd.bmc_with_password(bmc, bmc_password)
    assert got == expected
    assert (message or "").startswith(problem or "") and bool(message) == bool(problem)
    assert "pw-" not in (message or "")
