-- Statements for `webhook-inbox dev`'s console: what changed since the last look.

-- name: recent_events
SELECT id, provider, event_id, event_type, status, attempts, error_kind, last_error, updated_at
  FROM webhook_events
 WHERE updated_at >= %(since)s
 ORDER BY updated_at, id
 LIMIT 500

-- name: event_by_row
SELECT provider, event_id, event_type, status FROM webhook_events WHERE id = %(id)s
