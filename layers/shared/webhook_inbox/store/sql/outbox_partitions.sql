-- The outbox's own partition statements: its switch from the unpartitioned table, what keeps one
-- of its partitions, its keys and the references to its messages. The statements both tables
-- share (partitions listed, created ahead, detached, dropped, the range check validated) are in
-- partitions.sql, written over {table}. Run by webhook_inbox/store/partitions.py and
-- partition_switch.py alone (docs/design.md, "Partitions and retention"). outbox_messages is
-- partitioned by range of id, one partition per UTC day, as the inbox is; the table as it was
-- before the switch is outbox_messages_legacy, the partition of ids below 2^32. These
-- statements change the outbox's layout, never a message (outbox.sql moves those).

-- name: switch_state
-- How far the switch has come: the keys' trigger on, the existing messages' keys still to fill
-- (a backfill row left), the old table's range check validated, the table partitioned; and
-- whether migration 0013 has been in place for settle_hours (settled): the release before's
-- add_message names deduplication_key in ON CONFLICT, which no index of the partitioned table
-- can serve, so the switch itself waits for that release to be gone for good (partitions.sql's
-- switch_state says why a day).
SELECT c.relkind = 'p' AS partitioned,
       EXISTS (SELECT FROM pg_trigger t
                WHERE t.tgrelid = c.oid AND t.tgname = 'outbox_messages_keys') AS keyed,
       coalesce((SELECT k.convalidated FROM pg_constraint k
                  WHERE k.conrelid = c.oid AND k.conname = 'outbox_messages_legacy_range'),
                false) AS range_checked,
       b.from_id IS NOT NULL AS backfilling,
       coalesce((SELECT m.applied_at <= now() - make_interval(hours => %(settle_hours)s)
                   FROM schema_migrations m WHERE m.version = %(migration)s),
                true) AS settled
  FROM pg_class c
  LEFT JOIN outbox_message_keys_backfill b ON true
 WHERE c.oid = 'outbox_messages'::regclass

-- name: prepare_switch
-- The switch's first step, under the caller's lock timeout (the claim's: 500 ms), catalog
-- changes only: from now on every inserted or deleted message keeps its key (the trigger); the
-- old table's range is declared NOT VALID (validate_range proves it later without blocking
-- writers, so that attaching it scans nothing); the audit trail's foreign key to the outbox
-- goes, because it would stop retention from detaching a partition that an audit row names
-- (retention clears those references itself, as ON DELETE SET NULL did: forget_references here,
-- outbox.sql's delete_published for messages deleted one by one). The outbox's own foreign key
-- to the inbox went with the inbox's switch, which comes first (partition_switch.py). Messages
-- below until_id get their keys from backfill_keys; every message from until_id on has its key.
LOCK TABLE outbox_messages IN ACCESS EXCLUSIVE MODE;
CREATE OR REPLACE TRIGGER outbox_messages_keys AFTER INSERT OR DELETE ON outbox_messages
    FOR EACH ROW EXECUTE FUNCTION webhook_inbox_keep_message_key();
ALTER TABLE outbox_messages DROP CONSTRAINT IF EXISTS outbox_messages_legacy_range;
ALTER TABLE outbox_messages ADD CONSTRAINT outbox_messages_legacy_range
    CHECK (id < 4294967296) NOT VALID;
ALTER TABLE operator_actions DROP CONSTRAINT IF EXISTS operator_actions_outbox_id_fkey;
INSERT INTO outbox_message_keys_backfill (from_id) VALUES (0) ON CONFLICT (one) DO NOTHING;
UPDATE outbox_message_keys_backfill
   SET until_id = (SELECT coalesce(max(id), 0) + 1 FROM outbox_messages)

-- name: backfill_keys
-- The keys of up to limit messages from from_id on (the primary key, in id order), skipping
-- those that have one; the cursor moves past them, and the backfill row goes once a batch comes
-- up short. No lock a writer waits for.
WITH batch AS MATERIALIZED (
    SELECT m.deduplication_key, m.id
      FROM outbox_message_keys_backfill b
      JOIN outbox_messages m ON m.id >= b.from_id AND m.id < b.until_id
     ORDER BY m.id
     LIMIT %(limit)s
), keyed AS (
    INSERT INTO outbox_message_keys (deduplication_key, message_id)
    SELECT deduplication_key, id FROM batch
    ON CONFLICT (deduplication_key) DO NOTHING
), moved AS (
    UPDATE outbox_message_keys_backfill SET from_id = (SELECT max(id) + 1 FROM batch)
     WHERE (SELECT count(*) FROM batch) = %(limit)s
), finished AS (
    DELETE FROM outbox_message_keys_backfill WHERE (SELECT count(*) FROM batch) < %(limit)s
)
SELECT count(*) FROM batch

-- name: switch_to_partitions
-- One transaction, under the caller's lock timeout (the claim's: 500 ms), holding the table's
-- ACCESS EXCLUSIVE lock for catalog changes only: the validated range check proves the old
-- table's range, so attaching it scans nothing, and its indexes become the partitions of the
-- parent's (same definitions), so none is built. The old table keeps its unique index on
-- deduplication_key as its own (add_message finds a message whose key is not filled yet by it);
-- the parent cannot have one, outbox_message_keys is the authority. The old indexes are renamed
-- out of the way first: the parent's keep the names the plans and docs use.
LOCK TABLE outbox_messages IN ACCESS EXCLUSIVE MODE;
ALTER TABLE outbox_messages RENAME TO outbox_messages_legacy;
DO $$
DECLARE
    old record;
