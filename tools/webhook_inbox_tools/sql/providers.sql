-- Statements behind `webhook-inbox providers list`. Named blocks, loaded by webhook_inbox.store.queries.

-- name: provider_traffic
-- Per provider over the window: events first received (accepted), repeat deliveries of events
-- delivered again in it (duplicates) and the latest delivery. Rejected deliveries never reach
-- the database; their count comes from the stack's metrics.
SELECT provider,
       count(*) FILTER (WHERE received_at >= %(since)s) AS accepted,
       coalesce(sum(delivery_count - 1), 0) AS duplicates,
       max(last_delivery_at) AS last_delivery_at
  FROM webhook_events
 WHERE last_delivery_at >= %(since)s
   AND provider = ANY(%(providers)s::text[])
 GROUP BY provider
