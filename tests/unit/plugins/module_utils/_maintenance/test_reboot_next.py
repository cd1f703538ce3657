"""reboot_next: a reboot asked of Slurm that never starts is asked of the node, then of its BMC, then fails, naming why.

Slurm 22.05 sends REQUEST_REBOOT_NODES once and, when it is lost, keeps the node REBOOT_ISSUED until ResumeTimeout;
`scontrol reboot` again is ignored while the reboot is issued. Each row: what was seen, what is done next."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance.slurm import SlurmArgumentError, reboot_next

ISSUED = {"flags": ["DRAIN", "REBOOT_ISSUED"], "state": "DOWN+DRAIN+REBOOT_ISSUED", "hold": "ours", "hold_why": None, "jobs": []}
REQUESTED_BUSY = {"flags": ["DRAIN", "REBOOT_REQUESTED"], "state": "MIXED+DRAIN+REBOOT_REQUESTED", "hold": "ours",
                  "hold_why": None, "jobs": [{"id": "41", "user": "alice", "name": "train"}]}
REQUESTED_UNRESPONSIVE = {"flags": ["DRAIN", "REBOOT_REQUESTED"], "state": "IDLE*+DRAIN+REBOOT_REQUESTED", "hold": "ours",
                          "hold_why": None, "not_responding": True, "jobs": []}
TIMED_OUT = {"flags": [], "state": "DOWN", "hold": "others",
             "hold_why": "our reboot timed out and Slurm set it DOWN: look at the node before resuming it"}


@pytest.mark.parametrize(
    ("started", "asked", "node", "bmc", "action", "path"),
    [
        # The node went down: wait for it, and say who rebooted it.
        (True, ["slurm"], ISSUED, True, "wait", "slurm"),
        (True, ["slurm", "node"], ISSUED, True, "wait", "node"),
        (True, ["slurm", "node", "bmc"], None, True, "wait", "bmc"),
        # Slurm's request lost (issued, the node still up): the node itself, then its BMC.
        (False, ["slurm"], ISSUED, True, "node", None),
        (False, ["slurm"], ISSUED, False, "node", None),
        (False, ["slurm", "node"], ISSUED, True, "bmc", None),
        # Nothing left to ask: no BMC configured, or the BMC's reset did not take the node down either.
        (False, ["slurm", "node"], ISSUED, False, "fail", None),
        (False, ["slurm", "node", "bmc"], ISSUED, True, "fail", None),
        # Not lost: Slurm holds an ASAP reboot until the node's jobs end.
        (False, ["slurm"], REQUESTED_BUSY, True, "wait", "slurm"),
        # Never sent: Slurm does not send a reboot to an idle node whose slurmd does not respond.
        (False, ["slurm"], REQUESTED_UNRESPONSIVE, True, "node", None),
        # Slurm gave up (ResumeTimeout) or someone else took the node: stop, never reboot it behind their back.
        (False, ["slurm"], TIMED_OUT, True, "fail", None),
        (False, ["slurm", "node"], TIMED_OUT, True, "fail", None),
        # Slurm's view could not be read: the node is asked all the same.
        (False, ["slurm"], None, True, "node", None),
    ],
)
def test_the_next_step(started, asked, node, bmc, action, path):
    verdict = reboot_next(started, asked, node=node, bmc=bmc, waited=120)
    assert (verdict["action"], verdict["path"]) == (action, path), verdict
    assert verdict["why"]


def test_a_lost_request_is_named_in_the_message():
    why = reboot_next(False, ["slurm"], node=ISSUED, bmc=True, waited=120)["why"]
    assert "did not go down within 120 s after Slurm (scontrol reboot) was asked" in why
    assert "its request to slurmd was lost" in why and "asking the node's own reboot command" in why


def test_a_fail_without_a_bmc_says_what_to_configure():
    why = reboot_next(False, ["slurm", "node"], node=ISSUED, bmc=False)["why"]
    assert "still up on its old boot" in why and "set bmc_address, bmc_user and bmc_password" in why


def test_slurm_taking_the_node_is_said_in_its_words():
    assert TIMED_OUT["hold_why"] in reboot_next(False, ["slurm"], node=TIMED_OUT, bmc=True)["why"]


@pytest.mark.parametrize("asked", [[], ["ipmi"], ["slurm", "slurm"], None])
def test_asked_must_name_known_paths_once(asked):
    with pytest.raises(SlurmArgumentError, match="asked must list each of slurm, node, bmc at most once"):
        reboot_next(False, asked)
