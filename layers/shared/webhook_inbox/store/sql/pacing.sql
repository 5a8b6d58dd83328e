-- Per-handler pacing (handler_pacing, handler_admissions; migration 0007), run by
-- store/pacing.py. One transaction per chunk that holds a paced event: lock the keys, read their
-- admissions (a statement of its own, so its snapshot sees every decision committed by the
-- processors that held the locks before), decide in Python, write the decisions.

-- name: lock_keys
-- Each key's row, created if missing, locked until the transaction ends, in key order (two
-- processors never wait on each other's keys crosswise); its next free rate slot, and now().
INSERT INTO handler_pacing AS p (provider, handler_key)
SELECT k.provider, k.handler_key
  FROM unnest(%(providers)s::text[], %(keys)s::text[]) AS k (provider, handler_key)
 ORDER BY 1, 2
    ON CONFLICT (provider, handler_key) DO UPDATE SET next_slot_at = p.next_slot_at
RETURNING p.provider, p.handler_key, p.next_slot_at, now() AS now

-- name: admissions_of
-- The keys' events running now (their lease not yet over), and the chunk's own rows' earlier
-- decisions (a rate slot reserved when they were deferred). Rows of a crash or of a reservation
-- abandoned a day ago are deleted by forget_stale first.
SELECT event_row_id, provider, handler_key, slot_at, running_until
  FROM handler_admissions
 WHERE (provider, handler_key) IN (SELECT * FROM unnest(%(providers)s::text[], %(keys)s::text[]))
   AND (running_until > now() OR event_row_id = ANY(%(ids)s))

-- name: forget_stale
DELETE FROM handler_admissions
 WHERE (provider, handler_key) IN (SELECT * FROM unnest(%(providers)s::text[], %(keys)s::text[]))
   AND (running_until <= now() OR (running_until IS NULL AND slot_at < now() - interval '1 day'))
   AND NOT event_row_id = ANY(%(ids)s)

-- name: save_admissions
INSERT INTO handler_admissions AS a (event_row_id, provider, handler_key, slot_at, running_until)
SELECT * FROM unnest(%(ids)s::bigint[], %(providers)s::text[], %(keys)s::text[],
                     %(slots)s::timestamptz[], %(running_until)s::timestamptz[])
    ON CONFLICT (event_row_id) DO UPDATE
   SET slot_at = excluded.slot_at, running_until = excluded.running_until

-- name: advance_keys
UPDATE handler_pacing AS p
   SET next_slot_at = k.next_slot_at
  FROM unnest(%(providers)s::text[], %(keys)s::text[], %(next_slots)s::timestamptz[])
       AS k (provider, handler_key, next_slot_at)
 WHERE p.provider = k.provider AND p.handler_key = k.handler_key

-- name: defer_rows
-- Leased rows the pacing turned away: handed back as release_leases hands them back (the attempt
-- not spent), due at their own moment, and not enqueued (the caller sends the delayed wake-up
-- and stamps it, or the sweeper sends it when due). e.id = ANY(ids) as well as the join: the
-- planner prunes the UPDATE's target partitions by the former alone (inbox.sql, lease_events).
UPDATE webhook_events AS e
   SET status = CASE WHEN e.attempts <= 1 THEN 'received' ELSE 'failed' END,
       attempts = e.attempts - 1, available_at = d.due_at, updated_at = now(),
       lease_owner = NULL, lease_expires_at = NULL, enqueued_at = NULL
  FROM unnest(%(ids)s::bigint[], %(due_at)s::timestamptz[]) AS d (id, due_at)
 WHERE e.id = d.id AND e.id = ANY(%(ids)s)
   AND e.status = 'processing' AND e.lease_owner = %(owner)s
RETURNING e.id

-- name: finish_admissions
-- The chunk's paced events are done (committed, failed or handed back): their places are free.
DELETE FROM handler_admissions WHERE event_row_id = ANY(%(ids)s)
