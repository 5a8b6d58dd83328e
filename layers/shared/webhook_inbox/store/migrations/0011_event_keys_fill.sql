-- migrate:no-transaction
-- 0011: the keys of the inbox's existing rows (0010 has the table), read while the release
-- before keeps writing. Each statement is safe to run again.
--
-- One long read of webhook_events (ACCESS SHARE: no writer waits) and inserts into the keys
-- table only. Rows it cannot see (committed after its snapshot, or inserted later by the release
-- before, whose claim knows nothing of keys) are caught up by the sweeper from from_id on, once
-- its trigger keeps every new row's key (store/partitions.py). from_id is taken before the read
-- and a million ids earlier: an id handed out before the read began but committed after it is
-- one of the last few thousand (a claim holds its ids for milliseconds), never a million back.
INSERT INTO webhook_event_keys_backfill (from_id)
SELECT coalesce(max(id), 0) - 1000000 FROM webhook_events
ON CONFLICT (one) DO NOTHING;

INSERT INTO webhook_event_keys (provider, event_id, event_row_id)
SELECT provider, event_id, id FROM webhook_events
ON CONFLICT (provider, event_id) DO NOTHING;
