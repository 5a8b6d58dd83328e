-- 0013: the outbox's deduplication keys in a table of their own, the id function, and what the
-- sweeper needs to switch outbox_messages to a table partitioned by day, as 0010 did for the
-- inbox (docs/design.md, "Partitions and retention"). New tables and functions and one index
-- read of outbox_messages (ACCESS SHARE): no writer waits for it
-- (tests/integration/store/test_migration_locks.py), milliseconds at any size.
--
-- outbox_messages is going to be partitioned by range of id, one partition per UTC day, ids
-- carrying their day (webhook_inbox_next_message_id once switched). A unique index on a
-- partitioned table must contain the partition key, so deduplication_key can no longer be unique
-- on outbox_messages itself: outbox_message_keys becomes the authority, one narrow row per key
-- pointing at its message. The keys of the messages that exist are the sweeper's to fill in
-- batches (outbox_partitions.sql, backfill_keys); until then
-- add_message finds such a message by the old table's unique index. Every step that takes a
-- lock a writer waits for is the sweeper's, under the claim's lock wait (500 ms), retried on its
-- next run when the outbox is busy.

CREATE TABLE IF NOT EXISTS outbox_message_keys (
    deduplication_key text   PRIMARY KEY,
    message_id        bigint NOT NULL
);
-- Retention forgets the keys of a dropped partition by its range of ids.
CREATE INDEX IF NOT EXISTS outbox_message_keys_message_idx ON outbox_message_keys (message_id);

-- Once the sweeper has put it on outbox_messages (outbox_partitions.sql, prepare_switch): whatever
-- inserts or deletes a message (add_message, the release before this one, an operator's psql, a
-- test) keeps the keys exact. add_message inserts the key itself first (its ON CONFLICT is the
-- deduplication), so for its messages one probe finds the key already pointing at the message
-- and nothing more is done: the processor pays one index probe a message for the trigger.
CREATE OR REPLACE FUNCTION webhook_inbox_keep_message_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM outbox_message_keys
         WHERE deduplication_key = OLD.deduplication_key AND message_id = OLD.id;
        RETURN NULL;
    END IF;
    PERFORM FROM outbox_message_keys
     WHERE deduplication_key = NEW.deduplication_key AND message_id = NEW.id;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO outbox_message_keys (deduplication_key, message_id)
    VALUES (NEW.deduplication_key, NEW.id)
    ON CONFLICT (deduplication_key) DO NOTHING;
    IF NOT FOUND THEN  -- the key is another message's
        RAISE EXCEPTION 'duplicate key value violates unique constraint "outbox_messages_dedup"'
              USING ERRCODE = 'unique_violation', CONSTRAINT = 'outbox_messages_dedup';
    END IF;
    RETURN NULL;
END
$$;

-- The next id of a message: until the switch, the table's own sequence (small ids, which the
-- old table keeps as its partition's range); the switch replaces it with ids that carry their
-- day. add_message inserts the key first, so it asks for the id itself.
CREATE SEQUENCE IF NOT EXISTS outbox_message_ids AS bigint;
CREATE OR REPLACE FUNCTION webhook_inbox_next_message_id() RETURNS bigint LANGUAGE sql VOLATILE
    AS $$ SELECT nextval(pg_get_serial_sequence('outbox_messages', 'id')) $$;

-- The messages whose keys are still to fill: ids from from_id up to until_id (set by the
-- sweeper when it puts the trigger on). One row at most; gone when the backfill is done.
CREATE TABLE IF NOT EXISTS outbox_message_keys_backfill (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    from_id  bigint  NOT NULL,
    until_id bigint
);
INSERT INTO outbox_message_keys_backfill (from_id)
SELECT coalesce(min(id), 0) FROM outbox_messages
ON CONFLICT (one) DO NOTHING;
