"""A cold connect in the stack's own network: IPv6 only (NETWORK_IP_FAMILY=ipv6) against as before.

    python -m bench.ipv6_connect [--rounds 3] [--write]

The own network drops IPv4 to the internet without an answer, while a dual-stack name resolves
to both families. Here, on loopback only: a made-up name resolves to 127.0.0.1 first and ::1
second (tests/faults/resolver.py); on 127.0.0.1 a listener whose accept queue is full, so the
kernel drops every SYN to it (a connect waits out its timeout, as in the VPC); on ::1 the real
servers. Time to the first successful use, cold, per round:

- *AWS*: a new SQS client with ingest's call limits (0.5 s connect) and one SendMessage to a moto
  server on ::1 (``aws.reset()`` before each round, so the client and its connection are new).
- *database*: ``db.connect`` with the template's ``DB_CONNECT_TIMEOUT_S`` (3 s) through a fault
  proxy on ::1 in front of PostgreSQL. libpq resolves in C and cannot see the made-up name, so
  the baseline gives it what it would get from a resolver that answers IPv4 first
  (``host=name,name hostaddr=127.0.0.1,::1``: libpq tries them in order, each with the timeout).

Baseline (NETWORK_IP_FAMILY unset) and IPv6 only alternate round by round; medians. Prints both and
their ratio; ``--write`` also writes bench/results/ipv6_connect.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from bench.common import ROOT, bench_database, machine_details, machine_line
from tests.faults.proxy import FaultProxy, pg_upstream
from tests.faults.resolver import resolving
from webhook_inbox import aws, config
from webhook_inbox.store import db

NAME = "dualstack.own-network.test"
RESULT = ROOT / "bench" / "results" / "ipv6_connect.md"
DB_CONNECT_TIMEOUT_S = "3"  # template.yaml's


@contextmanager
def dropping_ipv4(port: int) -> Iterator[None]:
    """127.0.0.1:port silently drops new connections: a listener with a full accept queue."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", port))
    listener.listen(0)
    filler = socket.create_connection(("127.0.0.1", port), timeout=1)  # fills the queue
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.settimeout(0.2)
    try:
        probe.connect(("127.0.0.1", port))
    except TimeoutError:
        pass  # dropped, as wanted
    else:
        raise SystemExit("this kernel answers a full accept queue: no dropped IPv4 to measure")
    finally:
        probe.close()
    try:
        yield
    finally:
        filler.close()
        listener.close()


def _family(value: str | None) -> None:
    if value is None:
        os.environ.pop("NETWORK_IP_FAMILY", None)
    else:
        os.environ["NETWORK_IP_FAMILY"] = value
    config.reset()
    aws.reset()


def _timed(action: Callable[..., None], *args: str | int) -> float:
    started = time.perf_counter()
    action(*args)
    return time.perf_counter() - started


def _aws_round(port: int) -> None:
    sqs = aws.client(
        "sqs", region_name="us-east-1", endpoint_url=f"http://{NAME}:{port}", limits=aws.INGEST
    )
    error = aws.send_wakeup(sqs, f"http://{NAME}:{port}/123456789012/processing", 1)
    if error is not None:
        raise AssertionError(f"SendMessage failed: {error}")


def _db_round(url: str) -> None:
    with db.connect(url) as conn:
        conn.execute("SELECT 1")


def measure(rounds: int) -> tuple[dict[str, tuple[float, float]], str]:
    from moto.server import ThreadedMotoServer
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    os.environ["DB_CONNECT_TIMEOUT_S"] = DB_CONNECT_TIMEOUT_S
    moto = ThreadedMotoServer(ip_address="::1", port=0, verbose=False)
    moto.start()
    moto_port = moto.get_host_and_port()[1]
    samples: dict[str, dict[str, list[float]]] = {
        "AWS": {"before": [], "ipv6": []},
        "database": {"before": [], "ipv6": []},
    }
    try:
        with (
            bench_database() as url,
            FaultProxy(pg_upstream(url), listen_host="::1") as proxy,
            dropping_ipv4(moto_port),
            dropping_ipv4(proxy.port),
            resolving(NAME, ["127.0.0.1", "::1"]),
        ):
            _family(None)
            sqs = aws.client(
                "sqs", region_name="us-east-1", endpoint_url=f"http://[::1]:{moto_port}"
            )
            sqs.create_queue(QueueName="processing")
            params = conninfo_to_dict(url)
            params.update(port=str(proxy.port), sslmode="disable", gssencmode="disable")
            params.pop("host", None)
            by_name = make_conninfo(**params, host=NAME)
            as_libpq_would = make_conninfo(
                **params, host=f"{NAME},{NAME}", hostaddr="127.0.0.1,::1"
            )
            for number in range(rounds):
                order = ["before", "ipv6"] if number % 2 == 0 else ["ipv6", "before"]
                for mode in order:
                    _family("ipv6" if mode == "ipv6" else None)
                    samples["AWS"][mode].append(_timed(_aws_round, moto_port))
                    db_url = by_name if mode == "ipv6" else as_libpq_would
                    samples["database"][mode].append(_timed(_db_round, db_url))
            machine = machine_line(machine_details(url))
    finally:
        _family(None)
        moto.stop()
    medians = {
        path: (statistics.median(by["before"]), statistics.median(by["ipv6"]))
        for path, by in samples.items()
    }
    return medians, machine


def render(results: dict[str, tuple[float, float]], rounds: int) -> str:
    lines = [
        "| first successful use, cold | before (IPv4 first, dropped) | IPv6 only | ratio |",
        "|---|---:|---:|---:|",
    ]
    for path, (before, ipv6) in results.items():
        lines.append(
            f"| {path} | {before * 1000:.0f} ms | {ipv6 * 1000:.1f} ms | {before / ipv6:.0f}x |"
        )
    return "\n".join(lines) + f"\n\nMedians of {rounds} rounds.\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's request lines
    results, machine = measure(args.rounds)
    table = render(results, args.rounds)
    print(table)
    if args.write:
        RESULT.write_text(
            "# A cold connect in the stack's own network\n\n"
            f"`python -m bench.ipv6_connect --rounds {args.rounds} --write`: {machine}.\n\n"
            "A name resolving to 127.0.0.1 (dropped: a full accept queue) first and ::1 second; "
            "AWS: a new SQS client with ingest's limits (0.5 s connect) and one SendMessage to "
            "moto; database: `db.connect` with `DB_CONNECT_TIMEOUT_S=3`, the template's. Before: "
            "as the functions connected until now; IPv6 only: `NETWORK_IP_FAMILY=ipv6`, what "
            "the template sets in the stack's own network.\n\n" + table
        )


if __name__ == "__main__":
    main()
