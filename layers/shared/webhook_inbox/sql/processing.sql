-- Statements of the processor (webhook_inbox.processing) beyond the inbox data layer.

-- name: statuses_of
-- Why ids were not leased (terminal, leased elsewhere, not yet due) — or that they do not exist.
SELECT id, status
  FROM webhook_events
 WHERE id = ANY(%(ids)s)
