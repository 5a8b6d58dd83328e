"""The process's AWS clients and the one wake-up sender.

botocore's defaults (60 s connect, 60 s read, several retries) outlast every function here, so
each client gets the call limits of the function it runs in: each entry point calls :func:`use`
once with its :class:`CallLimits`, and every client the process builds afterwards (SQS, Secrets
Manager, RDS tokens, EventBridge, SNS) carries them. Clients are built once per (service, region,
endpoint) and reused across warm invocations; boto3's session creation is not thread-safe, hence
the lock.

In the stack's own network (:func:`webhook_inbox.network.ipv6_only`) botocore's connections
try only the addresses :func:`webhook_inbox.network.addresses` picks, a dual-stack endpoint's
IPv6 ones: an IPv4 attempt there is dropped and would cost the whole connect timeout.

:func:`send_wakeups` is the only code that sends wake-ups to the processing queue: ingest, the
processor's retries, the sweeper (``rewake``: ``{"ids": […]}``) and the operator's replay.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from webhook_inbox import network, wakeups

if TYPE_CHECKING:  # botocore is imported on the first send, not with this module (ingest)
    from botocore.exceptions import BotoCoreError, ClientError


@dataclass(frozen=True)
class CallLimits:
    """How long one AWS call may take: per attempt, and how many attempts (botocore standard
    retry mode, first attempt included)."""

    connect_timeout_s: float
    read_timeout_s: float
    max_attempts: int

    @property
    def worst_case_s(self) -> float:
        """Every attempt timing out, plus standard mode's backoff (≤ 2**(n-1) s before retry n)."""
        backoff = sum(min(2.0**n, 20.0) for n in range(self.max_attempts - 1))
        return self.max_attempts * (self.connect_timeout_s + self.read_timeout_s) + backoff


# Ingest answers within its 8 s timeout even if Secrets Manager and SQS both hang on the same
# request (a failed send after the commit is the sweeper's job, so one retry is enough).
INGEST = CallLimits(connect_timeout_s=0.5, read_timeout_s=1.0, max_attempts=2)
# Ingest's read of the providers registry: one attempt, since a failed refresh only keeps the
# last good configuration serving until the next refresh interval.
REGISTRY_REFRESH = CallLimits(connect_timeout_s=0.5, read_timeout_s=1.0, max_attempts=1)
# The processor (30 s) sends retry wake-ups after its commit; the leases cover a slow send.
PROCESSOR = CallLimits(connect_timeout_s=1.0, read_timeout_s=3.0, max_attempts=2)
# The sweeper (55 s) stops on its own time budget and stops sending once SQS refuses.
SWEEPER = CallLimits(connect_timeout_s=2.0, read_timeout_s=5.0, max_attempts=2)
# The idle ledger's activity mark, before a writer's first database call: one quick attempt,
# since a failed mark only makes the next invocation mark again (webhook_inbox.idle_ledger),
# and ingest must still answer within its timeout when S3 hangs.
ACTIVITY_MARK = CallLimits(connect_timeout_s=0.5, read_timeout_s=1.0, max_attempts=1)
# The migrations custom resource (300 s) reads the database secret once.
MIGRATIONS = CallLimits(connect_timeout_s=2.0, read_timeout_s=5.0, max_attempts=3)
# The database log groups custom resource (60 s) makes three CloudWatch Logs calls per group.
LOG_GROUPS = CallLimits(connect_timeout_s=2.0, read_timeout_s=5.0, max_attempts=2)
# The database protection custom resource (120 s) makes one or two RDS/CloudFormation calls.
PROTECTION = CallLimits(connect_timeout_s=2.0, read_timeout_s=10.0, max_attempts=3)
# The idle ledger cleanup custom resource (240 s) deletes two objects, waits 65 s, deletes them
# again: four calls at their worst and the wait fit.
LEDGER_CLEANUP = CallLimits(connect_timeout_s=2.0, read_timeout_s=5.0, max_attempts=3)
# The operator functions (60 s) read the database secret and send replay wake-ups (act).
OPERATOR = CallLimits(connect_timeout_s=2.0, read_timeout_s=5.0, max_attempts=2)
# Anything that did not choose (the operator's CLI, tests): bounded all the same.
DEFAULT = CallLimits(connect_timeout_s=2.0, read_timeout_s=5.0, max_attempts=3)

_lock = threading.Lock()
_limits = DEFAULT
_clients: dict[tuple[str, CallLimits, str | None, str | None], Any] = {}
# botocore's own connection classes, while ours stand in for them (:func:`_connect_by_network`).
_botocore_connections: dict[str, type] = {}


class _ByNetwork:
    """Mixed into botocore's HTTP(S) connection: connect to the addresses the network picks, in
    turn, each as urllib3 connects to a name (its timeout, its errors); the name itself stays
    the TLS server name and the Host header."""

    _dns_host: str
    port: int

    def _new_conn(self) -> socket.socket:
        from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

        try:
            chosen = network.addresses(self._dns_host, self.port)
        except OSError:  # does not resolve: urllib3 tries again and reports it its own way
            chosen = None
        if not chosen:
            return super()._new_conn()  # type: ignore[misc, no-any-return]
        for address in chosen[:-1]:
            try:
                return self._new_conn_to(address)
            except (ConnectTimeoutError, NewConnectionError):
                continue  # the next address, as urllib3 goes through a name's
        return self._new_conn_to(chosen[-1])

    def _new_conn_to(self, address: str) -> socket.socket:
        name, self._dns_host = self._dns_host, address
        try:
            return super()._new_conn()  # type: ignore[misc, no-any-return]
        finally:
            self._dns_host = name


