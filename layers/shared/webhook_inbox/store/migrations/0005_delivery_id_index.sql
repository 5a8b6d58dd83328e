-- migrate:no-transaction
-- 0005: find an event by the id its provider shows (`webhook-inbox events show PROVIDER ID`).
--
-- Where a provider's delivery id is not covered by its signature (GitHub's X-GitHub-Delivery,
-- Shopify's X-Shopify-Webhook-Id, ...), the row is keyed by a digest and the delivery id is kept
-- in delivery_id: the only name an operator holding the provider's dashboard has for it. Partial,
-- so providers whose event id is the key (delivery_id NULL) pay nothing on insert.
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_delivery_id_idx;
CREATE INDEX CONCURRENTLY webhook_events_delivery_id_idx
    ON webhook_events (provider, delivery_id)
    WHERE delivery_id IS NOT NULL;
