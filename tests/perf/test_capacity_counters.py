"""The server counters behind bench/capacity_inputs.py (the capacity model's inputs) count the
measured connection's work and nothing else's, and leave that connection as they found it.

The model in docs/design.md multiplies these per-unit figures by ten thousand: a reading that
took another session's WAL, or one that stayed at zero because the session's statistics were
never flushed, would be wrong by as much.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg.pq import TransactionStatus

from bench.server_counters import cpu_ns, difference, read_counters

ROW = "x" * 200


def test_counters_count_the_measured_sessions_wal_and_cpu_only(database_url: str) -> None:
    with (
        psycopg.connect(database_url) as measured,  # not autocommit, as the functions' are
        psycopg.connect(database_url, autocommit=True) as observer,
        psycopg.connect(database_url, autocommit=True) as bystander,
    ):
        observer.execute("CREATE TABLE capacity_probe (v text)")
        before = read_counters(measured, observer)
        # Reading must not leave the measured session inside a transaction: its statistics are
        # flushed only once it is idle, and an open transaction would hold its locks.
        assert measured.info.transaction_status == TransactionStatus.IDLE
        for _ in range(10):
            measured.execute("INSERT INTO capacity_probe VALUES (%s)", (ROW,))
        measured.commit()
        bystander.execute(
            "INSERT INTO capacity_probe SELECT repeat('y', 1000) FROM generate_series(1, 2000)"
        )
        after = read_counters(measured, observer)
        assert measured.info.transaction_status == TransactionStatus.IDLE
        local = Path(f"/proc/{measured.info.backend_pid}").exists()  # a server on this machine

    unit = difference("ten inserts", 10, before, after)
    # Ten row inserts and a commit: each record carries the 200-byte row. The bystander's 2 MB
    # are not in it.
    assert unit.wal_records >= 11
    assert 10 * len(ROW) <= unit.wal_bytes < 20_000
    if local:
        assert unit.backend_cpu_s is not None
        assert unit.server_cpu_s is not None
        assert 0 < unit.backend_cpu_s <= unit.server_cpu_s


def test_cpu_of_a_process_that_is_not_there_is_unknown() -> None:
    assert cpu_ns(2**31 - 1) is None
