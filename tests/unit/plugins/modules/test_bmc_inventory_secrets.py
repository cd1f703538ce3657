"""bmc_inventory's passwords through the real AnsibleModule: its "Invoked with" line as syslog and the journal get it
(their send functions replaced, nothing above them), its result as exit_json prints it, its invocation; and the
masking that keeps both linear in the fleet (_redfish.secrets)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.testing import patch_module_args  # the collection needs ansible-core >= 2.19
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._redfish import inventory, secrets
from ansible_collections.gpufleet.lifecycle.plugins.modules import bmc_inventory

# Each holds what Python's repr and JSON escape: a backslash, a tab, both quotes, a newline (and one of each alone).
PASSWORDS = ["a\\b\t'c\"d\ne-ü", "back\\slash", "tab\there", "quote's", 'dq"uote', "new\nline", "both'\"q"]


def forms(password):
    return {password, repr(password)[1:-1], json.dumps(password)[1:-1], json.dumps(repr(password)[1:-1])[1:-1]}


def bmcs(passwords):
    return [{"name": f"gpu-{i:02d}", "address": f"10.0.0.{i}", "port": 443, "user": "admin", "password": pw} for i, pw in enumerate(passwords, 1)]


def echoing_bmc(bmc, context, timeout, total_timeout, expand=True):
    """A hostile BMC: it puts the password it was sent into its inventory and quotes it in an error."""
    if bmc["address"] == "10.0.0.1":
        return {"error": f"refused {bmc['password']!r} for {bmc['user']} at {bmc['address']}:443", "requests": 1, "connections": 1, "seconds": 0.1}
    entry = {"Id": "HGX_FW_BMC_0", "Name": f"fw {bmc['password']}", "Version": bmc["password"], "Status": {"State": "Enabled"}}
    return {"entries": [entry], "expand": None, "requests": 2, "connections": 1, "seconds": 0.1}


def run_main(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        bmc_inventory.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{") :]), out


def test_no_password_reaches_the_log_the_result_or_the_invocation(log, capsys, monkeypatch):
    monkeypatch.setattr(inventory, "read_one", echoing_bmc)
    result, out = run_main(capsys, {"bmcs": bmcs(PASSWORDS), "validate_certs": True})
    logged = "\n".join(log.lines)
    for password in PASSWORDS:
        for form in forms(password):
            assert form not in logged, (password, form)
            assert form not in out, (password, form)
    assert "Invoked with" in logged and "bmcs=NOT_LOGGING_PARAMETER" in logged
    # Masked as exit_json masks: a whole value replaced, a part of a string starred; nothing else masked.
    assert result["inventories"]["gpu-01"]["error"] == "refused '********' for admin at 10.0.0.1:443"
    assert result["inventories"]["gpu-02"]["entries"][0]["Version"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert result["inventories"]["gpu-02"]["entries"][0]["Name"] == "fw ********"
    args = result["invocation"]["module_args"]
    assert args["bmcs"][0] == {"name": "gpu-01", "address": "10.0.0.1", "port": 443, "user": "admin", "password": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}
    assert result["summary"]["errors"] == ["gpu-01"]


def test_a_refusal_masks_the_passwords_and_nothing_else(log, capsys, monkeypatch):
    monkeypatch.setattr(inventory, "read_one", echoing_bmc)
    result, out = run_main(capsys, {"bmcs": bmcs(PASSWORDS), "timeout": 0})
    assert result["failed"] is True and result["msg"] == "timeout is 0: give 1 to 600"
    assert result["invocation"]["module_args"]["bmcs"][1]["address"] == "10.0.0.2"
    for password in PASSWORDS:
        for form in forms(password):
            assert form not in out and form not in "\n".join(log.lines)


def test_exit_json_is_left_no_value_to_mask_the_whole_result_with(log, capsys, monkeypatch):
    """ansible-core's remove_values makes one pass over the whole result per no_log value: quadratic for a fleet whose
    BMCs each have their own password. The result reaches it masked already, with no value left to pass over it."""
    passes = []

    def recording_remove_values(value, no_log_strings):
        if isinstance(value, dict):
            passes.append(len(no_log_strings))
        return remove_values(value, no_log_strings)

    monkeypatch.setattr(basic, "remove_values", recording_remove_values)
    monkeypatch.setattr(inventory, "read_one", echoing_bmc)
    run_main(capsys, {"bmcs": bmcs([f"pw-{i}" for i in range(50)])})
    assert passes == [0]


def test_a_user_or_host_that_holds_a_password_is_masked_as_ansible_masks_it(log, capsys, monkeypatch):
    """As exit_json would: in every value (a user, a host name in the summary), not in keys (the inventories')."""
    monkeypatch.setattr(inventory, "read_one", echoing_bmc)
    given = bmcs(["s3cret", "other-pw"])
    given[0].update(name="gpu-other-pw-x", user="s3cret")
    result, _out = run_main(capsys, {"bmcs": given})
    first = result["invocation"]["module_args"]["bmcs"][0]
    assert first["user"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" and first["name"] == "gpu-********-x"
    assert result["summary"]["errors"] == ["gpu-********-x"]
    assert result["inventories"]["gpu-other-pw-x"]["error"] == "refused '********' for ******** at 10.0.0.1:443"


def test_validate_certs_false_warns_of_the_risk(log, capsys, monkeypatch):
    warned, warn = [], basic.AnsibleModule.warn
    # Recorded as AnsibleModule.warn gets it: where it goes then depends on what the test process imported before.
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning, **kw: warned.append(warning) or warn(self, warning, **kw))
    monkeypatch.setattr(inventory, "read_one", echoing_bmc)
    run_main(capsys, {"bmcs": bmcs(["pw-1"]), "validate_certs": False})
    assert warned == [inventory.INSECURE]


@pytest.mark.parametrize(("validate_certs", "warned"), [(True, []), (False, [inventory.INSECURE])])
def test_only_unverified_certificates_are_warned_of(validate_certs, warned):
    assert inventory.warnings({"validate_certs": validate_certs}) == warned


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("plain text", set()),
        ("x pw-1 y", {"pw-1"}),
        ("pw-10", {"pw-1", "pw-10"}),
        ("quoted a\\\\b", {"a\\\\b"}),  # repr's form of a\b
        ("", set()),
        ("pw-", set()),
    ],
)
def test_secrets_are_found_in_short_text_whatever_their_number(text, found):
    index = secrets.Secrets(["pw-1", "pw-10", "a\\b"] + [f"unused-{i}" for i in range(1000)])
    assert index.found_in(text) == found


@pytest.mark.parametrize(
    "value",
    [
        "fine",
        {"msg": "login pw-1 refused", "n": 3, "ok": True, "none": None},
        ["pw-1", {"deep": ["x pw-1"]}],
        {"port": 4711},
        {"ratio": 1.5},
    ],
)
def test_short_values_are_masked_as_remove_values_masks_them(value):
    assert secrets.Secrets(["pw-1", "4711"]).mask(value) == remove_values(value, {"pw-1", "4711"})


@pytest.mark.parametrize(
    ("result", "masked"),
    [
        ({"entries": [{"Version": "1.0"}], "requests": 2}, False),
        ({"error": "refused 'a\\\\b'"}, True),  # quoted with !r
        ({"entries": [{"Name": "x a\\b y"}]}, True),
        ({"entries": [{"Version": "a\\b"}]}, True),
    ],
)
def test_a_bmcs_entry_is_masked_with_its_own_password(result, masked):
    out = secrets.mask_own(result, "a\\b")
    assert out == remove_values(result, secrets.forms("a\\b"))
    assert (out is not result) is masked
