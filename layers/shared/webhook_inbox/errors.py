"""The project's one exception hierarchy.

Every error the library raises derives from :class:`WebhookInboxError`. Driver errors (psycopg)
are translated into this hierarchy in exactly one place,
:func:`webhook_inbox.store.store_errors.translate`, and the hierarchy is mapped to HTTP answers /
SQS outcomes in exactly one place per entry point.
"""

from __future__ import annotations


class WebhookInboxError(Exception):
    """Root of every error raised by webhook_inbox."""


class ConfigurationError(WebhookInboxError):
    """The deployment's configuration is missing or invalid (an operator must fix it)."""


# --- storage -----------------------------------------------------------------------------


class StoreError(WebhookInboxError):
    """A database call failed."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or did not answer in time; retrying later may succeed."""


class StoreCredentialsRejected(StoreUnavailable):
    """The database refused the login (wrong password, unknown or disabled user): after a
    rotation, the cached database secret may be out of date."""


class StoreLockTimeout(StoreUnavailable):
    """A statement waited for a lock longer than its lock timeout (another transaction holds
    the row or table)."""


class StoreStatementTimeout(StoreUnavailable):
    """A statement bounded by its caller's own time ran past it and was cancelled (the database
    answers): the switch's scan of the old table, given what is left of a sweeper run."""


class StoreConflict(StoreError):
    """A transaction lost a race (serialization failure, deadlock); retrying may succeed."""


class LeaseLost(StoreError):
    """The worker's lease on an inbox row expired and another worker may own the row now.

    ``rows``: the inbox rows no longer leased, when the database named them (the fast pass's
    batched mark does); empty when the caller knows which row it asked about.
    """

    def __init__(self, message: str, rows: frozenset[int] = frozenset()) -> None:
        super().__init__(message)
        self.rows = rows


class MigrationError(StoreError):
    """The schema cannot be brought up to date (for example an applied migration was edited)."""


# --- the idle ledger -----------------------------------------------------------------------


class LedgerUnavailable(WebhookInboxError):
    """The idle ledger (its S3 objects) could not be read or written; the sweeper then connects
    to the database as if there were no ledger (docs/design.md, "Idle means idle")."""


# --- ingest ------------------------------------------------------------------------------


class RequestRejected(WebhookInboxError):
    """An inbound delivery is refused; ``status`` is the HTTP status to answer with."""

    status: int = 400
    reason: str = "invalid"

    def __init__(self, detail: str, *, reason: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if reason is not None:
            self.reason = reason


class UnknownProvider(RequestRejected):
    status = 404
    reason = "unknown_provider"


class PayloadTooLarge(RequestRejected):
    status = 413
    reason = "size"


class InvalidPayload(RequestRejected):
    status = 400
    reason = "schema"


class AuthenticationFailed(RequestRejected):
    """Signature missing, malformed, wrong or stale. The detail is for logs only."""

    status = 401
    reason = "signature"


class MethodNotAllowed(RequestRejected):
    """A GET that is no challenge its provider's scheme answers (to a sender without one, a
    crawler): refused before any signature check, so it is not counted as a signature
    failure (the signature-rejections alarm)."""

    status = 405
    reason = "method"


# --- operator requests -------------------------------------------------------------------


class OperatorRequestRefused(WebhookInboxError):
    """An operator's command is refused as asked (the operator function answers ``status``;
    the CLI prints the message): malformed or contradictory (400)."""

    status: int = 400


class OperatorForbidden(OperatorRequestRefused):
    """The caller's level does not allow the command (the read function and an act command or
    a payload), or the request carries no caller AWS authenticated."""

    status = 403


class OperatorNotFound(OperatorRequestRefused):
    """The command names something that does not exist (an event ``events show`` looks for)."""

    status = 404


class OperatorConflict(OperatorRequestRefused):
    """The command asks for a state that is already there (a key paused twice)."""

    status = 409


class OperatorAnswerTooLarge(OperatorRequestRefused):
    """The answer would not fit in a Lambda response (a payload too large to return)."""

    status = 413


# --- processing --------------------------------------------------------------------------


class EventError(WebhookInboxError):
    """A domain handler could not apply an event."""

    kind: str = "handler_error"


class RetryableEventError(EventError):
    """Try again later with backoff (a dependency was not ready, a transient failure)."""

    kind = "retryable"


class PermanentEventError(EventError):
    """Retrying cannot help (validation failure, unsupported schema version): dead-letter now."""

    kind = "permanent"


class TransactionControlError(PermanentEventError):
    """A handler ended or rewound the batch's transaction (SQL ``COMMIT``, ``ROLLBACK``, ``AND
    CHAIN``, ``RELEASE``/``ROLLBACK TO`` a savepoint it did not create, ``PREPARE TRANSACTION``)
    or called ``commit()``/``rollback()``: a programming error that no retry can fix. The
    message says what the handler did, as far as the database can tell."""

    kind = "transaction_control"


class SenderUnavailable(WebhookInboxError):
    """Ingest needs something from the sender that it cannot have now: a certificate or key set to
    download from an allowed host (down, slow, oversized, not one), a subscription to confirm,
    or a certificate or key (``kid``) a pinned-only provider has not pinned (the sender started
    using a new one).
    Ingest answers 503 with ``Retry-After`` (never 401: the sender retries) and it pages.
    ``cause`` is ``fetch_failed``, ``not_pinned`` or ``confirm_failed``."""

    def __init__(self, detail: str, *, cause: str) -> None:
        super().__init__(detail)
        self.cause = cause


class SignatureMismatch(AuthenticationFailed):
    """A well-formed signature that no active secret reproduces (may warrant a secret refresh)."""


class SecretUnavailable(WebhookInboxError):
    """A secret (a provider's or the database's) could not be read from Secrets Manager: down,
    hanging, throttled, access denied, or missing. Retrying later may succeed."""


class ProvidersUnavailable(SecretUnavailable):
    """The providers registry cannot be read (or its document is invalid) and no copy may
    serve: none was ever loaded (a cold start), or the last one is past its maximum age.
    ``refresh_failed`` is the reason code of the read this delivery made, if it made one."""

    def __init__(self, detail: str, *, refresh_failed: str | None = None) -> None:
        super().__init__(detail)
        self.refresh_failed = refresh_failed
