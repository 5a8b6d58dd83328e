-- Statements behind the operator's commands (listings, replay, outbox retry), run by
-- webhook_inbox.operations.listings and .actions. Named blocks, loaded by webhook_inbox.store.queries.
-- Optional filters are NULL when unused: psycopg sends unnamed statements, which PostgreSQL plans
-- with the actual values, so "NULL IS NULL OR …" folds away.

-- name: list_events
-- Keyset pagination, newest first: the next page starts below the last id of this one.
-- some_id matches an event id or a provider's delivery id: with a provider, through the
-- (provider, event_id) key and webhook_events_delivery_id_idx; across every provider the planner
-- may scan (the console's search box; measured in docs/benchmarks.md).
SELECT id, provider, event_id, delivery_id, event_type, status, attempts, delivery_count,
       received_at, updated_at, processed_at, available_at, lease_owner, lease_expires_at,
       enqueued_at, error_kind, last_error
  FROM webhook_events
 WHERE (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::text[]))
   AND (%(provider)s::text IS NULL OR provider = %(provider)s::text)
   AND (%(event_type)s::text IS NULL OR event_type = %(event_type)s::text)
   AND (%(since)s::timestamptz IS NULL OR received_at >= %(since)s::timestamptz)
   AND (%(until)s::timestamptz IS NULL OR received_at < %(until)s::timestamptz)
   AND (%(some_id)s::text IS NULL
        OR event_id = %(some_id)s::text OR delivery_id = %(some_id)s::text)
   AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: find_events
-- attempt_history: the attempts that ended without processing the event, oldest first
-- (webhook_event_attempts); the one that processed it ends at processed_at.
SELECT id, provider, event_id, delivery_id, event_type, status, attempts, delivery_count,
       received_at, updated_at, processed_at, available_at, lease_owner, lease_expires_at,
       enqueued_at, error_kind, last_error,
       ARRAY(SELECT jsonb_build_object('attempt', a.attempt, 'started_at', a.started_at,
                                       'ended_at', a.ended_at, 'outcome', a.outcome,
                                       'error_kind', a.error_kind,
                                       'seconds', round(extract(epoch FROM a.ended_at - a.started_at), 3))
               FROM webhook_event_attempts a
              WHERE a.event_row_id = webhook_events.id
              ORDER BY a.started_at, a.attempt) AS attempt_history
  FROM webhook_events
 WHERE id IN (SELECT event_row_id FROM webhook_event_keys  -- the inbox's (provider, event_id) index
               WHERE provider = %(provider)s AND event_id = ANY(%(event_ids)s::text[])
              UNION  -- stored before the switch, key not filled yet: the old table's unique index
              SELECT id FROM webhook_events
               WHERE provider = %(provider)s AND event_id = ANY(%(event_ids)s::text[])
                 AND id < 4294967296)

