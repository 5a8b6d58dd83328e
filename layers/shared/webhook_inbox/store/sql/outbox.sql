-- The runtime's statements on outbox_messages, run by webhook_inbox/store/outbox.py alone. The
-- operator's outbox listing and retry (tools/webhook_inbox_tools/sql/operator_actions.sql) are
-- the only other SQL on the table.
-- Named blocks, loaded by webhook_inbox.store.queries. Transitions: docs/state-machine.md.

-- name: add_message
-- Called inside the domain handler's transaction. A redelivered or replayed event produces the
-- same deduplication key, so its message is written once.
INSERT INTO outbox_messages (topic, deduplication_key, payload, source_event_id)
VALUES (%(topic)s, %(deduplication_key)s, %(payload)s, %(source_event_id)s)
ON CONFLICT (deduplication_key) DO NOTHING
RETURNING id

-- name: claim_messages
-- Lease a batch of due messages. SKIP LOCKED keeps concurrent sweepers on disjoint rows while the
-- statement runs; the lease (lease_expires_at) keeps them apart after it commits, and lets another
-- sweeper take the row if this one dies before marking it.
UPDATE outbox_messages AS m
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       attempts = m.attempts + 1,
       updated_at = now()
-- ARRAY(…) keeps the plan a primary-key lookup per claimed row whatever the table's size.
 WHERE m.id = ANY(ARRAY(
        SELECT id FROM outbox_messages
         WHERE status = 'pending' AND available_at <= now()
           AND (lease_expires_at IS NULL OR lease_expires_at <= now())
         ORDER BY available_at, id
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED))
RETURNING m.id, m.topic, m.deduplication_key, m.payload, m.attempts, m.source_event_id

-- name: mark_published
UPDATE outbox_messages
   SET status = 'published', published_at = now(), updated_at = now(),
       lease_expires_at = NULL, last_error = NULL
 WHERE id = ANY(%(ids)s) AND status = 'pending'

-- name: mark_retry
UPDATE outbox_messages
   SET available_at = now() + make_interval(secs => %(delay_seconds)s), updated_at = now(),
       lease_expires_at = NULL, last_error = left(%(error)s, 1000)
 WHERE id = %(id)s AND status = 'pending'

-- name: mark_dead
UPDATE outbox_messages
   SET status = 'dead', updated_at = now(), lease_expires_at = NULL,
       last_error = left(%(error)s, 1000)
 WHERE id = %(id)s AND status = 'pending'

-- name: message_backlog
-- For the sweeper's alarm metric and the operator's status. Served by outbox_messages_status_idx
-- (status, created_at); the age is measured by the database clock that wrote created_at.
SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       min(created_at) FILTER (WHERE status = 'pending') AS oldest_pending_created_at,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'pending')),
                0)::float8 AS oldest_pending_age_seconds
  FROM outbox_messages
 WHERE status IN ('pending', 'dead')

-- name: delete_published
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

-- name: release_claims
-- Give back messages this sweeper claimed but never tried to publish (its time ran out): the
-- claim counted an attempt that did not happen, and the next sweep should not wait for the lease.
UPDATE outbox_messages
   SET lease_expires_at = NULL, attempts = greatest(attempts - 1, 0), updated_at = now()
 WHERE id = ANY(%(ids)s) AND status = 'pending'

-- name: next_due_message
-- The earliest moment the sweeper has outbox work, as epoch seconds by the database clock (NULL:
-- none): a pending message due (its backoff over, its claim's lease run out), or a published one
-- past the key retention (delete_published).
SELECT extract(epoch FROM least(
         (SELECT min(greatest(available_at, coalesce(lease_expires_at, available_at)))
            FROM outbox_messages WHERE status = 'pending'),
         (SELECT min(created_at) FROM outbox_messages WHERE status = 'published')
           + make_interval(days => %(key_days)s)
       ))::float8 AS next_due

-- name: drop_inbox_reference
-- Part of the inbox's switch to partitions (partitions.sql, prepare_switch, in its transaction
-- and under its lock timeout): a foreign key to the inbox would stop retention from detaching a
-- partition that a kept message names. Catalog only.
ALTER TABLE outbox_messages DROP CONSTRAINT IF EXISTS outbox_messages_source_event_id_fkey

-- name: forget_source_events
-- Messages naming an event of an inbox partition that retention detached keep their row,
-- without the reference, as ON DELETE SET NULL did (outbox_messages_source_idx).
UPDATE outbox_messages SET source_event_id = NULL
 WHERE source_event_id >= %(low)s AND source_event_id < %(high)s

-- name: forget_source_event_ids
-- The same for inbox rows deleted one by one (inbox.sql, delete_expired_events).
UPDATE outbox_messages SET source_event_id = NULL WHERE source_event_id = ANY(%(ids)s)