def _connect_by_network() -> None:
    """In the stack's own network, every botocore client of the process connects through
    :class:`_ByNetwork` (set on botocore's connection pools, so clients built earlier too)."""
    if _botocore_connections or not network.ipv6_only():
        return
    from botocore import awsrequest

    for pool in (awsrequest.AWSHTTPConnectionPool, awsrequest.AWSHTTPSConnectionPool):
        own = pool.ConnectionCls
        _botocore_connections[pool.__name__] = own
        pool.ConnectionCls = type(own.__name__, (_ByNetwork, own), {})


def _restore_botocore_connections() -> None:
    if not _botocore_connections:
        return
    from botocore import awsrequest

    for pool in (awsrequest.AWSHTTPConnectionPool, awsrequest.AWSHTTPSConnectionPool):
        pool.ConnectionCls = _botocore_connections.pop(pool.__name__)


def use(limits: CallLimits) -> None:
    """Set the process's call limits (each entry point, once, at import)."""
    global _limits  # noqa: PLW0603 - one set of limits per execution environment
    with _lock:
        _limits = limits


def client(
    service: str,
    *,
    region_name: str | None = None,
    endpoint_url: str | None = None,
    limits: CallLimits | None = None,
) -> Any:
    """The process's client for ``service``, built on first use with the process's call limits
    (or ``limits``, for a call that must give up sooner than the process's)."""
    with _lock:
        chosen = limits or _limits
        key = (service, chosen, region_name, endpoint_url)
        if key not in _clients:
            import boto3  # deferred: the ingest path pays for it only when it sends
            from botocore.config import Config

            _connect_by_network()

            config = Config(
                connect_timeout=chosen.connect_timeout_s,
                read_timeout=chosen.read_timeout_s,
                retries={"total_max_attempts": chosen.max_attempts, "mode": "standard"},
            )
            _clients[key] = boto3.client(  # type: ignore[call-overload]
                service, config=config, region_name=region_name, endpoint_url=endpoint_url
            )
        return _clients[key]


def reset() -> None:
    """Forget every client (tests start a fresh moto mock per case), and give botocore its own
    connections back (the next client in the own network puts ours in again)."""
    with _lock:
        _clients.clear()
        _restore_botocore_connections()


def error_code(exc: BaseException) -> str:
    """A short, bounded name for an AWS failure: the service's error code for a ``ClientError``
    (``ThrottlingException``, ``AccessDeniedException``, …), else the exception's class
    (``ReadTimeoutError``, ``EndpointConnectionError``, …). Never carries request data."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        code = response.get("Error", {}).get("Code")
        if isinstance(code, str) and code:
            return code[:64]
    return type(exc).__name__


def send_wakeup(sqs: Any, queue_url: str, row_id: int) -> str | None:
    """Ingest's single wake-up (one SendMessage); the error class instead of raising."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        sqs.send_message(QueueUrl=queue_url, MessageBody=wakeups.wakeup_body(row_id))
    except (BotoCoreError, ClientError) as exc:
        return type(exc).__name__
    return None


@dataclass
class WakeupsSent:
    """What one :func:`send_wakeups` call did with each row id it was given."""

    sent: list[int] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)  # SQS refused the entry: code
    failed: list[int] = field(default_factory=list)  # its SendMessageBatch call failed
    skipped: list[int] = field(default_factory=list)  # not attempted (told to stop)
    errors: list[BotoCoreError | ClientError] = field(default_factory=list)  # each failed call's

    @property
    def unsent(self) -> list[int]:
        return [row_id for row_id, _ in self.rejected] + self.failed + self.skipped


def send_wakeups(
    sqs: Any,
    queue_url: str,
    row_ids: Sequence[int],
    *,
    delays: Mapping[int, int] | None = None,
    keep_going: Callable[[], bool] = lambda: True,
    stop_after_failure: bool = False,
    rewake: bool = False,
) -> WakeupsSent:
    """Send ``{"id": N}`` for each row (ten per SendMessageBatch), optionally with DelaySeconds;
    with ``rewake``, ``{"ids": […]}`` messages of up to ``wakeups.MAX_IDS_PER_MESSAGE`` rows.

    Never raises for an AWS failure: the rows are committed already and whoever sends knows
    how to get them sent later (the sweeper re-sends due rows). ``keep_going`` is asked before
    each call; ``stop_after_failure`` skips the rest once a call failed (SQS is down).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    outcome = WakeupsSent()
    per_call = wakeups.SQS_MAX_BATCH * (wakeups.MAX_IDS_PER_MESSAGE if rewake else 1)
    for chunk in wakeups.chunks(row_ids, per_call):
        if (stop_after_failure and outcome.errors) or not keep_going():
            outcome.skipped.extend(chunk)
            continue
        try:
            if rewake:
                result = wakeups.send_rewakes(sqs, queue_url, chunk)
            else:
                result = wakeups.send_chunk(sqs, queue_url, chunk, delays=delays)
        except (BotoCoreError, ClientError) as exc:
            outcome.failed.extend(chunk)
            outcome.errors.append(exc)
            continue
        outcome.sent.extend(result.sent)
        outcome.rejected.extend(result.rejected)
    return outcome
