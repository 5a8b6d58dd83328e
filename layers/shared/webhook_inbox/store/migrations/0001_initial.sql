-- migrate:supersedes 3bc27debe0ddf8aad3b30e9e5a5001d68c4be694948876e3566389ce3b950ff0
-- 0001: the inbox, the outbox and the operator audit trail.
--
-- Edited after release: the released text also created the example application's tables
-- (subscriptions, customers). They moved to the application's own migrations
-- (webhook_inbox_app/migrations/0001_example_tables.sql, CREATE TABLE IF NOT EXISTS). A database
-- that ran the released text keeps them and its recorded checksum (named above); that migration
-- then finds them and changes nothing. A fresh database gets them from the application.

-- The inbox: one row per authentic event, keyed by the id the provider's signature covers.
CREATE TABLE webhook_events (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider          text        NOT NULL CHECK (provider ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    -- The deduplication key: the id the signature authenticates. For providers whose id header
    -- is not signed (GitHub, Shopify) it is the SHA-256 of the signed body ("sha256:<hex>").
    event_id          text        NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    -- The provider's delivery / message id header, informational only (may be unsigned).
    delivery_id       text        CHECK (length(delivery_id) <= 255),
    event_type        text        NOT NULL CHECK (length(event_type) BETWEEN 1 AND 255),
    status            text        NOT NULL DEFAULT 'received' CHECK (status IN
                          ('received', 'processing', 'processed', 'failed', 'dead_letter', 'ignored')),
    attempts          integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    delivery_count    integer     NOT NULL DEFAULT 1 CHECK (delivery_count >= 1),
    body_sha256       bytea       NOT NULL CHECK (length(body_sha256) = 32),
    payload           jsonb,
    available_at      timestamptz NOT NULL DEFAULT now(),
    lease_owner       text        CHECK (length(lease_owner) <= 200),
    lease_expires_at  timestamptz,
    enqueued_at       timestamptz,
    received_at       timestamptz NOT NULL DEFAULT now(),
    last_delivery_at  timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    processed_at      timestamptz,
    error_kind        text        CHECK (length(error_kind) <= 64),
    last_error        text        CHECK (length(last_error) <= 1000),
    disposition       text        CHECK (length(disposition) <= 200),
    payload_purged_at timestamptz,
    CONSTRAINT webhook_events_dedup UNIQUE (provider, event_id),
    -- A lease exists exactly while a worker owns the row.
    CONSTRAINT webhook_events_lease_iff_processing
        CHECK ((status = 'processing') = (lease_expires_at IS NOT NULL AND lease_owner IS NOT NULL)),
    CONSTRAINT webhook_events_payload_until_purged
        CHECK (payload IS NOT NULL OR payload_purged_at IS NOT NULL)
);

-- Sweeper: never-enqueued received rows and failed rows that are due.
CREATE INDEX webhook_events_ready_idx ON webhook_events (available_at)
    WHERE status IN ('received', 'failed');
-- Sweeper: expired leases.
CREATE INDEX webhook_events_lease_idx ON webhook_events (lease_expires_at)
    WHERE status = 'processing';
-- Backlog metrics (counts and oldest age per status) and operator listings.
CREATE INDEX webhook_events_status_received_idx ON webhook_events (status, received_at);
-- Retention: terminal rows by age.
CREATE INDEX webhook_events_terminal_idx ON webhook_events (updated_at)
    WHERE status IN ('processed', 'ignored', 'dead_letter');


-- The transactional outbox: written in the same transaction as the domain change.
CREATE TABLE outbox_messages (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic             text        NOT NULL CHECK (length(topic) BETWEEN 1 AND 256),
    deduplication_key text        NOT NULL CHECK (length(deduplication_key) BETWEEN 1 AND 512),
    payload           jsonb       NOT NULL,
    source_event_id   bigint      REFERENCES webhook_events (id) ON DELETE SET NULL,
    status            text        NOT NULL DEFAULT 'pending'
                          CHECK (status IN ('pending', 'published', 'dead')),
    attempts          integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    available_at      timestamptz NOT NULL DEFAULT now(),
    lease_expires_at  timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    published_at      timestamptz,
    last_error        text        CHECK (length(last_error) <= 1000),
    CONSTRAINT outbox_messages_dedup UNIQUE (deduplication_key),
    CONSTRAINT outbox_messages_published_at CHECK ((status = 'published') = (published_at IS NOT NULL))
);

-- Sweeper: pending messages that are due (and not leased by another sweeper).
CREATE INDEX outbox_messages_ready_idx ON outbox_messages (available_at)
    WHERE status = 'pending';
CREATE INDEX outbox_messages_source_idx ON outbox_messages (source_event_id);
CREATE INDEX outbox_messages_status_idx ON outbox_messages (status, created_at);


-- Every operator action (replay, outbox retry) with who did it and why.
CREATE TABLE operator_actions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action           text        NOT NULL CHECK (action IN ('replay', 'outbox_retry')),
    operator         text        NOT NULL CHECK (length(operator) BETWEEN 1 AND 200),
    reason           text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    event_row_id     bigint      REFERENCES webhook_events (id) ON DELETE SET NULL,
    outbox_id        bigint      REFERENCES outbox_messages (id) ON DELETE SET NULL,
    previous_status  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (event_row_id IS NOT NULL OR outbox_id IS NOT NULL)
);
CREATE INDEX operator_actions_event_idx ON operator_actions (event_row_id);
