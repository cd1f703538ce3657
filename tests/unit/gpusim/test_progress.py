"""gpusim.progress.wait: a bring-up step is waited for as long as it moves, and given up on only when it stops moving."""

from __future__ import annotations

import pathlib
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parents[2]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from gpusim import progress  # noqa: E402


class Clock:
    """A fake clock: sleep() advances it, so a wait of minutes runs in microseconds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_a_step_that_keeps_moving_is_waited_for_past_any_fixed_limit():
    clock = Clock()
    # 600 s of work that writes a line every 10 s: a 30 s wall-clock limit would have killed it; a 30 s stall does not.
    waited = progress.wait(lambda: clock.now >= 600, progress=lambda: int(clock.now // 10), stall=30, what="boot",
                           interval=1, clock=clock, sleep=clock.sleep)
    assert waited == pytest.approx(600, abs=1)


def test_a_step_that_stops_moving_is_given_up_with_what_was_missing():
    clock = Clock()
    # It moves for 50 s, then nothing: the stall is counted from its last move, not from the start.
    with pytest.raises(progress.Stalled) as failed:
        progress.wait(lambda: False, progress=lambda: min(int(clock.now // 10), 5), stall=30, what="node n-01's boot.sh",
                      missing=lambda: "its log ends: + /usr/sbin/sshd", interval=1, clock=clock, sleep=clock.sleep)
    assert clock.now == pytest.approx(81, abs=1)
    message = str(failed.value)
    assert "node n-01's boot.sh: no progress for 30s" in message and "its log ends: + /usr/sbin/sshd" in message


def test_done_at_once_does_not_wait():
    clock = Clock()
    assert progress.wait(lambda: True, progress=lambda: 0, stall=1, what="x", clock=clock, sleep=clock.sleep) == 0


def test_a_stall_must_be_positive():
    with pytest.raises(ValueError, match="stall must be positive"):
        progress.wait(lambda: True, progress=lambda: 0, stall=0, what="x")


def test_size_and_tail_of_a_missing_log(tmp_path):
    assert progress.size(tmp_path / "none.log") == -1 and progress.tail(tmp_path / "none.log") == ""
    log = tmp_path / "boot.log"
    log.write_text("".join(f"line {i}\n" for i in range(20)))
    assert progress.size(log) == log.stat().st_size and progress.tail(log, 2) == "line 18\nline 19"


def _node_dir(tmp_path, script_body, monkeypatch):
    """A node folder whose boot script is script_body (run by /bin/sh, not under unshare: no root needed)."""
    from gpusim import node

    nd = tmp_path / "n-01"
    (nd / "log").mkdir(parents=True)
    (nd / "boot.sh").write_text(f"exec >>{nd}/log/boot.log 2>&1\nset -x\n{script_body}\n")
    monkeypatch.setattr(node, "unshare_command", lambda node_dir, script="boot.sh": ["/bin/sh", str(node_dir / script)])
    return node, nd


def test_a_boot_that_keeps_logging_runs_to_its_end(tmp_path, monkeypatch):
    node, nd = _node_dir(tmp_path, "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.1; done", monkeypatch)
    node.boot(nd, stall=0.5)  # 1 s in all: past the stall, but every step logs
    assert node.power(nd) == "up" and "+ sleep 0.1" in (nd / "log" / "boot.log").read_text()


def test_a_boot_stuck_on_one_step_is_killed_and_names_the_step(tmp_path, monkeypatch):
    node, nd = _node_dir(tmp_path, "true started\nsleep 30\ntrue never", monkeypatch)
    with pytest.raises(RuntimeError, match=r"(?s)n-01's boot.sh: no progress for 0.5s.*\+ sleep 30"):
        node.boot(nd, stall=0.5)
    assert node.power(nd) != "up"


def test_a_boot_that_fails_says_so_with_its_log(tmp_path, monkeypatch):
    node, nd = _node_dir(tmp_path, "mount --bind /nonexistent-gpusim /nonexistent-gpusim-too\nexit 3", monkeypatch)
    with pytest.raises(RuntimeError, match=r"(?s)node n-01 failed to boot \(rc 3\).*mount --bind"):
        node.boot(nd, stall=5)


def test_the_cli_says_why_a_bring_up_stalled_without_a_traceback(monkeypatch, capsys):
    from gpusim import cli, fleet

    def stalled(*_args, **_kwargs):
        raise progress.Stalled("gpusim: node n-01's boot.sh: no progress for 120s; its log ends:\n+ /usr/sbin/sshd")

    monkeypatch.setattr(fleet, "status", stalled)
    assert cli.main(["status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpusim: node n-01's boot.sh: no progress") and "+ /usr/sbin/sshd" in err and "Traceback" not in err
