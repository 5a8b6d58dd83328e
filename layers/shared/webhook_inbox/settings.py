"""Every function's settings, in one place: each environment variable is declared here once.

A settings class is a frozen dataclass whose :func:`~webhook_inbox.config.setting` fields name
their variables; the functions get theirs from :func:`webhook_inbox.config.current` (read once
per execution environment). The variables more than one reader needs are declared once, in
:class:`QueueSettings`, :class:`RetrySettings`, :class:`ProvidersSettings` and
:class:`RegistrySettings`, and inherited by the classes that need them. An unset string is
``""`` everywhere. The template test (``tests/unit/infra``) compares the variables of the
classes a function's code names with the ones template.yaml gives it.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook_inbox.config import setting
from webhook_inbox.errors import ConfigurationError

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# Bounded waits everywhere: a webhook provider gives us seconds, not minutes.
DEFAULT_CONNECT_TIMEOUT_S = 3
DEFAULT_STATEMENT_TIMEOUT_MS = 5000
DEFAULT_LOCK_TIMEOUT_MS = 2000
# How old ingest lets its copy of the providers registry grow before it re-reads it: a change
# made by `webhook-inbox providers` is served within this (plus one delivery's time).
DEFAULT_PROVIDERS_REFRESH_S = 30.0
# The oldest copy of the registry ingest accepts deliveries by when it cannot re-read it: past
# this, every delivery is a retriable 503. So a secret revoked or a provider removed stops
# verifying within this, whatever Secrets Manager does (`webhook-inbox providers` promises it).
DEFAULT_PROVIDERS_MAX_AGE_S = 60.0
# Stripe retries a failed delivery for up to three days: forgetting a key sooner would let a
# legitimate retry in as a new event.
MIN_KEY_RETENTION_DAYS = 3


@dataclass(frozen=True, kw_only=True)
class IdleLedgerSettings:
    """The idle ledger's bucket (:mod:`webhook_inbox.idle_ledger`): every function that writes
    to the database marks its activity there, and the sweeper reads it to leave an idle
    database alone. Unset: no marks, and every sweeper run connects."""

    idle_ledger_bucket: str = setting("IDLE_LEDGER_BUCKET", "")


@dataclass(frozen=True, kw_only=True)
class QueueSettings:
    """The processing queue, which ingest, the processor and the sweeper send wake-ups to."""

    queue_url: str = setting("PROCESSING_QUEUE_URL", "")


@dataclass(frozen=True, kw_only=True)
class RetrySettings:
    """How often and how far apart an event is retried: the processor applies the rules, the
    sweeper dead-letters by them when a lease expires."""

    max_attempts: int = setting("MAX_ATTEMPTS", 8)
    retry_base_seconds: float = setting("RETRY_BASE_SECONDS", 5.0)
    retry_max_seconds: float = setting("RETRY_MAX_SECONDS", 3600.0)


@dataclass(frozen=True, kw_only=True)
class CircuitSettings:
    """The per-handler circuit breaker (:mod:`webhook_inbox.processing.circuits`): a key failing
    twice with no success between holds its failed events; ``threshold`` consecutive failures
    (none more than ``window`` seconds after the previous) hold every event of the key, and one
    is let through per cool-down, doubling up to its maximum; the key's first success resumes
    it. A key not yet at the threshold and quiet for ``window`` seconds is resumed too."""

    circuit_failure_threshold: int = setting("CIRCUIT_FAILURE_THRESHOLD", 5)
    circuit_window_seconds: float = setting("CIRCUIT_WINDOW_SECONDS", 600.0)
    circuit_cooldown_seconds: int = setting("CIRCUIT_COOLDOWN_SECONDS", 60)
    circuit_max_cooldown_seconds: int = setting("CIRCUIT_MAX_COOLDOWN_SECONDS", 900)


@dataclass(frozen=True, kw_only=True)
class ProvidersSettings:
    """The providers ingest verifies, inline (JSON or TOML) or in a file; the tools read the same
    (:func:`webhook_inbox.ingest.providers.registry`)."""

    providers_config: str = setting("PROVIDERS_CONFIG", "")
    providers_config_file: str = setting("PROVIDERS_CONFIG_FILE", "")


@dataclass(frozen=True, kw_only=True)
class RegistrySettings(ProvidersSettings):
    """The stack's providers registry secret: when set, its document decides which providers
    are served (ingest) and is checked once a run (the sweeper)."""

    providers_registry_arn: str = setting("PROVIDERS_REGISTRY_ARN", "")


@dataclass(frozen=True, kw_only=True)
class IngestSettings(QueueSettings, RegistrySettings, IdleLedgerSettings):
    """The ingest function's, passed to :func:`webhook_inbox.ingest.pipeline.handle`."""

    max_body_bytes: int = setting("MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)
    # Set by Lambda (the function's MemorySize); 0 outside Lambda. Bounds the body ingest parses.
    memory_mb: int = setting("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", 0)
    # Ingest's copy of the registry (provider_source): re-read once it is this many seconds
    # old, never used to accept once it is the max age.
    providers_refresh_s: float = setting("PROVIDERS_REFRESH_S", DEFAULT_PROVIDERS_REFRESH_S)
    providers_max_age_s: float = setting("PROVIDERS_MAX_AGE_S", DEFAULT_PROVIDERS_MAX_AGE_S)

    def __post_init__(self) -> None:
        if not 0 < self.providers_refresh_s <= self.providers_max_age_s:
            raise ConfigurationError(
                "PROVIDERS_REFRESH_S must be positive and at most PROVIDERS_MAX_AGE_S "
                f"({self.providers_refresh_s} > {self.providers_max_age_s})"
            )


@dataclass(frozen=True, kw_only=True)
class ProcessorSettings(QueueSettings, RetrySettings, CircuitSettings, IdleLedgerSettings):
    """The processor's: without a queue URL a retry waits for the sweeper instead of SQS."""

    # The processing queue's maxReceiveCount (template.yaml, RedrivePolicy): a message's
    # receive of this number is its last before the DLQ (processing.batch.hand_back).
    wakeup_max_receives: int = setting("WAKEUP_MAX_RECEIVES", 5)


@dataclass(frozen=True, kw_only=True)
class PublisherSettings:
    """Where the outbox publishes: ``eventbridge`` (a bus, default ``default``) or ``sns``."""

    destination: str = setting("OUTBOX_DESTINATION", "eventbridge")
    event_bus_name: str = setting("OUTBOX_EVENT_BUS_NAME", "default")
    topic_arn: str = setting("OUTBOX_TOPIC_ARN", "")


@dataclass(frozen=True, kw_only=True)
class SweeperSettings(
    QueueSettings, RetrySettings, RegistrySettings, CircuitSettings, IdleLedgerSettings
):
    """The sweeper's: the variables, then tuning with fixed defaults."""

    outbox_max_attempts: int = setting("OUTBOX_MAX_ATTEMPTS", 10)
    payload_retention_days: int = setting("PAYLOAD_RETENTION_DAYS", 30)
    key_retention_days: int = setting("KEY_RETENTION_DAYS", 90)
    # The longest a run may leave the database alone on the ledger's word: a backstop for writes
    # no activity mark announces (SQL typed by hand). Aurora needs 300 s to pause.
    idle_max_skip_seconds: int = setting("IDLE_MAX_SKIP_SECONDS", 86_400)
    # Tuning, not configuration: sizes that keep each statement and transaction short.
    lease_batch: int = 500
    enqueue_batch: int = 100
    outbox_batch: int = 50
    retention_batch: int = 500
    # Partitions exist this many days ahead: a sweeper down for less never leaves a claim
    # without a partition for its id.
    partitions_ahead_days: int = 7
    # A row sent this long ago and still waiting may have lost its message - or may be waiting
    # in a long queue. Either way it is re-woken (and stamped again, so at most once per this
    # many seconds): a lost wake-up is re-sent within this plus one schedule period (1 min) of
    # its stamp, 9 minutes, under the 10 the design promises.
    reenqueue_stale_seconds: float = 480.0
    # Stale rows claimed per batch: one SendMessageBatch call of ten 25-row re-wakes.
    stale_batch: int = 250
    # At most this many re-wakes per run, so that a huge backlog leaves the run time for the
    # outbox and retention (docs/design.md: past this many stale rows a minute, the bound grows).
    stale_resend_cap: int = 25_000
    # Stop starting batches when less than this is left; the backlog measurement, one indexed
    # query, still runs down to the smaller reserve.
    safety_margin_ms: int = 10_000
    measure_reserve_ms: int = 5_000
    # An outbox lease outlives this run by this much, so a crashed run's messages come back soon.
    outbox_lease_margin_s: float = 30.0
    max_batches_per_step: int = 10_000

    def __post_init__(self) -> None:
        if not self.queue_url:
            raise ConfigurationError("PROCESSING_QUEUE_URL is not set")
        # A key retention shorter than the payload retention is allowed: deleting the row then
        # simply removes its payload earlier. One shorter than the providers' retry windows is
        # not (the template's MinValue refuses it at deploy time too).
        if self.idle_max_skip_seconds < 0:
            raise ConfigurationError("IDLE_MAX_SKIP_SECONDS must not be negative")
        if self.key_retention_days < MIN_KEY_RETENTION_DAYS:
            raise ConfigurationError(
                f"KEY_RETENTION_DAYS must be at least {MIN_KEY_RETENTION_DAYS} "
                "(providers retry for days; an earlier key would accept a retry as new)"
            )


OPERATOR_LEVELS = ("read", "act")


@dataclass(frozen=True, kw_only=True)
class OperatorSettings(QueueSettings, IdleLedgerSettings):
    """An operator function's (deployed twice from one code): ``read`` answers status, listings
    and events; ``act`` also replays (sending wake-ups to the queue), retries outbox messages
    and returns payloads."""

    level: str = setting("OPERATOR_LEVEL", "")

    def __post_init__(self) -> None:
        if self.level not in OPERATOR_LEVELS:
            raise ConfigurationError(
                f"OPERATOR_LEVEL must be one of {', '.join(OPERATOR_LEVELS)}, got {self.level!r}"
            )


NETWORK_IP_FAMILIES = ("", "ipv6")


@dataclass(frozen=True, kw_only=True)
class NetworkSettings:
    """How the function's connections leave (:mod:`webhook_inbox.network`): ``ipv6`` in the
    stack's own network, whose only way to the internet is IPv6; unset everywhere else."""

    ip_family: str = setting("NETWORK_IP_FAMILY", "")

    def __post_init__(self) -> None:
        if self.ip_family not in NETWORK_IP_FAMILIES:
            raise ConfigurationError(
                f"NETWORK_IP_FAMILY must be ipv6 or unset, got {self.ip_family!r}"
            )


@dataclass(frozen=True, kw_only=True)
class DatabaseSettings:
    """Where the database is, how to sign in, and the bounded waits of every connection: every
    function that connects reads these (:func:`webhook_inbox.store.db.settings`)."""

    url: str = setting("DATABASE_URL", "")
    secret_arn: str = setting("DATABASE_SECRET_ARN", "")
    iam_auth: bool = setting("DATABASE_IAM_AUTH", False)
    # Beside an RDS-managed `rds!` secret, which holds only the username and password.
    host: str = setting("DATABASE_HOST", "")
    port: str = setting("DATABASE_PORT", "")
    name: str = setting("DATABASE_NAME", "")
    connect_timeout_s: int = setting("DB_CONNECT_TIMEOUT_S", DEFAULT_CONNECT_TIMEOUT_S)
    statement_timeout_ms: int = setting("DB_STATEMENT_TIMEOUT_MS", DEFAULT_STATEMENT_TIMEOUT_MS)
    lock_timeout_ms: int = setting("DB_LOCK_TIMEOUT_MS", DEFAULT_LOCK_TIMEOUT_MS)
    startup_options: str = setting("DB_STARTUP_OPTIONS", "auto")
