"""The soak's attribution of waits (tests/reliability/soak_terminal.py): what counts as a 503
after commit, and which loss a twice-lost wake-up counts under."""

from __future__ import annotations

from pathlib import Path

from tests.reliability.soak_terminal import (
    KindTimes,
    _retry_after_commit,
    read_losses,
    read_sweeper_sends,
)

CLAIMED = 100.0


def test_a_refusal_after_the_commit_and_before_any_2xx_is_a_503_after_commit() -> None:
    answers = [(104.0, 503), (104.1, 503), (107.0, 200)]
    assert _retry_after_commit(answers, CLAIMED) == (104.1, 107.0)


def test_a_refusal_before_the_commit_or_after_a_2xx_is_not() -> None:
    assert _retry_after_commit([(99.0, 503), (101.0, 202)], CLAIMED) is None  # nothing stored yet
    assert _retry_after_commit([(101.0, 202), (102.0, 503)], CLAIMED) is None  # a duplicate
    assert _retry_after_commit([(101.0, 503)], CLAIMED) is None  # never acknowledged


def test_the_workers_loss_records_are_read_with_their_rows(tmp_path: Path) -> None:
    (tmp_path / "wakeups-1.log").write_text("lost_send 10.5 1,2\nsend_kill 11.0 3\n")
    (tmp_path / "wakeups-2.log").write_text("lost_send 12.0 \n")  # a send of no row

    losses = {(loss.kind, loss.at): loss.rows for loss in read_losses(tmp_path)}

    assert losses == {
        ("lost_send", 10.5): {1: 10.5, 2: 10.5},
        ("send_kill", 11.0): {3: 11.0},
        ("lost_send", 12.0): {},
    }


def test_a_lost_wake_up_is_split_at_the_sweepers_re_send(tmp_path: Path) -> None:
    (tmp_path / "sends-1.log").write_text("20.0 7,8\n")
    (tmp_path / "sends-2.log").write_text("12.0 7\n")
    assert read_sweeper_sends(tmp_path) == {7: [12.0, 20.0], 8: [20.0]}

    times = KindTimes()
    times.add_resend(since_s=10.0, resent=20.0, terminal=21.5)
    times.add_resend(since_s=10.0, resent=None, terminal=13.0)  # it needed no re-send
    assert (times.to_resend_s, times.resend_to_terminal_s) == (10.0, 3.0)
