-- Pauses and circuits (handler_pauses, handler_failures), run by store/pauses.py, and the moves
-- of held webhook_events rows they decide. The processor's lease holds the rows
-- (inbox.sql lease_events); handler_pause_matches (migration 0006) is the one matching rule
-- (the lease writes it out, held to it by a test).

-- name: pause
-- An operator's pause; a key already paused answers nothing (the caller says so).
INSERT INTO handler_pauses (provider, event_type, reason, paused_by)
VALUES (%(provider)s, %(event_type)s, %(reason)s, %(by)s)
ON CONFLICT (provider, event_type) WHERE resumed_at IS NULL DO NOTHING
RETURNING id, paused_at

-- name: resume
-- End the active pause of exactly this key (a circuit too); its held rows are released next.
UPDATE handler_pauses
   SET resumed_at = now(), resumed_by = %(by)s
 WHERE provider = %(provider)s AND event_type = %(event_type)s AND resumed_at IS NULL
RETURNING id

-- name: pending_releases
-- Pauses resumed whose held rows are not all released yet.
SELECT id FROM handler_pauses WHERE resumed_at IS NOT NULL AND released_at IS NULL ORDER BY id

-- name: mark_released
UPDATE handler_pauses SET released_at = now() WHERE id = ANY(%(pause_ids)s) AND released_at IS NULL

-- name: release_held
-- Up to limit held rows (available_at '9999-01-01 00:00:00+00', the mark lease_events sets) of the
-- given (resumed) pauses that no active pause still matches, due again at their arrival time: the sweeper's never-sent read (oldest
-- available_at first) wakes them in arrival order, at its usual rate. Oldest first; the caller
-- repeats until nothing is left.
WITH released AS (
    SELECT provider, event_type FROM handler_pauses WHERE id = ANY(%(pause_ids)s)
), batch AS (
    SELECT e.id
      FROM webhook_events e
     WHERE e.available_at = '9999-01-01 00:00:00+00' AND e.status IN ('received', 'failed')
       AND EXISTS (SELECT FROM released r
                    WHERE r.provider = e.provider
                      AND handler_pause_matches(r.event_type, e.event_type))
       AND NOT EXISTS (SELECT FROM handler_pauses p
                        WHERE p.resumed_at IS NULL AND p.provider = e.provider
                          AND handler_pause_matches(p.event_type, e.event_type))
     ORDER BY e.received_at, e.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE webhook_events AS e
   SET available_at = e.received_at, enqueued_at = NULL, updated_at = now()
  FROM batch
 WHERE e.id = batch.id
RETURNING e.id

-- name: active_pauses
-- Every active pause, oldest first, with how many events it holds now.
SELECT p.provider, p.event_type, p.reason, p.paused_by, p.paused_at, p.circuit, p.holds_new,
       p.last_error, p.probe_at, p.probes,
       (SELECT count(*) FROM webhook_events e
         WHERE e.available_at = '9999-01-01 00:00:00+00' AND e.status IN ('received', 'failed')
           AND e.provider = p.provider
           AND handler_pause_matches(p.event_type, e.event_type)) AS held
  FROM handler_pauses p
 WHERE p.resumed_at IS NULL
 ORDER BY p.paused_at, p.id

-- name: record_handler_outcomes
-- After a chunk commits: each handler key's failures extend its run (a run whose last failure
-- is older than window_seconds starts again), a success ends it, and with it the key's circuit.
-- A first failure is retried on the usual schedule; a key that fails again with no success in
-- between gets a circuit: it holds the key's failed events (their retries wait for the key to
-- work again), and every event once the run reaches threshold (open; probed after
-- cooldown_seconds). An operator's pause of the same key is left as it is. Keys in sorted
-- order, so two processors lock them in the same order. Answers the circuits that opened (the
-- run crossed the threshold just now) and closed.
WITH outcome AS (
    SELECT *
      FROM unnest(%(providers)s::text[], %(keys)s::text[], %(failures)s::int[],
                  %(errors)s::text[]) AS o(provider, handler_key, failures, last_error)
), healed AS (
    DELETE FROM handler_failures f
     USING outcome o
     WHERE o.failures = 0 AND f.provider = o.provider AND f.handler_key = o.handler_key
    RETURNING f.provider, f.handler_key
), counted AS (
    INSERT INTO handler_failures AS f (provider, handler_key, consecutive, last_error)
    SELECT provider, handler_key, failures, last_error
      FROM outcome
     WHERE failures > 0
     ORDER BY provider, handler_key
    ON CONFLICT (provider, handler_key) DO UPDATE
       SET consecutive = CASE WHEN f.last_failure_at < now() - make_interval(secs => %(window_seconds)s)
                              THEN excluded.consecutive
                              ELSE f.consecutive + excluded.consecutive END,
           first_failure_at = CASE WHEN f.last_failure_at < now() - make_interval(secs => %(window_seconds)s)
                                   THEN now() ELSE f.first_failure_at END,
           last_failure_at = now(), last_error = excluded.last_error
    RETURNING f.provider, f.handler_key, f.consecutive, f.last_error
), circuits AS (
    INSERT INTO handler_pauses AS p (provider, event_type, reason, paused_by, circuit, holds_new,
                                     last_error, cooldown_seconds, probe_at)
    SELECT provider, handler_key,
           CASE WHEN k.consecutive >= %(threshold)s THEN 'circuit open: ' ELSE 'failing: ' END
               || k.consecutive || ' consecutive failures',
           'circuit breaker', true, k.consecutive >= %(threshold)s, k.last_error,
           %(cooldown_seconds)s, now() + make_interval(secs => %(cooldown_seconds)s)
      FROM counted k
      JOIN outcome o USING (provider, handler_key)
     -- The run began before this chunk, or reached the threshold in it.
     WHERE k.consecutive > o.failures OR k.consecutive >= %(threshold)s
    ON CONFLICT (provider, event_type) WHERE resumed_at IS NULL DO UPDATE
       SET reason = excluded.reason, last_error = excluded.last_error,
           holds_new = p.holds_new OR excluded.holds_new,
           -- Opening now: the first probe one cool-down from now, not from the first failure.
           probe_at = CASE WHEN excluded.holds_new AND NOT p.holds_new THEN excluded.probe_at
                           ELSE p.probe_at END,
           -- A failed probe waits with the rest; the sweeper picks the next one.
           probe_event_id = NULL
     WHERE p.circuit
    RETURNING p.id, p.provider, p.event_type
), closed AS (
    UPDATE handler_pauses p
       SET resumed_at = now(), resumed_by = 'circuit breaker'
      FROM healed h
     WHERE p.circuit AND p.resumed_at IS NULL
       AND p.provider = h.provider AND p.event_type = h.handler_key
    RETURNING p.id, p.provider, p.event_type
)
SELECT 'opened' AS change, c.id, c.provider, c.event_type
  FROM circuits c
  JOIN counted k ON k.provider = c.provider AND k.handler_key = c.event_type
  JOIN outcome o ON o.provider = c.provider AND o.handler_key = c.event_type
 WHERE k.consecutive >= %(threshold)s AND k.consecutive - o.failures < %(threshold)s
