-- Statements of the processor (webhook_inbox.processing) beyond the inbox data layer.

-- name: statuses_of
-- Why ids were not leased (terminal, leased elsewhere, not yet due) — or that they do not exist.
SELECT id, status
  FROM webhook_events
 WHERE id = ANY(%(ids)s)

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
