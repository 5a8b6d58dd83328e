"""What a million webhooks cost on AWS, all in: the real handlers, measured, priced at list prices.

    python -m bench.cost [--baseline TREE] [--deliveries 600] [--rounds 3] [--db-rtt-ms 1]
                         [--send-ms 10] [--batch-size 10] [--cold-start-rate 0.01] ...

Each variant is a source tree: this checkout, and with ``--baseline`` another one (make it with
``git worktree add --detach /tmp/wi-main main``), so the code of today and the code of this
branch run in the same run, on the same database server, behind the same injected latency,
rounds alternating.
Each (tree, function) runs in a fresh interpreter whose ``sys.path`` is that tree's layer and
application (and its ``functions/<name>/app.py``), as Lambda would load it:

- ingest: ``--deliveries`` signed Stripe deliveries (HTTP API v2 events), ``--duplicate-share``
  of them sent a second time, each right behind its original; the real SendMessage goes over
  HTTP to a moto server;
- processor: the stored rows in SQS-shaped batches of ``--batch-size`` (what the event source
  mapping hands over), the example application's handlers, commits and all;
- sweeper: ``--sweeps`` scheduled runs after that (the steady state: little left to do).

Latency: PostgreSQL and moto are each reached through ``tests/faults/proxy.py`` (loopback TCP)
that delays every chunk by half the round trip in each direction: ``--db-rtt-ms`` for the
database, ``--send-ms`` for AWS calls (a botocore call pays it once per request/response). The
queue is drained while a function runs (:func:`bench.cost_rig.draining`): moto's SendMessage
slows down with the queue's depth, SQS's does not. Each AWS call is counted at the injected
round trip: the rest of its wait is the rig's, not AWS's (moto's own service time, the new
connection werkzeug's server makes each request open, the proxy's scheduling), and is taken off
the invocation's wall time (:class:`bench.cost_child._RigClock`; its median per invocation is in
the report). The injected latency stands for the whole round trip to SQS, its service time
included, as seen from a warm function whose connection is kept alive.

Logs: every byte the function writes to stdout and stderr is captured (the process's streams are
replaced before anything is imported, so Powertools' Logger and its EMF output write into the
capture), per invocation. The Lambda runtime's own lines are added as the tree's template
configures them (``LoggingConfig``), as :func:`bench.cost_bill.platform_lines` renders them.
HTTP API access log lines are rendered from the template's ``AccessLogSettings.Format``.

Compute: each invocation's wall time splits into CPU time (``time.thread_time``) and waiting.
Lambda gives a function CPU in proportion to its memory (one vCPU at 1,769 MB), so the billed
duration at ``M`` MB is ``wait + cpu * max(1, 1769 / M)``, rounded up to 1 ms. Cold starts: the
import's CPU time (billed INIT, scaled the same way) times ``--cold-start-rate``.

Prices are us-east-1 list prices, each an argument (defaults printed with the results). The
floor is what no code can avoid: the endpoint's per-request charge, Lambda requests, SQS
requests. Results go to docs/benchmarks.md (section ``cost``) and stdout.

This module is the entry point (the options, and the child's ``--child`` dispatch); the work is
in bench/cost_child.py (one function of one tree in a fresh interpreter), bench/cost_rig.py (the
parent: database, moto, proxies, one child per tree, function and round), bench/cost_bill.py
(prices, the runtime's own lines, a tree's template, the bill) and bench/cost_report.py (the
Markdown section).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

from bench import memory_sizing
from bench.cost_bill import Deployment, Prices, Workload, per_webhook_invocations
from bench.cost_child import _CHILD_MARK, ROOT, child_main
from bench.cost_report import render
from bench.cost_rig import measure


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == _CHILD_MARK:
        try:
            child_main(sys.argv[2:])
        except BaseException:
            # The child's own streams are captured: say why on the real one.
            import traceback

            sys.__stderr__.write(traceback.format_exc())
            raise
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside this one")
    parser.add_argument(
        "--baseline-name",
        default="baseline",
        help="what the baseline is, as the tables name it (say what it is, not its commit)",
    )
    parser.add_argument("--deliveries", type=int, default=600)
    parser.add_argument("--duplicate-share", type=float, default=0.1)
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db-rtt-ms", type=float, default=1.0)
    parser.add_argument("--send-ms", type=float, default=10.0)
    for name, value in {**vars(Prices()), **vars(Workload())}.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    prices = Prices(**{k: getattr(args, k) for k in vars(Prices())})
    workload = Workload(**{k: getattr(args, k) for k in vars(Workload())})
    trees = {}
    if args.baseline:
        trees[args.baseline_name] = args.baseline.resolve()
    trees["this tree"] = ROOT
    command = "python -m bench.cost " + shlex.join(sys.argv[1:])
    results = measure(trees, args)
    deployments = {label: Deployment.of(tree) for label, tree in trees.items()}
    memory_found = memory_sizing.measurements(
        results["this tree"],
        prices.lambda_gb_second_arm,
        per_webhook_invocations(workload),
        f"`{command}` ({time.strftime('%Y-%m-%d', time.gmtime())}, this tree)",
    )
    text = render(results, deployments, prices, workload, args, command, memory_found)
    if not args.no_write:
        from bench.common import write_section

        write_section("cost", text)
        memory_sizing.write(memory_found)
    print(text)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