BEGIN
    FOR old IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                WHERE i.indrelid = 'outbox_messages_legacy'::regclass
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', old.relname, left('legacy_' || old.relname, 63));
    END LOOP;
END
$$;
-- A partition may not have an identity column; its sequence goes with it (ids come from
-- outbox_message_ids from now on).
ALTER TABLE outbox_messages_legacy ALTER COLUMN id DROP IDENTITY;
DROP TRIGGER outbox_messages_keys ON outbox_messages_legacy;
CREATE TABLE outbox_messages (LIKE outbox_messages_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (id);
ALTER TABLE outbox_messages DROP CONSTRAINT outbox_messages_legacy_range;
CREATE OR REPLACE FUNCTION webhook_inbox_next_message_id() RETURNS bigint LANGUAGE sql VOLATILE
    AS $$ SELECT (floor(extract(epoch FROM now()) / 86400)::bigint << 32)
                 | (nextval('outbox_message_ids') & 4294967295) $$;
ALTER TABLE outbox_messages ALTER COLUMN id SET DEFAULT webhook_inbox_next_message_id();
ALTER TABLE outbox_messages ADD CONSTRAINT outbox_messages_pkey PRIMARY KEY (id);
-- The indexes of 0001 and 0012, as they were defined there (the old table's attach to them).
CREATE INDEX outbox_messages_ready_idx ON outbox_messages (available_at)
    WHERE status = 'pending';
CREATE INDEX outbox_messages_source_idx ON outbox_messages (source_event_id);
CREATE INDEX outbox_messages_status_idx ON outbox_messages (status, created_at);
CREATE INDEX outbox_messages_backlog_idx ON outbox_messages (status, created_at)
    WHERE status IN ('pending', 'dead');
CREATE TRIGGER outbox_messages_keys AFTER INSERT OR DELETE ON outbox_messages
    FOR EACH ROW EXECUTE FUNCTION webhook_inbox_keep_message_key();
ALTER TABLE outbox_messages ATTACH PARTITION outbox_messages_legacy
    FOR VALUES FROM (MINVALUE) TO (4294967296)

-- name: partition_blockers
-- Why a partition past the key retention must stay: a message still owed (pending) or waiting
-- for an operator's retry (dead); or one published whose key is still within the retention by
-- its created_at, the age delete_published judges (only the old table's rows can be, or a row
-- written by hand with an old created_at). Two probes of the partition's own indexes
-- (outbox_messages_backlog_idx, outbox_messages_status_idx), never a scan.
SELECT EXISTS (SELECT FROM {partition} WHERE status IN ('pending', 'dead')) AS unfinished,
       EXISTS (SELECT FROM {partition}
                WHERE status = 'published'
                  AND created_at >= now() - make_interval(days => %(days)s)) AS recent

-- name: forget_references
-- What ON DELETE SET NULL did before prepare_switch dropped the foreign key: audit rows that
-- name a message of the detached partition keep their own row, without the reference
-- (operator_actions_outbox_idx).
UPDATE operator_actions SET outbox_id = NULL
 WHERE outbox_id >= %(low)s AND outbox_id < %(high)s

-- name: forget_keys
-- The keys of a detached partition's messages, a bounded batch at a time
-- (outbox_message_keys_message_idx): until its key is gone a message queued again with that key
-- is taken as already queued (as it was, within the key retention); after, as new.
DELETE FROM outbox_message_keys
 WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM outbox_message_keys
         WHERE message_id >= %(low)s AND message_id < %(high)s
         LIMIT %(limit)s))
