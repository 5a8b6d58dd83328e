-- 0010: the inbox's deduplication keys in a table of their own, and the id function, the first
-- half of making the inbox a table partitioned by day (0011 prepares the rest; docs/design.md,
-- "Partitions and retention"). One transaction: a new table and functions, and a trigger on
-- webhook_events (its brief SHARE ROW EXCLUSIVE lock waits at most the runner's lock timeout).
--
-- The inbox is going to be partitioned by range of id, one partition per UTC day, with ids that
-- carry their day (webhook_inbox_next_event_id, below, once switched). A unique index on a
-- partitioned table must contain the partition key, so (provider, event_id) can no longer be
-- unique on webhook_events itself: webhook_event_keys becomes the deduplication authority, one
-- narrow row per key pointing at its event's row. The switch itself (rename, a partitioned
-- parent, the old table attached as its first partition) needs the code of this release: the
-- claim of the release before names (provider, event_id) in ON CONFLICT. So the sweeper of this
-- release makes it on its first run (store/partitions.py), in one short transaction whose lock
-- wait is the claim's own (500 ms); 0010 and 0011 prepare everything else, online.

CREATE TABLE IF NOT EXISTS webhook_event_keys (
    provider     text   NOT NULL,
    event_id     text   NOT NULL,
    event_row_id bigint NOT NULL,
    PRIMARY KEY (provider, event_id)
);
-- Retention forgets the keys of a dropped partition by its range of ids.
CREATE INDEX IF NOT EXISTS webhook_event_keys_row_idx ON webhook_event_keys (event_row_id);

-- Whatever inserts or deletes an inbox row (the claim, the release before this one, a test, an
-- operator's psql) keeps the keys exact: the invariant "one row per (provider, event_id)" holds
-- for every writer, not only the claim. The claim inserts the key itself first (its ON CONFLICT
-- is the deduplication), so for a claimed row this finds the key already pointing at it.
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
-- A brief SHARE ROW EXCLUSIVE lock on webhook_events (the runner's lock timeout bounds the wait).
CREATE OR REPLACE TRIGGER webhook_events_keys AFTER INSERT OR DELETE ON webhook_events
    FOR EACH ROW EXECUTE FUNCTION webhook_inbox_keep_key();

-- The next id of an inbox row: until the switch, the table's own sequence (small ids, which the
-- old table keeps as its partition's range); the switch replaces it with ids that carry their
-- day. The claim of this release inserts the key first, so it asks for the id itself.
CREATE SEQUENCE IF NOT EXISTS webhook_event_ids AS bigint;
CREATE OR REPLACE FUNCTION webhook_inbox_next_event_id() RETURNS bigint LANGUAGE sql VOLATILE
    AS $$ SELECT nextval(pg_get_serial_sequence('webhook_events', 'id')) $$;
