"""The rollout lock under concurrency: several processes acquire one node's state file at once, only one wins."""

from __future__ import annotations

import json
import multiprocessing

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import lock as _lock

CONTENDERS = 6


class FixedClock:
    def __init__(self, now):
        self.now_s = now

    def now(self):
        return self.now_s

    def sleep(self, seconds):
        self.now_s += seconds


def contend(path, index, barrier, results):
    barrier.wait(timeout=30)
    params = {"rollout_id": f"r-{index}", "action": "acquire", "owner": f"ctl-{index}", "state_file": path}
    try:
        result = _lock.run(params, clock=FixedClock(1_764_590_000.0 + index), node="gpu-01")
        results.put((index, "won", result["rollout"]["id"]))
    except _lock.LockRefused as exc:
        results.put((index, "refused", exc.msg))
    except Exception as exc:  # anything else is a failure of the test, reported, not hidden
        results.put((index, "error", repr(exc)))


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_only_one_of_several_concurrent_acquires_wins(tmp_path, start):
    path = str(tmp_path / "gpufleet.fact")
    context = multiprocessing.get_context(start)
    barrier = context.Barrier(CONTENDERS)
    results = context.Queue()
    processes = [context.Process(target=contend, args=(path, index, barrier, results)) for index in range(CONTENDERS)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=60) for _process in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    won = [o for o in outcomes if o[1] == "won"]
    refused = [o for o in outcomes if o[1] == "refused"]
    assert len(won) == 1, outcomes
    assert len(refused) == CONTENDERS - 1, outcomes
    winner = won[0][2]
    assert all(f"is held by rollout {winner} (ctl-{winner[2:]}" in message for _index, _outcome, message in refused), refused
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle)["rollout"]["id"] == winner
