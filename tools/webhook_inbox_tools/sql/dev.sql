-- Statements for `webhook-inbox dev`'s console: what changed since the last look.

-- name: recent_events
SELECT id, provider, event_id, event_type, status, attempts, error_kind, last_error, updated_at
  FROM webhook_events
 WHERE updated_at >= %(since)s
 ORDER BY updated_at, id
 LIMIT 500

-- name: event_by_row
SELECT provider, event_id, event_type, status FROM webhook_events WHERE id = %(id)s

-- name: create_refused_deliveries
-- dev's own record of the deliveries it refused (what a deployed stack keeps as the Rejected
-- metric and ingest's log lines): the bounded fields of ingest's outcome, never a body or a
-- header. Created by dev in its database; no runtime code reads it.
CREATE TABLE IF NOT EXISTS dev_refused_deliveries (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    refused_at  timestamptz NOT NULL DEFAULT now(),
    provider    text        NOT NULL,
    status      integer     NOT NULL,
    reason      text,
    detail      text,
    delivery_id text
)

-- name: record_refusal
INSERT INTO dev_refused_deliveries (provider, status, reason, detail, delivery_id)
VALUES (%(provider)s, %(status)s, left(%(reason)s, 64), left(%(detail)s, 500),
        left(%(delivery_id)s, 255))

-- name: refused_deliveries
SELECT refused_at, provider, status, reason, detail, delivery_id
  FROM dev_refused_deliveries
 WHERE refused_at >= %(since)s
   AND (%(provider)s::text IS NULL OR provider = %(provider)s::text)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: refusals_by_provider
SELECT provider, count(*) FROM dev_refused_deliveries
 WHERE refused_at >= %(since)s AND provider = ANY(%(providers)s::text[])
 GROUP BY provider

-- name: has_refused_deliveries
SELECT to_regclass('dev_refused_deliveries') IS NOT NULL
