-- 0001: the example handlers' domain tables (handlers.py, sql/examples.sql).
--
-- Until this release the runtime's 0001_initial.sql created them. IF NOT EXISTS: a database that
-- ran that text already has them (and their rows), and this migration leaves them as they are;
-- a fresh database gets them here. Tables of your own need no IF NOT EXISTS: add 0002_….sql.

-- Example domain table: subscriptions, updated only by a newer provider version.
CREATE TABLE IF NOT EXISTS subscriptions (
    provider          text        NOT NULL,
    subscription_id   text        NOT NULL CHECK (length(subscription_id) BETWEEN 1 AND 255),
    customer_id       text,
    status            text        NOT NULL CHECK (length(status) BETWEEN 1 AND 64),
    provider_version  bigint      NOT NULL,
    source_event_id   text        NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, subscription_id)
);

-- Example domain table: customers, created and deleted. A delete that arrives before its
-- create leaves a tombstone, and the late create is then a no-op (see handlers).
CREATE TABLE IF NOT EXISTS customers (
    provider          text        NOT NULL,
    customer_id       text        NOT NULL CHECK (length(customer_id) BETWEEN 1 AND 255),
    status            text        NOT NULL CHECK (status IN ('active', 'deleted')),
    created_event_id  text,
    deleted_event_id  text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    deleted_at        timestamptz,
    PRIMARY KEY (provider, customer_id),
    CHECK ((status = 'deleted') = (deleted_at IS NOT NULL))
);
