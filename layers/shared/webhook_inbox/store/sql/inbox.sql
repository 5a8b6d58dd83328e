-- The runtime's statements on webhook_events (the inbox), run by webhook_inbox/store/inbox.py alone.
-- The operator's listings and replay (tools/webhook_inbox_tools/sql/operator_actions.sql) are
-- the only other SQL on the table.
-- Named blocks, loaded by webhook_inbox.store.queries. Transitions: docs/state-machine.md.

-- name: claim_events
-- Every event of one delivery (usually one; a batch for SendGrid or HubSpot) in one round trip,
-- new and recent duplicates alike. The deduplication is the insert into webhook_event_keys (the
-- inbox is partitioned by day, and a unique index on it could only hold per partition:
-- docs/design.md, "Partitions and retention"). DO UPDATE (not DO NOTHING) so that a duplicate's
-- key returns the stored row's id even when the first insert committed after our snapshot;
-- xmax = 0 only on a freshly inserted tuple. A new key gets the id of its row
-- (webhook_inbox_next_event_id: ids carry their day, the partition key) and the row is inserted
-- with it; a duplicate's row is counted by id. A key new to the keys table whose row was stored
-- before the switch (stored, below) is a duplicate: the key is filled with that row's id and the
-- row counted. The payloads come as one jsonb array (the client builds it as text; a jsonb[]
-- literal would have every quote in them escaped), zipped with the keys by ROWS FROM. Keys are
-- inserted in key order, so two concurrent deliveries of overlapping batches take their locks in
-- the same order and cannot deadlock; the caller passes each key once (a second copy in one
-- statement would be an error). A caller about to send the wake-ups itself records enqueued_at
-- now (no second round trip); if a send then fails it clears it (clear_enqueued), and if it
-- crashes in between, the sweeper's stale rule re-sends.
-- The count names the days it may touch (recent_from, recent_until: the caller's last few days,
-- and the old table's ids): the ids it counts come from this statement's keys, which the
-- planner cannot prune to, and without the bound it planned (and locked) every day's partition
-- on every delivery, new or not: 10 ms at a 90-day history against 0.5 on a fresh install
-- (bench/partition_planning.py). A duplicate outside those days, or whose row this statement
-- cannot see (inserted by a claim that committed after this one began: its key waited for that
-- commit), comes back uncounted (status NULL) and the caller counts it (count_duplicates).
-- Counting a duplicate takes the row's lock, which a processor's batch may hold until it commits.
-- lock_wait bounds that wait for this statement's transaction (NULL: keep the session's): the
-- executor reads the CTE, which sets it, before it inserts the first key. Past it the caller
-- reads the rows without a lock (stored_claims).
-- A duplicate of a row still waiting (received, or failed and due) whose wake-up was stamped more
-- than rewake_after_s ago, or never, is stamped again and returned with rewake: the caller sends
-- its wake-up once more. That is how a provider's retry after a 503 whose claim had committed
-- (the answer came back past ingest's deadline) wakes the row at once; the fresh stamp makes a
-- storm of retries send at most one message per row per rewake_after_s. RETURNING sees the new
-- row, and now() is this transaction's start, so enqueued_at = now() on a duplicate means this
-- statement stamped it (the claim runs alone, in autocommit).
WITH lock_wait AS MATERIALIZED (
    SELECT set_config('lock_timeout',
                      coalesce(%(lock_timeout)s::text, current_setting('lock_timeout')), true)
), given AS MATERIALIZED (
    -- stored: the row of a key stored before the switch whose key the sweeper has not filled
    -- yet (partitions.sql, backfill_keys): found by the old table's unique index, which id below
    -- 2^32 prunes the search to (no partition at all once the old table's is gone).
    SELECT c.*, (SELECT o.id FROM webhook_events o
                  WHERE o.provider = %(provider)s AND o.event_id = c.event_id
                    AND o.id < 4294967296) AS stored
      FROM lock_wait,
           ROWS FROM (unnest(%(event_ids)s::text[]), unnest(%(delivery_ids)s::text[]),
                      unnest(%(event_types)s::text[]), jsonb_array_elements(%(payloads)s::jsonb))
             AS c (event_id, delivery_id, event_type, payload)
), keyed AS (
    INSERT INTO webhook_event_keys AS k (provider, event_id, event_row_id)
    SELECT %(provider)s, g.event_id, coalesce(g.stored, webhook_inbox_next_event_id())
      FROM given g
     ORDER BY g.event_id
    ON CONFLICT (provider, event_id) DO UPDATE SET event_row_id = k.event_row_id
    RETURNING k.event_id, k.event_row_id, (k.xmax = 0) AS new_key
), duplicates AS (
    SELECT k.event_row_id AS id, k.event_id
      FROM keyed k JOIN given g USING (event_id)
     WHERE NOT k.new_key OR g.stored IS NOT NULL
), inserted AS (
    INSERT INTO webhook_events
        (id, provider, event_id, delivery_id, event_type, body_sha256, payload, enqueued_at)
    OVERRIDING SYSTEM VALUE  -- the id its key holds (until the switch the column is an identity)
    SELECT k.event_row_id, %(provider)s, g.event_id, g.delivery_id, g.event_type,
           %(body_sha256)s, g.payload, CASE WHEN %(enqueuing)s THEN now() END
      FROM keyed k JOIN given g USING (event_id)
     WHERE k.new_key AND g.stored IS NULL
     ORDER BY k.event_row_id
    RETURNING id, event_id, status, delivery_count, true AS is_new, false AS rewake
), counted AS (
    UPDATE webhook_events AS e
       SET delivery_count = e.delivery_count + 1,
           last_delivery_at = now(),
           enqueued_at = CASE
               WHEN %(enqueuing)s
                AND (e.status = 'received' OR (e.status = 'failed' AND e.available_at <= now()))
                AND (e.enqueued_at IS NULL
                     OR e.enqueued_at <= now() - make_interval(secs => %(rewake_after_s)s))
               THEN now() ELSE e.enqueued_at END
     WHERE (e.id < 4294967296 OR (e.id >= %(recent_from)s AND e.id < %(recent_until)s))
       AND e.id = ANY(ARRAY(SELECT id FROM duplicates))
    RETURNING e.id, e.event_id, e.status, e.delivery_count, false AS is_new,
              (%(enqueuing)s AND e.enqueued_at IS NOT DISTINCT FROM now()) AS rewake
)
SELECT * FROM inserted
UNION ALL
SELECT * FROM counted
UNION ALL
SELECT d.id, d.event_id, NULL, NULL, false, false
  FROM duplicates d
 WHERE d.id NOT IN (SELECT id FROM counted)

-- name: count_duplicates
-- The duplicates claim_events left uncounted (a row outside the days it names, or one it could
-- not see), by their row ids, so the planner keeps only their days' partitions: counted and
-- re-stamped as claim_events counts (see there), in a transaction of its own, so its snapshot
-- sees a row whose claim committed while claim_events waited on the key. The rows are locked
-- in id order (locked): two deliveries of overlapping batches wait for each other instead of
-- deadlocking (claim_events' key order does not hold them, its transaction is over). lock_wait
-- as in claim_events (read before any row is locked); past it the caller reads the rows
-- without a lock (stored_claims). A row missing here is gone (retention retired its partition
-- before forgetting its key).
WITH lock_wait AS MATERIALIZED (
    SELECT set_config('lock_timeout',
                      coalesce(%(lock_timeout)s::text, current_setting('lock_timeout')), true)
), locked AS MATERIALIZED (
    SELECT id FROM webhook_events, lock_wait
     WHERE id = ANY(%(ids)s)
     ORDER BY id
       FOR UPDATE OF webhook_events
)
UPDATE webhook_events AS e
   SET delivery_count = e.delivery_count + 1,
       last_delivery_at = now(),
       enqueued_at = CASE
           WHEN %(enqueuing)s
            AND (e.status = 'received' OR (e.status = 'failed' AND e.available_at <= now()))
            AND (e.enqueued_at IS NULL
                 OR e.enqueued_at <= now() - make_interval(secs => %(rewake_after_s)s))
           THEN now() ELSE e.enqueued_at END
  FROM locked l
 WHERE e.id = ANY(%(ids)s) AND e.id = l.id
RETURNING e.id, e.event_id, e.status, e.delivery_count,
          (%(enqueuing)s AND e.enqueued_at IS NOT DISTINCT FROM now()) AS rewake

-- name: stored_claims
-- Duplicates whose rows stayed locked past the claim's lock wait: the rows as committed, read
-- without waiting (deliveries not counted). Through the keys (the inbox has no index on
-- (provider, event_id) across its partitions), and for a row stored before the switch whose key
-- is not filled yet, the old table's unique index (ids below 2^32).
SELECT e.id, e.event_id, e.status, e.delivery_count, false AS is_new, false AS counted,
       false AS rewake
  FROM webhook_event_keys k
  JOIN webhook_events e ON e.id = k.event_row_id
 WHERE k.provider = %(provider)s AND k.event_id = ANY(%(event_ids)s)
UNION
SELECT id, event_id, status, delivery_count, false, false, false
  FROM webhook_events
 WHERE provider = %(provider)s AND event_id = ANY(%(event_ids)s) AND id < 4294967296

-- name: mark_enqueued
-- After a wake-up was sent for rows that were not stamped beforehand (the processor's delayed
-- retry wake-ups, an operator's replay). Only rows still waiting: a row a processor failed in
-- the meantime had its stamp cleared and must stay due for the sweeper.
UPDATE webhook_events
   SET enqueued_at = now()
 WHERE id = ANY(%(ids)s) AND status IN ('received', 'failed')

-- name: clear_enqueued
-- The wake-up for these rows was not sent after all: make them due for the next sweep.
UPDATE webhook_events
   SET enqueued_at = NULL
 WHERE id = ANY(%(ids)s) AND status IN ('received', 'failed')

-- name: lease_events
-- Lease every claimable row among the given ids in one statement. Claimable: received; failed
-- and due; processing with an expired lease. Rows locked by a concurrent lease are skipped
-- (SKIP LOCKED in the subquery, which PostgreSQL never pulls up into the join, so each row is
-- locked once, in id order).
-- error_kind is the previous attempt's: 'lease_expired' makes the processor run the row alone.
-- A row taken over from an expired lease (SQS redelivered it before a sweep expired the lease)
-- is recorded exactly as expire_leases would have recorded it (SET reads the row as it was
-- before the update): once its attempts are spent (max_attempts; NULL: no limit) it becomes
-- dead_letter, attempts unchanged, instead of being leased. A row an active pause matches
-- (handler_pauses: its provider, and its type by handler_pause_matches) is held instead, unless
-- it was never tried and the pause lets new rows through (a circuit not yet open), or it is
-- that circuit's probe: no attempt, no lease, its status kept (failed if taken over from
-- an expired lease) and due never: available_at '9999-01-01 00:00:00+00', the held rows' mark
-- (finite: clients read it as a date, where 'infinity' breaks them). Both come back marked so
-- the caller leaves them out: only the 'processing' rows are leased.
-- failing: the provider has a handler with a run of failures, so a success must end it.
-- taken_over: the row's previous attempt ended with its lease (SQS redelivered it before a sweep
-- expired it): recorded in webhook_event_attempts as expire_leases records one.
-- The pause's match is handler_pause_matches (migration 0006) written out: the planner inlines
-- that SQL function by parsing its body again on every call, 50 µs of this statement's planning
-- on every batch; tests/integration/store/test_lease_pause_match.py holds them to one answer.
-- e.id = ANY(ids) repeats the subquery's condition for the planner: the join alone names no
-- partition, so every day's partition of the inbox was planned as a target of the UPDATE (9.7 ms
-- of planning per batch at 99 partitions, the default key retention's); with it the planner
-- prunes the target to the ids' partitions, as it does the subquery's scan.
WITH leased AS (
    UPDATE webhook_events AS e
       SET status = CASE WHEN c.spent THEN 'dead_letter'
                         WHEN c.held THEN (CASE WHEN e.status = 'processing' THEN 'failed' ELSE e.status END)
                         ELSE 'processing' END,
           lease_owner = CASE WHEN c.spent OR c.held THEN NULL ELSE %(owner)s END,
           lease_expires_at = CASE WHEN c.spent OR c.held THEN NULL
                                   ELSE now() + make_interval(secs => %(lease_seconds)s) END,
           attempts = CASE WHEN c.spent OR c.held THEN e.attempts ELSE e.attempts + 1 END,
           available_at = CASE WHEN c.spent THEN now()
                               WHEN c.held THEN timestamptz '9999-01-01 00:00:00+00'
                               ELSE e.available_at END,
           enqueued_at = CASE WHEN c.spent OR c.held THEN NULL ELSE e.enqueued_at END,
           updated_at = now(),
           error_kind = CASE WHEN e.status = 'processing' THEN 'lease_expired' ELSE e.error_kind END,
           last_error = CASE WHEN e.status = 'processing'
                             THEN 'lease held by ' || left(e.lease_owner, 200) || ' expired'
                             ELSE e.last_error END
      FROM (SELECT w.id,
                   coalesce(w.status = 'processing' AND w.attempts >= %(max_attempts)s::int, false) AS spent,
                   w.status = 'processing' AS taken_over, w.attempts AS ended_attempt,
                   w.updated_at AS leased_at, w.lease_expires_at AS lease_ended_at,
                   EXISTS (SELECT FROM handler_pauses p
                            WHERE p.resumed_at IS NULL AND p.provider = w.provider
                              AND (p.event_type IN ('*', w.event_type)
                                   OR (right(p.event_type, 1) = '*'
                                       AND starts_with(w.event_type, left(p.event_type, -1))))
                              AND (p.holds_new OR w.attempts > 0)
                              AND p.probe_event_id IS DISTINCT FROM w.id) AS held,
                   EXISTS (SELECT FROM handler_failures f WHERE f.provider = w.provider) AS failing
              FROM webhook_events w
             WHERE w.id = ANY(%(ids)s)
               AND (w.status = 'received'
                    OR (w.status = 'failed' AND w.available_at <= now())
                    OR (w.status = 'processing' AND w.lease_expires_at <= now()))
             ORDER BY w.id
               FOR UPDATE SKIP LOCKED) AS c
     WHERE e.id = c.id AND e.id = ANY(%(ids)s)
    RETURNING e.status, e.id, e.provider, e.event_id, e.delivery_id, e.event_type, e.payload,
              e.attempts, e.received_at, e.lease_expires_at, e.error_kind,
              c.held AND NOT c.spent AS held, c.failing,
              c.taken_over, c.ended_attempt, c.leased_at, c.lease_ended_at
), logged AS (
    INSERT INTO webhook_event_attempts (event_row_id, attempt, started_at, ended_at, outcome,
                                        error_kind)
    SELECT id, ended_attempt, leased_at, lease_ended_at, 'lease_expired', 'lease_expired'
      FROM leased WHERE taken_over
)
SELECT status, id, provider, event_id, delivery_id, event_type, payload, attempts, received_at,
       lease_expires_at, error_kind, held, failing
  FROM leased
 ORDER BY id  -- the processor handles a batch in this order: arrival order, whatever the plan

-- name: mark_processed
-- Guarded by the lease: an id missing from the answer expired and another worker took it, so
-- the caller must roll back its domain work. One row (the careful pass; the fast pass marks
-- its batch with mark_batch_done).
UPDATE webhook_events
   SET status = 'processed', processed_at = now(), updated_at = now(),
       lease_owner = NULL, lease_expires_at = NULL, error_kind = NULL, last_error = NULL
 WHERE id = %(id)s AND status = 'processing' AND lease_owner = %(owner)s
RETURNING processed_at - received_at AS latency

-- name: mark_failed
-- Guarded by the lease. The attempt's end goes to webhook_event_attempts: it began when the
-- lease was taken (the row's updated_at as lease_events left it: nothing else updates a leased
-- row's updated_at; o reads it before this UPDATE) and ends now.
WITH ended AS (
    UPDATE webhook_events AS e
       SET status = 'failed', available_at = now() + make_interval(secs => %(delay_seconds)s),
           updated_at = now(), lease_owner = NULL, lease_expires_at = NULL, enqueued_at = NULL,
           error_kind = %(error_kind)s, last_error = left(%(error)s, 1000)
      FROM (SELECT id, updated_at AS leased_at FROM webhook_events WHERE id = %(id)s) AS o
     WHERE e.id = o.id AND e.status = 'processing' AND e.lease_owner = %(owner)s
    RETURNING e.id, e.attempts, o.leased_at, e.available_at
), logged AS (
    INSERT INTO webhook_event_attempts (event_row_id, attempt, started_at, ended_at, outcome,
                                        error_kind)
    SELECT id, attempts, leased_at, clock_timestamp(), 'failed', %(error_kind)s FROM ended
)
SELECT available_at FROM ended

-- name: mark_dead_letter
-- Guarded by the lease; the attempt's end recorded as mark_failed records it.
WITH ended AS (
    UPDATE webhook_events AS e
       SET status = 'dead_letter', updated_at = now(), lease_owner = NULL,
           lease_expires_at = NULL, error_kind = %(error_kind)s, last_error = left(%(error)s, 1000)
      FROM (SELECT id, updated_at AS leased_at FROM webhook_events WHERE id = %(id)s) AS o
     WHERE e.id = o.id AND e.status = 'processing' AND e.lease_owner = %(owner)s
    RETURNING e.id, e.attempts, o.leased_at
), logged AS (
    INSERT INTO webhook_event_attempts (event_row_id, attempt, started_at, ended_at, outcome,
                                        error_kind)
    SELECT id, attempts, leased_at, clock_timestamp(), 'dead_letter', %(error_kind)s FROM ended
)
SELECT id FROM ended

-- name: mark_ignored
-- No handler for the event's type; guarded like mark_processed, one row (the careful pass).
UPDATE webhook_events
   SET status = 'ignored', processed_at = now(), updated_at = now(),
       lease_owner = NULL, lease_expires_at = NULL, disposition = left(%(disposition)s, 200)
 WHERE id = %(id)s AND status = 'processing' AND lease_owner = %(owner)s
RETURNING id

-- name: mark_batch_done
-- The fast pass: every processed and every ignored row of the batch in one statement, sent
-- without waiting, with COMMIT right behind it in the same pipeline. Guarded by the lease as
-- mark_processed and mark_ignored are, and it fails when any row given was not marked
-- (webhook_inbox_require_marked, migration 0008: SQLSTATE WI001, the lost ids in its DETAIL):
-- the error aborts the pipeline, so the COMMIT behind it never runs. One row: the processed ids
-- and their received → processed latencies, read after the COMMIT.
-- One UPDATE for both kinds (an ignored row keeps its error fields and gets its disposition, as
-- mark_ignored does; a processed row as mark_processed) and one aggregate over its rows: the
-- server plans this statement on every batch (no prepared statements behind RDS Proxy), and two
-- UPDATEs and three sub-selects took it 2.4 times as long to plan.
WITH marked AS (
    UPDATE webhook_events
       SET status = CASE WHEN id = ANY(%(ignored)s) THEN 'ignored' ELSE 'processed' END,
           processed_at = now(), updated_at = now(), lease_owner = NULL, lease_expires_at = NULL,
           error_kind = CASE WHEN id = ANY(%(ignored)s) THEN error_kind END,
           last_error = CASE WHEN id = ANY(%(ignored)s) THEN last_error END,
           disposition = CASE WHEN id = ANY(%(ignored)s) THEN left(%(disposition)s, 200)
                              ELSE disposition END
     WHERE id = ANY(%(processed)s::bigint[] || %(ignored)s::bigint[])
       AND status = 'processing' AND lease_owner = %(owner)s
    RETURNING id, status, processed_at - received_at AS latency
)
SELECT webhook_inbox_require_marked(%(processed)s::bigint[] || %(ignored)s::bigint[],
                                    coalesce(array_agg(id), '{}')) AS all_marked,
       coalesce(array_agg(id ORDER BY id) FILTER (WHERE status = 'processed'), '{}')
           AS processed_ids,
       coalesce(array_agg(latency ORDER BY id) FILTER (WHERE status = 'processed'), '{}')
           AS latencies
  FROM marked

-- name: expire_leases
-- Expired leases become failed (due at once: the lease already was the delay) or, once the
-- attempts are spent, dead_letter. SKIP LOCKED keeps overlapping sweepers apart. Each attempt's
-- end goes to webhook_event_attempts: from its lease (updated_at) to when the lease ran out.
WITH expired AS (
    UPDATE webhook_events AS e
       SET status = CASE WHEN e.attempts >= %(max_attempts)s THEN 'dead_letter' ELSE 'failed' END,
           available_at = now(), updated_at = now(), lease_owner = NULL, lease_expires_at = NULL,
           enqueued_at = NULL, error_kind = 'lease_expired',
           last_error = 'lease held by ' || left(e.lease_owner, 200) || ' expired'
      FROM (SELECT id, updated_at AS leased_at, lease_expires_at AS lease_ended_at
              FROM webhook_events
             WHERE status = 'processing' AND lease_expires_at <= now()
             ORDER BY lease_expires_at
             LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED) AS o
     WHERE e.id = o.id
    RETURNING e.id, e.status, e.attempts, o.leased_at, o.lease_ended_at
), logged AS (
    INSERT INTO webhook_event_attempts (event_row_id, attempt, started_at, ended_at, outcome,
                                        error_kind)
    SELECT id, attempts, leased_at, lease_ended_at, 'lease_expired', 'lease_expired' FROM expired
)
SELECT id, status FROM expired

-- name: claim_due_for_enqueue
-- Rows the processing queue should see (again): received or failed, due, and either never sent
-- for this attempt (enqueued_at is cleared whenever a row becomes failed), or sent over
-- stale_seconds ago and still waiting. Claimed by stamping enqueued_at in this one statement,
-- which commits before the caller sends: an overlapping sweeper skips the rows (SKIP LOCKED, then
-- the fresh stamp), and no row lock is held while SQS delivers the message to a processor. The
-- caller clears the stamp of never-sent rows it failed to send (clear_enqueued), and backdates
-- that of stale rows (backdate_enqueued).
-- A stale row may have lost its message (a crash between stamp and send, a purge, the DLQ) or
-- may just be waiting in a long queue; nothing tells which, so every one is re-woken, at most
-- once per stale_seconds (the new stamp), and the caller packs many of them into one message.
-- Two index-ordered reads (0004), never the rows stamped recently: at most limit rows never sent
-- (webhook_events_unsent_idx), and at most stale_limit rows sent long ago
-- (webhook_events_sent_idx), oldest first. Each read touches about as many index entries as it
-- returns.
WITH unsent AS (
    SELECT id, false AS stale
      FROM webhook_events
     WHERE status IN ('received', 'failed') AND enqueued_at IS NULL
       AND available_at <= now()
     ORDER BY available_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), stale AS (
    SELECT id, true AS stale
      FROM webhook_events
     WHERE status IN ('received', 'failed') AND enqueued_at IS NOT NULL
       AND greatest(enqueued_at, available_at) <= now() - make_interval(secs => %(stale_seconds)s)
     ORDER BY greatest(enqueued_at, available_at)
     LIMIT %(stale_limit)s
       FOR UPDATE SKIP LOCKED
), due AS (
    SELECT * FROM unsent UNION ALL SELECT * FROM stale
), stamped AS (
    UPDATE webhook_events
       SET enqueued_at = now()
     WHERE id = ANY(ARRAY(SELECT id FROM due))
    RETURNING id, status
)
SELECT stamped.id, stamped.status, due.stale
  FROM stamped JOIN due USING (id)
 ORDER BY due.stale, stamped.id

-- name: backdate_enqueued
-- A re-wake of stale rows was not sent after all: their stamp goes back to stale_seconds ago, so
-- the next sweep re-wakes them again (packed), rather than sending each alone as never sent.
UPDATE webhook_events
   SET enqueued_at = now() - make_interval(secs => %(stale_seconds)s)
 WHERE id = ANY(%(ids)s) AND status IN ('received', 'failed') AND enqueued_at IS NOT NULL

-- name: status_summary
-- Counts and oldest received_at per status (served by webhook_events_status_received_idx).
SELECT status, count(*) AS count, min(received_at) AS oldest_received_at
  FROM webhook_events
 GROUP BY status

-- name: get_event
SELECT id, provider, event_id, delivery_id, event_type, status, attempts, delivery_count,
       available_at, lease_owner, lease_expires_at, enqueued_at, received_at, last_delivery_at,
       updated_at, processed_at, error_kind, last_error, disposition, payload_purged_at
  FROM webhook_events
 WHERE id = coalesce(
         (SELECT event_row_id FROM webhook_event_keys
           WHERE provider = %(provider)s AND event_id = %(event_id)s),
         -- stored before the switch, its key not filled yet (the old table's unique index)
         (SELECT id FROM webhook_events
           WHERE provider = %(provider)s AND event_id = %(event_id)s AND id < 4294967296))

-- name: statuses_of
-- Why ids were not leased (terminal, leased elsewhere, not yet due) — or that they do not exist.
-- claimable: the lease's own condition; such a row was skipped only because it was locked.
SELECT id, status,
       (status = 'received'
        OR (status = 'failed' AND available_at <= now())
        OR (status = 'processing' AND lease_expires_at <= now())) AS claimable
  FROM webhook_events
 WHERE id = ANY(%(ids)s)

-- name: release_leases
-- Leased rows this invocation had no time to start: handed back as they were before the lease
-- (attempts not spent, received again if never tried, else failed and due now), so running out
-- of time never walks an event towards dead_letter.
UPDATE webhook_events
   SET status = CASE WHEN attempts <= 1 THEN 'received' ELSE 'failed' END,
       attempts = attempts - 1, available_at = now(), updated_at = now(),
       lease_owner = NULL, lease_expires_at = NULL
 WHERE id = ANY(%(ids)s) AND status = 'processing' AND lease_owner = %(owner)s

-- name: event_backlog
-- Only the non-terminal statuses and dead_letter: counting processed rows would scan the bulk of
-- the table every minute. Served by webhook_events_backlog_idx (0011), which holds these rows
-- alone with the columns read here: an index-only scan of the backlog, whatever the history.
-- Ages are computed by the database clock, the same clock that wrote received_at.
-- Held rows (available_at '9999-01-01 00:00:00+00') are counted apart, as 'held': they wait for a
-- resume, not for the stack.
SELECT CASE WHEN available_at = '9999-01-01 00:00:00+00' THEN 'held' ELSE status END AS status,
       count(*) AS count,
       extract(epoch FROM now() - min(received_at))::float8 AS oldest_age_seconds
  FROM webhook_events
 WHERE status IN ('received', 'processing', 'failed', 'dead_letter')
 GROUP BY 1

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
-- Row by row, what retention by partition (partitions.sql, which the sweeper runs first) leaves:
-- the rows stored before the inbox was partitioned (ids below 2^32: the whole table until the
-- switch, its first partition after), and the finished rows of a day's partition kept by an
-- unfinished or recently replayed event. A day's rows go here only once its whole day is past
-- the retention (an id carries its day: ids below today's less the retention, shifted by 32),
-- so this never eats into the day whose partition goes whole tomorrow. After the key
-- retention a terminal row goes, deduplication key and all, with its attempts
-- (webhook_event_attempts has no foreign key: see migration 0009). The key is
-- deleted here as well as by the keys' trigger, which is not on the table before the sweeper's
-- first switch step. Audit rows that name it lose the reference, as ON DELETE SET NULL did
-- before the switch dropped the foreign keys (the caller does the same for outbox messages,
-- outbox.sql's forget_source_event_ids). One row: the ids of the events that went.
WITH gone AS (
    DELETE FROM webhook_events
     WHERE id = ANY(ARRAY(
            SELECT id FROM webhook_events
             WHERE status IN ('processed', 'ignored', 'dead_letter')
               AND updated_at < now() - make_interval(days => %(days)s)
               AND id < greatest(4294967296,
                                 ((now() AT TIME ZONE 'UTC')::date - %(days)s
                                  - date '1970-01-01')::bigint << 32)
             ORDER BY updated_at
             LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED))
    RETURNING id, provider, event_id
), attempts_gone AS (
    DELETE FROM webhook_event_attempts WHERE event_row_id = ANY(ARRAY(SELECT id FROM gone))
), keys_gone AS (
    DELETE FROM webhook_event_keys k USING gone
     WHERE k.provider = gone.provider AND k.event_id = gone.event_id AND k.event_row_id = gone.id
), audit_kept AS (
    UPDATE operator_actions SET event_row_id = NULL
     WHERE event_row_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT ARRAY(SELECT id FROM gone)

-- name: forget_attempts
-- The attempts of the rows of an inbox partition that retention detached (its range of ids), a
-- bounded batch at a time (the primary key leads with event_row_id). One row: how many went.
WITH gone AS (
    DELETE FROM webhook_event_attempts
     WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM webhook_event_attempts
             WHERE event_row_id >= %(low)s AND event_row_id < %(high)s
             LIMIT %(limit)s))
    RETURNING 1
)
SELECT count(*) FROM gone

-- name: next_due_event
-- The earliest moment the sweeper has inbox work, as epoch seconds by the database clock (NULL:
-- none). Written to the idle ledger by a run that found nothing to do, so later runs know,
-- without connecting, that nothing here can come due before then unless a function writes:
-- an expired lease; a row never sent, due at its available_at; a sent row still waiting, due
-- for its re-wake stale_seconds after greatest(enqueued_at, available_at) (claim_due_for_enqueue);
-- a payload to purge; a key to forget, of a row stored before the switch to partitions (ids
-- below 2^32: the old table's partition alone is read), which delete_expired_events deletes row by
-- row. A day's partition is not counted: it goes whole once its last row is past the retention
-- and nothing in it is unfinished, a moment its first row's age does not tell (counting that
-- row, a partition kept by a held event or a recent replay would be due at every run, and a
-- paused database never left paused); the run a day that connects regardless drops it, a day at
-- most after it could go. Held rows ('9999-01-01') wait for a resume or a probe, which
-- pauses.sql next_due_pause covers. Each min() reads one end of an index (0001, 0002, 0004).
SELECT extract(epoch FROM least(
         (SELECT min(lease_expires_at) FROM webhook_events WHERE status = 'processing'),
         (SELECT min(available_at) FROM webhook_events
           WHERE status IN ('received', 'failed') AND enqueued_at IS NULL
             AND available_at < '9999-01-01 00:00:00+00'),
         (SELECT min(greatest(enqueued_at, available_at)) FROM webhook_events
           WHERE status IN ('received', 'failed') AND enqueued_at IS NOT NULL
             AND available_at < '9999-01-01 00:00:00+00')
           + make_interval(secs => %(stale_seconds)s),
         (SELECT min(updated_at) FROM webhook_events
           WHERE status IN ('processed', 'ignored') AND payload IS NOT NULL)
           + make_interval(days => %(payload_days)s),
         (SELECT min(updated_at) FROM webhook_events
           WHERE status IN ('processed', 'ignored', 'dead_letter') AND id < 4294967296)
           + make_interval(days => %(key_days)s)
       ))::float8 AS next_due
