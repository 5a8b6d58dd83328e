-- Statements of the processor (webhook_inbox.processing) beyond the inbox data layer.

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

-- name: mark_processed_batch
-- The fast pass's processed marks, one statement for the batch; guarded like inbox's
-- mark_processed. An id missing from the answer lost its lease: the caller rolls back.
UPDATE webhook_events
   SET status = 'processed', processed_at = now(), updated_at = now(),
       lease_owner = NULL, lease_expires_at = NULL, error_kind = NULL, last_error = NULL
 WHERE id = ANY(%(ids)s) AND status = 'processing' AND lease_owner = %(owner)s
RETURNING id, processed_at - received_at AS latency

-- name: mark_ignored_batch
-- The fast pass's ignored marks (no handler for the event's type), guarded the same way.
UPDATE webhook_events
   SET status = 'ignored', processed_at = now(), updated_at = now(),
       lease_owner = NULL, lease_expires_at = NULL, disposition = left(%(disposition)s, 200)
 WHERE id = ANY(%(ids)s) AND status = 'processing' AND lease_owner = %(owner)s
RETURNING id