-- name: event_ids_by_delivery_id
-- The events a provider's own delivery id names, where that id is not the event's key (GitHub's
-- X-GitHub-Delivery, Shopify's X-Shopify-Webhook-Id): read through webhook_events_delivery_id_idx
-- (0005). Usually one; a captured delivery replayed under another type header makes a second.
SELECT event_id
  FROM webhook_events
 WHERE provider = %(provider)s AND delivery_id = %(delivery_id)s
 ORDER BY id
 LIMIT %(limit)s

-- name: event_payload
SELECT payload FROM webhook_events WHERE id = %(id)s

-- name: event_actions
SELECT id, action, operator, reason, previous_status, previous_attempts, previous_error_kind,
       previous_last_error, created_at
  FROM operator_actions
 WHERE event_row_id = %(id)s
 ORDER BY id

-- name: lock_event_for_replay
-- SKIP LOCKED: a row locked by a worker's open transaction is being processed right now; the
-- replay reports it as busy instead of waiting on it.
SELECT id, provider, event_id, status, attempts, error_kind, last_error, lease_owner,
       coalesce(lease_expires_at > now(), false) AS lease_live,
       payload IS NULL AS payload_purged
  FROM webhook_events
 WHERE id = %(id)s
   FOR UPDATE SKIP LOCKED

-- name: peek_event_for_replay
-- The same facts without a lock, for --dry-run.
SELECT id, provider, event_id, status, attempts, error_kind, last_error, lease_owner,
       coalesce(lease_expires_at > now(), false) AS lease_live,
       payload IS NULL AS payload_purged
  FROM webhook_events
 WHERE id = %(id)s

-- name: reset_event_for_replay
-- Back to the start of the lifecycle with a full retry budget; the audit row keeps the attempts
-- and error this erases. enqueued_at is cleared so the sweeper sends it if our send fails.
UPDATE webhook_events
   SET status = 'received', attempts = 0, available_at = now(), updated_at = now(),
       lease_owner = NULL, lease_expires_at = NULL, enqueued_at = NULL, processed_at = NULL,
       error_kind = NULL, last_error = NULL, disposition = NULL
 WHERE id = %(id)s

-- name: record_action
INSERT INTO operator_actions
    (action, operator, reason, event_row_id, outbox_id, previous_status, previous_attempts,
     previous_error_kind, previous_last_error)
VALUES (%(action)s, %(operator)s, %(reason)s, %(event_row_id)s, %(outbox_id)s,
        %(previous_status)s, %(previous_attempts)s, left(%(previous_error_kind)s, 64),
        left(%(previous_last_error)s, 1000))
RETURNING id

-- name: list_outbox
SELECT id, topic, deduplication_key, source_event_id, status, attempts, available_at,
       lease_expires_at, created_at, updated_at, published_at, last_error
  FROM outbox_messages
 WHERE (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::text[]))
   AND (%(topic)s::text IS NULL OR topic = %(topic)s::text)
   AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
   AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s::timestamptz)
   -- The messages one event emitted: outbox_messages_source_idx.
   AND (%(source_event)s::bigint IS NULL OR source_event_id = %(source_event)s::bigint)
   AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: lock_outbox_for_retry
SELECT id, topic, deduplication_key, status, attempts, last_error
  FROM outbox_messages
 WHERE id = %(id)s
   FOR UPDATE SKIP LOCKED

-- name: peek_outbox_for_retry
SELECT id, topic, deduplication_key, status, attempts, last_error
  FROM outbox_messages
 WHERE id = %(id)s

-- name: reset_outbox_for_retry
UPDATE outbox_messages
   SET status = 'pending', attempts = 0, available_at = now(), updated_at = now(),
       lease_expires_at = NULL, last_error = NULL
 WHERE id = %(id)s AND status = 'dead'

-- name: outbox_exists
SELECT id, status FROM outbox_messages WHERE id = ANY(%(ids)s::bigint[])

-- name: inbox_extremes
-- The figures an operator reads first: how old the oldest unfinished event is, and how many
-- rows a worker holds right now.
SELECT min(received_at) FILTER (WHERE status IN ('received', 'processing', 'failed'))
           AS oldest_unfinished_received_at,
       count(*) FILTER (WHERE status = 'processing' AND lease_expires_at > now()) AS live_leases,
       count(*) FILTER (WHERE status = 'processing' AND lease_expires_at <= now())
           AS expired_leases
  FROM webhook_events
 WHERE status IN ('received', 'processing', 'failed')

-- name: provider_traffic
-- Per provider over [since, until): events first received in it (accepted), the redeliveries of
-- the events delivered in it (duplicates: delivery_count counts every delivery of the row) and
-- the latest delivery. No index leads with these times: a window reads the table (the console's
-- health page asks on demand, not on every refresh; measured in bench/results/console_load.md).
SELECT provider,
       count(*) FILTER (WHERE received_at >= %(since)s::timestamptz) AS accepted,
       coalesce(sum(delivery_count - 1), 0)::bigint AS duplicates,
       max(last_delivery_at) AS last_delivery_at
  FROM webhook_events
 WHERE last_delivery_at >= %(since)s::timestamptz
   AND (%(until)s::timestamptz IS NULL OR received_at < %(until)s::timestamptz)
 GROUP BY provider
 ORDER BY provider

-- name: arrivals
-- Events first received per provider per bucket, the buckets aligned on since (date_bin).
SELECT date_bin(make_interval(secs => %(bucket_seconds)s), received_at, %(since)s::timestamptz)
           AS bucket,
       provider,
       count(*) AS events
  FROM webhook_events
 WHERE received_at >= %(since)s::timestamptz
   AND (%(until)s::timestamptz IS NULL OR received_at < %(until)s::timestamptz)
 GROUP BY 1, 2
 ORDER BY 1, 2
