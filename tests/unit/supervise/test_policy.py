"""The restart policy on its own: which endings are restarted, after which delay, and what
the restart counter and the log line say of them."""

from __future__ import annotations

import signal

from inferstream.supervise.policy import Ending, RestartPolicy, described, exit_status

ABORT, KILL, SEGV = -signal.SIGABRT, -signal.SIGKILL, -signal.SIGSEGV


def ended(status: int, ran_s: float = 5.0, running: bool = True,
          stopping: bool = False) -> Ending:
    return Ending(status, ran_s, running, stopping)


def test_a_native_crash_is_restarted_with_a_delay_doubling_up_to_the_longest() -> None:
    policy = RestartPolicy(1.0, 30.0)
    delays = [policy.after(ended(ABORT)) for _ in range(7)]
    assert delays == [1, 2, 4, 8, 16, 30, 30]
    assert policy.restarts == {"SIGABRT": 7}


def test_a_healthy_run_starts_the_row_of_delays_again() -> None:
    policy = RestartPolicy(1.0, 30.0, healthy_s=60.0)
    assert [policy.after(ended(SEGV, ran_s=2.0)) for _ in range(3)] == [1, 2, 4]
    assert policy.after(ended(KILL, ran_s=3600.0)) == 1  # the OOM killer, after an hour
    assert policy.after(ended(ABORT, ran_s=2.0)) == 2
    assert policy.restarts == {"SIGSEGV": 3, "SIGKILL": 1, "SIGABRT": 1}
    assert policy.count == 5


def test_an_unexpected_exit_status_is_restarted_and_counted_as_exit() -> None:
    policy = RestartPolicy(0.5, 30.0)
    assert policy.after(ended(1)) == 0.5
    assert policy.after(ended(-signal.SIGHUP)) == 1.0
    assert policy.restarts == {"exit": 1, "signal": 1}


def test_a_bounded_run_and_a_child_being_stopped_are_not_restarted() -> None:
    policy = RestartPolicy(1.0, 30.0)
    assert policy.after(ended(0)) is None  # --idle-exit: done
    assert policy.after(ended(ABORT, stopping=True)) is None  # died while draining
    assert policy.after(ended(128 + signal.SIGTERM, stopping=True)) is None
    assert policy.count == 0


def test_a_failed_start_up_is_final_until_a_child_got_past_its_start_up() -> None:
    """Exit 2 is an error said in one line: a bad setting at the first start, a broker
    still away when a child that ran before is started again."""
    first = RestartPolicy(1.0, 30.0)
    assert first.after(ended(2, running=False)) is None
    later = RestartPolicy(1.0, 30.0)
    assert later.after(ended(ABORT, running=True)) == 1
    assert later.after(ended(2, running=False)) == 2
    assert later.restarts == {"SIGABRT": 1, "exit": 1}


def test_a_refusal_by_the_cluster_is_final_whenever_it_comes() -> None:
    """No restart brings an ACL: a child refused one after its start-up, or at a restart
    after a crash, is not started again (a 2 without a refusal there is a broker away)."""
    line = "User:w may not use transactional id t.0 ..."
    running = RestartPolicy(1.0, 30.0)
    assert running.after(Ending(2, 5.0, True, False, line)) is None
    restarted = RestartPolicy(1.0, 30.0)
    assert restarted.after(ended(ABORT)) == 1
    assert restarted.after(Ending(2, 0.5, False, False, line)) is None
    assert restarted.restarts == {"SIGABRT": 1}


def test_how_a_child_ended_in_words_and_as_the_supervisor_s_exit_status() -> None:
    assert described(ABORT) == "died of SIGABRT"
    assert described(1) == "exited with status 1"
    assert exit_status(ABORT) == 128 + signal.SIGABRT
    assert exit_status(0) == 0
    assert exit_status(143) == 143