UNION ALL
SELECT 'closed', id, provider, event_type FROM closed

-- name: send_probes
-- Open circuits due a probe: each lets its held event with the fewest attempts (then the oldest)
-- through, due now, for the sweeper's next step to enqueue; the lease leases that one row in
-- spite of the pause. The next probe waits twice as long, up to max_cooldown_seconds. A circuit
-- holding nothing stays due: the first event it holds is the next probe.
WITH due AS (
    SELECT id, provider, event_type
      FROM handler_pauses
     WHERE circuit AND holds_new AND resumed_at IS NULL AND probe_at <= now()
     ORDER BY probe_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), pick AS (
    SELECT d.id AS pause_id,
           (SELECT e.id FROM webhook_events e
             WHERE e.available_at = '9999-01-01 00:00:00+00' AND e.status IN ('received', 'failed')
               AND e.provider = d.provider
               AND handler_pause_matches(d.event_type, e.event_type)
             ORDER BY e.attempts, e.received_at, e.id
             LIMIT 1) AS event_id
      FROM due d
), probed AS (
    UPDATE webhook_events AS e
       SET available_at = now(), enqueued_at = NULL, updated_at = now()
      FROM pick
     WHERE e.id = pick.event_id AND e.available_at = '9999-01-01 00:00:00+00'
    RETURNING e.id
)
UPDATE handler_pauses AS p
   SET probe_event_id = pick.event_id, probes = p.probes + 1,
       probe_at = now() + make_interval(secs => p.cooldown_seconds),
       cooldown_seconds = least(p.cooldown_seconds * 2, %(max_cooldown_seconds)s)
  FROM pick
 WHERE p.id = pick.pause_id AND pick.event_id IN (SELECT id FROM probed)
RETURNING p.id

-- name: expire_quiet_circuits
-- A circuit not yet open whose key has not failed for window_seconds (no new event came to
-- test it): resumed, so the sweeper releases what it held and those events are tried again.
UPDATE handler_pauses AS p
   SET resumed_at = now(), resumed_by = 'circuit breaker'
 WHERE p.circuit AND NOT p.holds_new AND p.resumed_at IS NULL
   AND NOT EXISTS (SELECT FROM handler_failures f
                    WHERE f.provider = p.provider AND f.handler_key = p.event_type
                      AND f.last_failure_at >= now() - make_interval(secs => %(window_seconds)s))
RETURNING p.id

-- name: pause_backlog
-- What the alarms watch: active pauses, open circuits, and the oldest active pause's age.
SELECT count(*) AS paused,
       count(*) FILTER (WHERE circuit AND holds_new) AS open_circuits,
       coalesce(extract(epoch FROM now() - min(paused_at)), 0)::float8 AS oldest_age_seconds
  FROM handler_pauses
 WHERE resumed_at IS NULL

-- name: next_due_pause
-- The earliest moment the sweeper has pause work, as epoch seconds by the database clock (NULL:
-- none): an open circuit's probe (send_probes); a circuit not yet open whose key stays quiet for
-- window_seconds (expire_quiet_circuits); a resumed pause with rows still to release (now).
SELECT extract(epoch FROM least(
         (SELECT min(probe_at) FROM handler_pauses
           WHERE circuit AND holds_new AND resumed_at IS NULL),
         (SELECT min(coalesce((SELECT max(f.last_failure_at) FROM handler_failures f
                                WHERE f.provider = p.provider AND f.handler_key = p.event_type),
                              now()))
            FROM handler_pauses p
           WHERE p.circuit AND NOT p.holds_new AND p.resumed_at IS NULL)
           + make_interval(secs => %(window_seconds)s),
         (SELECT now() FROM handler_pauses
           WHERE resumed_at IS NOT NULL AND released_at IS NULL LIMIT 1)
       ))::float8 AS next_due
