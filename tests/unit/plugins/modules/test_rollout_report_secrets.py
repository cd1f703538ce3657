"""rollout_report: the credentials it finds in the records (URLs with user:password@ or a signed query) are masked in
what the task returns as exit_json prints it - its invocation included - on success, in check mode and on failure."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import credentials_in
from ansible_collections.gpufleet.lifecycle.plugins.modules import rollout_report
from ansible_collections.gpufleet.lifecycle.tests.browser.rollout_sample import sample_rollout
from test_bmc_inventory_secrets import patch_module_args

RID = "r-1a2b3c4d5e"
PASSWORD = "hunter2-Zq9"  # noqa: S105 - the secret the test hunts for
SIGNATURE = "c2lnbmF0dXJlLXNlY3JldA"
BMC_URL = f"https://admin:{PASSWORD}@10.0.0.41/redfish/v1"
SIGNED_URL = f"https://bucket.example/fw.fwpkg?X-Amz-Signature={SIGNATURE}&X-Amz-Expires=60"


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
