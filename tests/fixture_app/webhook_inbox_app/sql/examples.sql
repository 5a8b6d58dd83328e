-- Statements of the example domain handlers (webhook_inbox.examples). Each write is conditional,
-- so a redelivered, replayed or out-of-order event changes nothing it should not.

-- name: upsert_subscription
-- Newer provider_version wins; an equal or older version matches no row and returns nothing.
INSERT INTO subscriptions AS s
    (provider, subscription_id, customer_id, status, provider_version, source_event_id)
VALUES (%(provider)s, %(subscription_id)s, %(customer_id)s, %(status)s, %(provider_version)s,
        %(source_event_id)s)
ON CONFLICT (provider, subscription_id) DO UPDATE
    SET customer_id = EXCLUDED.customer_id,
        status = EXCLUDED.status,
        provider_version = EXCLUDED.provider_version,
        source_event_id = EXCLUDED.source_event_id,
        updated_at = now()
  WHERE s.provider_version < EXCLUDED.provider_version
RETURNING (s.xmax = 0) AS inserted

-- name: create_customer
-- A customer that exists already (active, or a tombstone left by an earlier delete) is left alone.
INSERT INTO customers (provider, customer_id, status, created_event_id)
VALUES (%(provider)s, %(customer_id)s, 'active', %(source_event_id)s)
ON CONFLICT (provider, customer_id) DO NOTHING
RETURNING customer_id

-- name: delete_customer
-- Deletes an active customer, or leaves a tombstone when the delete arrives before the create.
-- A customer that is already deleted matches no row.
INSERT INTO customers AS c (provider, customer_id, status, deleted_event_id, deleted_at)
VALUES (%(provider)s, %(customer_id)s, 'deleted', %(source_event_id)s, now())
ON CONFLICT (provider, customer_id) DO UPDATE
    SET status = 'deleted', deleted_event_id = EXCLUDED.deleted_event_id, deleted_at = now()
  WHERE c.status = 'active'
RETURNING (c.xmax = 0) AS tombstone
