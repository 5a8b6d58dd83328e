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

-- name: refusal_reasons
-- What dev refused since a time, per provider and reason, most frequent first.
SELECT provider, coalesce(reason, 'status ' || status) AS reason, count(*) AS refused
  FROM dev_refused_deliveries
 WHERE refused_at >= %(since)s
 GROUP BY 1, 2
 ORDER BY 3 DESC, 1, 2
 LIMIT %(limit)s

-- name: has_refused_deliveries
SELECT to_regclass('dev_refused_deliveries') IS NOT NULL

-- name: create_handler_changes
-- dev's record of which events' handlers wrote a row of your tables: one row per event and
-- transaction, written by a row trigger dev puts on each of your tables (never on a deployed
-- stack). A handler's statement that changes no row (a guarded upsert, an update that matches
-- nothing, an insert that conflicts) fires no row trigger, so leaves nothing here.
CREATE TABLE IF NOT EXISTS dev_handler_changes (
    event_row_id bigint NOT NULL,
    xact         xid8   NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (event_row_id, xact)
)

-- name: create_change_trigger_function
-- The event whose handler is running, as dev's processor names it before each handler
-- (name_handler_event; the deployed processor's guard names events only where it must).
CREATE OR REPLACE FUNCTION dev_note_handler_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    token text := nullif(current_setting('webhook_inbox_dev.event', true), '');
BEGIN
    IF token IS NOT NULL THEN
        INSERT INTO dev_handler_changes (event_row_id) VALUES (token::bigint)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$

-- name: name_handler_event
-- dev's processor, before each handler: the event the trigger above records a change for
-- (transaction-local, as the handler's own writes are).
SELECT set_config('webhook_inbox_dev.event', %(id)s, true)

-- name: handler_changed
-- Whether the run that marked the event processed (the transaction that wrote the row's current
-- version) changed a row of your tables or queued an outbox message.
SELECT EXISTS (SELECT FROM dev_handler_changes c
                WHERE c.event_row_id = e.id AND xid(c.xact) = e.xmin)
       OR EXISTS (SELECT FROM outbox_messages m
                   WHERE m.source_event_id = e.id AND m.xmin = e.xmin)
  FROM webhook_events e
 WHERE e.id = %(id)s
