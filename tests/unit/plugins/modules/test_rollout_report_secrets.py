"""rollout_report: the credentials it finds in the records (URLs with user:password@ or a signed query) are masked in
what the task returns as exit_json prints it - its invocation included - on success, in check mode and on failure; and
none reaches the syslog/journal "Invoked with" line that the real AnsibleModule writes (only syslog.syslog and
journal.send are replaced)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.parameters import _return_datastructure_name, remove_values
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report import rollout_records
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import credentials_in, no_log_leaves, settle_no_log_values
from ansible_collections.gpufleet.lifecycle.plugins.modules import rollout_report
from ansible_collections.gpufleet.lifecycle.tests.browser.rollout_sample import sample_rollout

RID = "r-1a2b3c4d5e"
PASSWORD = "hunter2-Zq9"  # noqa: S105 - the secret the test hunts for
SIGNATURE = "c2lnbmF0dXJlLXNlY3JldA"
BMC_URL = f"https://admin:{PASSWORD}@10.0.0.41/redfish/v1"
SIGNED_URL = f"https://bucket.example/fw.fwpkg?X-Amz-Signature={SIGNATURE}&X-Amz-Expires=60"
# A password holding what repr and JSON escape or rewrite inside a URL (a backslash, non-ASCII, $ and %).
ODD_PASSWORD = "p\\a$s%2Fw\u00fc-Q7"  # noqa: S105
ODD_URL = f"https://root:{ODD_PASSWORD}@10.0.0.42/redfish/v1/Systems"
SAS_SIG, TOKEN = "sv2Sig0nature-Azure", "t0ken-abc-XYZ"
SAS_URL = f"https://acct.blob.core.windows.net/fw/pkg.bin?sv=2024-01-01&sig={SAS_SIG}"
TOKEN_URL = f"https://artifacts.example/driver.run?token={TOKEN}"
# A string of secrets with a backslash, a tab, both quotes, a newline (written into a record by mistake).
ODD_SECRET = "a\\b\t'c\"d\ne-\u00fc"  # noqa: S105


def run_main(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        rollout_report.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{") :]), out


def task_args(tmp_path, **extra):
    records, plan = sample_rollout(6, rollback=("gpu-02",), rollout_id=RID, secret_url=BMC_URL)
    records[1]["rollback"]["reason"] = f"redfish {BMC_URL} answered 500"
    records[0]["phases"][0]["detail"] = f"fetched {SIGNED_URL}"
    return dict({"dest": str(tmp_path / "reports"), "rollout_id": RID, "records": records, "plan": plan}, **extra)


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        ({}, False),
        ({"_ansible_check_mode": True}, False),
        ({"break": "wave"}, True),  # a bad record: RecordError
        ({"dest": "/dev/null/reports"}, True),  # a destination that cannot be a folder: ReportFileError
    ],
    ids=["real", "check", "bad-record", "bad-dest"],
)
def test_no_credential_is_returned(tmp_path, capsys, change, failed):
    args = task_args(tmp_path)
    change = dict(change)
    if change.pop("break", None):
        args["records"][3]["wave"] = "1"
    args.update(change)
    result, out = run_main(capsys, args)
    assert bool(result.get("failed")) is failed, result
    assert "invocation" in result
    for secret in (PASSWORD, SIGNATURE):
        assert secret not in out
    assert result["invocation"]["module_args"]["rollout_id"] == RID  # nothing else is masked


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("no url here", set()),
        (f"x {BMC_URL} y", {BMC_URL}),
        ({"k": [f"a {SIGNED_URL}"]}, {SIGNED_URL}),
        ({f"key {BMC_URL}": 1}, {BMC_URL}),
        (["https://plain.example/x", 5, None, True], set()),
    ],
    ids=["none", "in-text", "nested", "in-a-key", "clean-url"],
)
def test_credentials_are_found_in_every_string_and_key(value, found):
    assert credentials_in(value) == found


def test_records_nested_past_the_recursion_limit_are_searched():
    deep = [BMC_URL]
    for _level in range(5000):
        deep = [deep]
    assert credentials_in(deep) == {BMC_URL}


def hunted():
    """The secret parts: none may appear, in any form repr or JSON writes them."""
    parts = (PASSWORD, SIGNATURE, ODD_PASSWORD, SAS_SIG, TOKEN, ODD_SECRET)
    return {form for part in parts for form in (part, repr(part)[1:-1], json.dumps(part)[1:-1], json.dumps(repr(part)[1:-1])[1:-1])}


def secret_args(tmp_path, **extra):
    """Every kind of credential URL in the records and the other free-text options, and a secret in a record."""
    args = task_args(tmp_path, **extra)
    records = args["records"]
    records[2]["phases"][0]["detail"] = f"package {SAS_URL}"
    records[3]["checks"][0]["message"] = f"driver from {TOKEN_URL}"
    records[4]["domain"] = {"bmc": ODD_URL}
    records[5]["phases"][1]["detail"] = f"login {ODD_SECRET} refused"
    args["plan"]["source"] = TOKEN_URL
    args.update(secrets=[ODD_SECRET], title=f"rollout from {SIGNED_URL}", summary_extra={"who": "ops", "controller": ODD_URL})
    return args


@pytest.mark.parametrize("failing", [False, True], ids=["written", "bad-record"])
def test_no_credential_reaches_the_invoked_with_line(tmp_path, capsys, log, failing):
    args = secret_args(tmp_path)
    if failing:
        args["records"][1]["wave"] = "1"
    result, out = run_main(capsys, args)
    logged = "\n".join(log.lines)
    for form in hunted():
        assert form not in logged, form
        assert form not in out, form
    assert "Invoked with" in logged and "records=NOT_LOGGING_PARAMETER" in logged and "title=NOT_LOGGING_PARAMETER" in logged
    assert "formats=['json', 'markdown', 'html', 'junit']" in logged
    assert bool(result.get("failed")) is failing
    assert result["invocation"]["module_args"]["records"][0]["node"] == "gpu-01"  # a host name is not masked
    if not failing:
        assert result["summary"]["nodes"] == 6 and result["headline"].startswith("6 nodes:")
        assert sorted(result["paths"]["nodes"]) == [f"gpu-0{i}" for i in range(1, 7)]


@pytest.mark.parametrize(
    "change",
    [{"formats": ["json", SIGNED_URL]}, {"colour": ODD_URL}, {"rollout_id": None}],
    ids=["bad-choice", "unknown-option", "missing-option"],
)
def test_a_refused_argument_masks_only_the_credentials(tmp_path, capsys, log, monkeypatch, change):
    """AnsibleModule's own checks fail before anything is logged; the failure echoes the records with the credentials
    masked, host names not, in one pass over the invocation with a few values (not one per leaf of the records)."""
    passes = []

    def recording_remove_values(value, no_log_strings):
        if isinstance(value, dict):
            passes.append(len(no_log_strings))
        return remove_values(value, no_log_strings)

    monkeypatch.setattr(basic, "remove_values", recording_remove_values)
    args = {key: value for key, value in dict(secret_args(tmp_path), **change).items() if value is not None}
    result, out = run_main(capsys, args)
    assert result["failed"] is True and not log.lines
    for form in hunted():
        assert form not in out, form
    assert result["invocation"]["module_args"]["records"][0]["node"] == "gpu-01"
    assert passes and max(passes) <= 20, passes


def test_the_options_not_logged_are_the_modules_free_text_options():
    spec = {}
    monkey = pytest.MonkeyPatch()

    def capture(argument_spec, **kwargs):
        spec.update(argument_spec)
        raise SystemExit

    monkey.setattr(rollout_report, "_Module", capture)
    try:
        with pytest.raises(SystemExit):
            rollout_report.main()
    finally:
        monkey.undo()
    not_logged = sorted(name for name, opts in spec.items() if opts.get("no_log"))
    assert not_logged == sorted((*rollout_records.NOT_LOGGED, "secrets"))
    assert [name for name in spec if name not in not_logged] == ["formats"]  # choices: nothing else can pass AnsibleModule's check


@pytest.mark.parametrize(
    "value",
    [
        "text",
        "",
        [1, 2.5, True, None, "x", b"raw"],
        {"k": {"deep": ["v", 0]}, "empty": ""},
        [{"node": "gpu-01", "phases": [{"start": 1.7e9, "detail": "ok"}]}],
        ({"a": 1},),
    ],
)
def test_no_log_leaves_are_those_ansible_core_registers(value):
    assert sorted(no_log_leaves(value)) == sorted(_return_datastructure_name(value))


@pytest.mark.parametrize(
    ("registered", "params", "kept"),
    [
        # The records' host names and times go; a secret stays even where a record holds the same string.
        ({"gpu-01", "1700000000.0", "pw"}, {"records": [{"node": "gpu-01", "start": 1.7e9, "x": "pw"}], "secrets": ["pw"]}, {"pw"}),
        # A credential URL in any option is added, as written and as repr writes it.
        ({"r-1"}, {"rollout_id": "r-1", "title": f"see {ODD_URL}"}, {ODD_URL, repr(ODD_URL)[1:-1]}),
        ({"ops"}, {"summary_extra": {"who": "ops", "k": f"{SAS_URL} and {TOKEN_URL}"}}, {SAS_URL, TOKEN_URL}),
        # A value some other no_log option registered is left alone.
        ({"other"}, {"records": [{"node": "gpu-01"}]}, {"other"}),
        # A secret with a backslash is masked in its repr form too (a message quoting it with !r).
        (set(), {"secrets": ["a\\b", ""]}, {"a\\b", "a\\\\b"}),
    ],
    ids=["leaves-go-secrets-stay", "credential-added", "several", "other-no-log", "repr-form"],
)
def test_only_the_secrets_and_credentials_stay_masked(registered, params, kept):
    assert settle_no_log_values(set(registered), params) == kept
