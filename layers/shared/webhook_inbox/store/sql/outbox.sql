-- The runtime's statements on outbox_messages, run by webhook_inbox/store/outbox.py alone. The
-- operator's outbox listing and retry (tools/webhook_inbox_tools/sql/operator_actions.sql) are
-- the only other SQL on the table.
-- Named blocks, loaded by webhook_inbox.store.queries. Transitions: docs/state-machine.md.

-- name: add_message
-- Called inside the domain handler's transaction. A redelivered or replayed event produces the
-- same deduplication key, so its message is written once. The deduplication is the insert into
-- outbox_message_keys (the outbox is partitioned by day, and a unique index on it could only
-- hold per partition: docs/design.md, "Partitions and retention"): a new key gets the id of its
-- message (webhook_inbox_next_message_id: ids carry their day, the partition key) and the
-- message is inserted with it; a key already there inserts nothing (a concurrent insert of the
-- same key waits for the first one's transaction, as the unique index did). A key new to the
-- keys table whose message was stored before the switch (found by the old table's unique
-- index) is a duplicate: the key is filled with that message's id, nothing inserted.
-- The statement is the function webhook_inbox_add_message (migration 0014): PL/pgSQL keeps its
-- plan per session, where sent as it is the server planned it on every message (the processor
-- writes one per event), and a prepared statement would pin the session behind RDS Proxy.
-- One row: the new message's id, NULL when the key was already there. One statement, so that
-- the processor's pipeline sends it with the next one (queue_message).
SELECT webhook_inbox_add_message(%(topic)s, %(deduplication_key)s, %(payload)s,
                                 %(source_event_id)s::bigint) AS id

-- name: claim_messages
-- Lease a batch of due messages. SKIP LOCKED keeps concurrent sweepers on disjoint rows while the
-- statement runs; the lease (lease_expires_at) keeps them apart after it commits, and lets another
-- sweeper take the row if this one dies before marking it. from_id (oldest_pending_message, read
-- once per run) bounds both the search and the update's target, so the planner prunes both to
-- the days from the oldest pending message's on: without it each claim planned every day's
-- partition twice, about 9 ms at a 90-day history (bench/partition_planning.py).
UPDATE outbox_messages AS m
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       attempts = m.attempts + 1,
       updated_at = now()
-- ARRAY(…) keeps the plan a primary-key lookup per claimed row whatever the table's size.
 WHERE m.id >= %(from_id)s
   AND m.id = ANY(ARRAY(
        SELECT id FROM outbox_messages
         WHERE id >= %(from_id)s AND status = 'pending' AND available_at <= now()
           AND (lease_expires_at IS NULL OR lease_expires_at <= now())
         ORDER BY available_at, id
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED))
RETURNING m.id, m.topic, m.deduplication_key, m.payload, m.attempts, m.source_event_id

-- name: oldest_pending_message
-- The id of the oldest message still owed publishing (NULL: none): claim_messages' lower bound
-- for a run. One probe of each partition's outbox_messages_backlog_idx (pending and dead alone).
SELECT min(id) FROM outbox_messages WHERE status = 'pending'

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
-- For the sweeper's alarm metric and the operator's status. Served by outbox_messages_backlog_idx
-- (0012: pending and dead messages alone, an index-only scan whatever the history kept); the age
-- is measured by the database clock that wrote created_at.
SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       min(created_at) FILTER (WHERE status = 'pending') AS oldest_pending_created_at,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'pending')),
                0)::float8 AS oldest_pending_age_seconds
  FROM outbox_messages
 WHERE status IN ('pending', 'dead')

-- name: delete_published
-- Published messages older than the key retention, row by row, with their keys and the audit
-- trail's references (as ON DELETE SET NULL did before the switch dropped the foreign key; the
-- keys' trigger deletes the key too once it is on, not before the switch's first step). Pending
-- and dead messages stay: the first are still owed, the second wait for an operator. A day's
-- partition goes whole when every message in it may (partitions.py, detach_if_expired, which
-- the sweeper runs first); here only what that leaves: the old table's rows (ids below 2^32),
-- and the published messages of a day's partition kept by a pending or dead one. A day's
-- messages are deleted here only once its whole day is past the retention (the day's start
-- before today's start less the retention), so this never eats into a day whose partition is
-- about to go whole. Served by outbox_messages_status_idx. One row: how many went.
WITH gone AS (
    DELETE FROM outbox_messages
     WHERE id = ANY(ARRAY(
            SELECT id FROM outbox_messages
             WHERE status = 'published'
               AND created_at < now() - make_interval(days => %(days)s)
               AND (id < 4294967296
                    OR created_at < date_trunc('day', now(), 'UTC')
                                    - make_interval(days => %(days)s))
             ORDER BY created_at
             LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED))
    RETURNING id, deduplication_key
), keys_gone AS (
    DELETE FROM outbox_message_keys k USING gone
     WHERE k.deduplication_key = gone.deduplication_key AND k.message_id = gone.id
), audit_kept AS (
    UPDATE operator_actions SET outbox_id = NULL WHERE outbox_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT count(*) FROM gone

-- name: release_claims
-- Give back messages this sweeper claimed but never tried to publish (its time ran out): the
-- claim counted an attempt that did not happen, and the next sweep should not wait for the lease.
UPDATE outbox_messages
   SET lease_expires_at = NULL, attempts = greatest(attempts - 1, 0), updated_at = now()
 WHERE id = ANY(%(ids)s) AND status = 'pending'

-- name: next_due_message
-- The earliest moment the sweeper has outbox work, as epoch seconds by the database clock (NULL:
-- none): a pending message due (its backoff over, its claim's lease run out); a published
-- message of the old table past the key retention (delete_published, outbox_messages_status_idx);
-- the oldest day's partition holding a published message, once its whole day is past the
-- retention (dropped whole, or its published messages deleted if a pending or dead one keeps
-- it): found by the primary key from 2^32 on, in id order, which is day order (the first
-- published message of the oldest partitions; before the switch the range is empty). A
-- partition left with dead messages alone is not due: they wait for an operator.
SELECT extract(epoch FROM least(
         (SELECT min(greatest(available_at, coalesce(lease_expires_at, available_at)))
            FROM outbox_messages WHERE status = 'pending'),
         (SELECT min(created_at) FROM outbox_messages
           WHERE status = 'published' AND id < 4294967296)
           + make_interval(days => %(key_days)s),
         to_timestamp(((SELECT min(id) FROM outbox_messages
                         WHERE status = 'published' AND id >= 4294967296) >> 32)
                      * 86400::float8)
           + make_interval(days => %(key_days)s + 1)
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
