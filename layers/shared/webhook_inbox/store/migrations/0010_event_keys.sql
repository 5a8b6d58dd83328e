-- 0010: the inbox's deduplication keys in a table of their own, the id function, and what the
-- sweeper needs to switch the inbox to a table partitioned by day (docs/design.md, "Partitions
-- and retention"). One transaction of new tables and functions and one index read of
-- webhook_events (ACCESS SHARE): no writer waits for it
-- (tests/integration/store/test_migration_locks.py), and it takes milliseconds at any size.
--
-- The inbox is going to be partitioned by range of id, one partition per UTC day, with ids that
-- carry their day (webhook_inbox_next_event_id, below, once switched). A unique index on a
-- partitioned table must contain the partition key, so (provider, event_id) can no longer be
-- unique on webhook_events itself: webhook_event_keys becomes the deduplication authority, one
-- narrow row per key pointing at its event's row. The keys of the rows that exist are the
-- sweeper's to fill, in batches across its runs (partitions.sql, backfill_keys): one statement
-- here would outlast the migrations function at tens of millions of rows. Until then the claim
-- finds such a row by the old table's unique index. Every step that needs a lock a writer would
-- wait for (the trigger below, the range check, the switch itself) is the sweeper's too, each in
-- a short transaction that waits at most the claim's own lock wait (500 ms) and is tried again
-- on the next run if the inbox was busy: a migration never queues the writers behind a lock
-- request.

CREATE TABLE IF NOT EXISTS webhook_event_keys (
    provider     text   NOT NULL,
    event_id     text   NOT NULL,
    event_row_id bigint NOT NULL,
    PRIMARY KEY (provider, event_id)
);
-- Retention forgets the keys of a dropped partition by its range of ids.
CREATE INDEX IF NOT EXISTS webhook_event_keys_row_idx ON webhook_event_keys (event_row_id);

-- Once the sweeper has put it on webhook_events (partitions.sql, prepare_switch): whatever
-- inserts or deletes an inbox row (the claim, the release before this one, a test, an
-- operator's psql) keeps the keys exact, so the invariant "one row per (provider, event_id)"
-- holds for every writer, not only the claim. The claim inserts the key itself first (its ON
-- CONFLICT is the deduplication), so for a claimed row this finds the key already pointing at it.
CREATE OR REPLACE FUNCTION webhook_inbox_keep_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM webhook_event_keys
         WHERE provider = OLD.provider AND event_id = OLD.event_id AND event_row_id = OLD.id;
        RETURN NULL;
    END IF;
    INSERT INTO webhook_event_keys (provider, event_id, event_row_id)
    VALUES (NEW.provider, NEW.event_id, NEW.id)
    ON CONFLICT (provider, event_id) DO NOTHING;
    IF NOT FOUND AND NOT EXISTS (
        SELECT FROM webhook_event_keys
         WHERE provider = NEW.provider AND event_id = NEW.event_id AND event_row_id = NEW.id)
    THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "webhook_events_dedup"'
              USING ERRCODE = 'unique_violation', CONSTRAINT = 'webhook_events_dedup';
    END IF;
    RETURN NULL;
END
$$;

-- The next id of an inbox row: until the switch, the table's own sequence (small ids, which the
-- old table keeps as its partition's range); the switch replaces it with ids that carry their
-- day. The claim of this release inserts the key first, so it asks for the id itself.
CREATE SEQUENCE IF NOT EXISTS webhook_event_ids AS bigint;
CREATE OR REPLACE FUNCTION webhook_inbox_next_event_id() RETURNS bigint LANGUAGE sql VOLATILE
    AS $$ SELECT nextval(pg_get_serial_sequence('webhook_events', 'id')) $$;

-- The rows whose keys are still to fill: ids from from_id (the first row's) up to until_id (set
-- by the sweeper when it puts the trigger on, which keeps every later row's key). The sweeper
-- fills them in batches, moving from_id on, and deletes the row when done. One row at most.
CREATE TABLE IF NOT EXISTS webhook_event_keys_backfill (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    from_id  bigint  NOT NULL,
    until_id bigint
);
INSERT INTO webhook_event_keys_backfill (from_id)
SELECT coalesce(min(id), 0) FROM webhook_events
ON CONFLICT (one) DO NOTHING;
