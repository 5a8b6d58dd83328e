-- Statements the sweeper adds over webhook_events and outbox_messages: backlog measurements and
-- retention. Named blocks, loaded by webhook_inbox.queries.

-- name: event_backlog
-- Only the non-terminal statuses and dead_letter: counting processed rows would scan the bulk of
-- the table every minute. Served by webhook_events_status_received_idx (status, received_at).
-- Ages are computed by the database clock, the same clock that wrote received_at.
SELECT status,
       count(*) AS count,
       extract(epoch FROM now() - min(received_at))::float8 AS oldest_age_seconds
  FROM webhook_events
 WHERE status IN ('received', 'processing', 'failed', 'dead_letter')
 GROUP BY status

-- name: purge_payloads
-- Drop the payload of processed / ignored rows older than the payload retention. dead_letter rows
-- keep theirs: a replay needs it. updated_at is left alone so that the key-retention clock keeps
-- running from the row's last transition; payload_purged_at records the purge. Rows another
-- transaction holds (a replay, an overlapping sweeper) are skipped, never waited for.
UPDATE webhook_events AS e
   SET payload = NULL, payload_purged_at = now()
 WHERE e.id = ANY(ARRAY(
        SELECT id FROM webhook_events
         WHERE status IN ('processed', 'ignored') AND payload IS NOT NULL
           AND updated_at < now() - make_interval(days => %(days)s)
         ORDER BY updated_at
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED))

-- name: delete_expired_events
-- After the key retention a terminal row goes, deduplication key and all. outbox_messages and
-- operator_actions reference it ON DELETE SET NULL (both columns are indexed), so the delete
-- touches only the rows that actually pointed at it.
DELETE FROM webhook_events
 WHERE id = ANY(ARRAY(
        SELECT id FROM webhook_events
         WHERE status IN ('processed', 'ignored', 'dead_letter')
           AND updated_at < now() - make_interval(days => %(days)s)
         ORDER BY updated_at
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED))

-- name: delete_published_outbox
-- Published messages older than the key retention. Pending and dead messages stay: the first are
-- still owed, the second wait for an operator.
DELETE FROM outbox_messages
 WHERE id = ANY(ARRAY(
        SELECT id FROM outbox_messages
         WHERE status = 'published'
           AND created_at < now() - make_interval(days => %(days)s)
         ORDER BY created_at
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED))

-- name: release_outbox_claims
-- Give back messages this sweeper claimed but never tried to publish (its time ran out): the
-- claim counted an attempt that did not happen, and the next sweep should not wait for the lease.
UPDATE outbox_messages
   SET lease_expires_at = NULL, attempts = greatest(attempts - 1, 0), updated_at = now()
 WHERE id = ANY(%(ids)s) AND status = 'pending'
