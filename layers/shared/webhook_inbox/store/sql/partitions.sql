-- The partitions of the inbox and the outbox: the switch from an unpartitioned table, partitions
-- created ahead, and retention by partition. Run by webhook_inbox/store/partitions.py and
-- partition_switch.py alone (docs/design.md, "Partitions and retention"). Both tables are
-- partitioned by range of id, one partition per UTC day: an id is (day since 1970-01-01) << 32 |
-- a sequence's low 32 bits, so a row's id names its partition and every lookup by id reads one
-- partition. The table as it was before its switch is <table>_legacy, the partition of ids below
-- 2^32 (its sequence's ids).
-- This file holds the statements both tables share, written over {table} (and the inbox's own:
-- its switch, what keeps one of its partitions, its keys); outbox_partitions.sql holds the
-- outbox's own. Blocks with {placeholders} are DDL: store/partitions.py fills in the table, the
-- partition's name and bounds (psycopg.sql: identifiers quoted, bounds as literals). These
-- statements change a table's layout, never its rows (inbox.sql and outbox.sql move those).

-- name: is_partitioned
SELECT relkind = 'p' FROM pg_class WHERE oid = {table_name}::regclass

-- name: switch_state
-- How far the switch has come: the keys' trigger on, the existing rows' keys still to fill (a
-- backfill row left), the old table's range check validated, the table partitioned; and whether
-- the release that brought migration 0010 has been in place for settle_hours (settled), past
-- the deploy that applied it, that deploy's gradual traffic shift and a rollback of it: the
-- release before's claim cannot run against the partitioned table (its ON CONFLICT names
-- (provider, event_id), which no index of a partitioned table can serve), so the switch itself
-- waits for it to be gone for good.
SELECT c.relkind = 'p' AS partitioned,
       EXISTS (SELECT FROM pg_trigger t
                WHERE t.tgrelid = c.oid AND t.tgname = 'webhook_events_keys') AS keyed,
       coalesce((SELECT k.convalidated FROM pg_constraint k
                  WHERE k.conrelid = c.oid AND k.conname = 'webhook_events_legacy_range'),
                false) AS range_checked,
       b.from_id IS NOT NULL AS backfilling,
       coalesce((SELECT m.applied_at <= now() - make_interval(hours => %(settle_hours)s)
                   FROM schema_migrations m WHERE m.version = %(migration)s),
                true) AS settled
  FROM pg_class c
  LEFT JOIN webhook_event_keys_backfill b ON true
 WHERE c.oid = 'webhook_events'::regclass

-- name: prepare_switch
-- The switch's first step, under the caller's lock timeout (the claim's: 500 ms), catalog
-- changes only (milliseconds under the lock): from now on every inserted or deleted row keeps
-- its key (the trigger); the old table's range is declared (NOT VALID: nothing scanned under the
-- lock; validate_range proves it later without blocking writers), so that attaching it as a
-- partition scans nothing; the foreign keys to the inbox go, because they would stop retention
-- from detaching a partition that an audit row or a kept outbox message still names (retention
-- clears those references itself, as ON DELETE SET NULL did; the outbox's own goes in the same
-- transaction, by outbox.sql's drop_inbox_reference, after this: tables are locked in the order
-- the processor's transaction takes them, inbox then outbox). The rows below until_id get their
-- keys from backfill_keys; every row from until_id on has its key.
LOCK TABLE webhook_events IN ACCESS EXCLUSIVE MODE;
CREATE OR REPLACE TRIGGER webhook_events_keys AFTER INSERT OR DELETE ON webhook_events
    FOR EACH ROW EXECUTE FUNCTION webhook_inbox_keep_key();
ALTER TABLE webhook_events DROP CONSTRAINT IF EXISTS webhook_events_legacy_range;
ALTER TABLE webhook_events ADD CONSTRAINT webhook_events_legacy_range
    CHECK (id < 4294967296) NOT VALID;
ALTER TABLE operator_actions DROP CONSTRAINT IF EXISTS operator_actions_event_row_id_fkey;
INSERT INTO webhook_event_keys_backfill (from_id) VALUES (0) ON CONFLICT (one) DO NOTHING;
UPDATE webhook_event_keys_backfill
   SET until_id = (SELECT coalesce(max(id), 0) + 1 FROM webhook_events)

-- name: backfill_keys
-- The keys of up to limit rows from from_id on (the primary key, in id order), skipping those
-- that have one; the cursor moves past them, and the backfill row goes once a batch comes up
-- short (every row below until_id has its key). No lock a writer waits for.
WITH batch AS MATERIALIZED (
    SELECT e.provider, e.event_id, e.id
      FROM webhook_event_keys_backfill b
      JOIN webhook_events e ON e.id >= b.from_id AND e.id < b.until_id
     ORDER BY e.id
     LIMIT %(limit)s
), keyed AS (
    INSERT INTO webhook_event_keys (provider, event_id, event_row_id)
    SELECT provider, event_id, id FROM batch
    ON CONFLICT (provider, event_id) DO NOTHING
), moved AS (
    UPDATE webhook_event_keys_backfill SET from_id = (SELECT max(id) + 1 FROM batch)
     WHERE (SELECT count(*) FROM batch) = %(limit)s
), finished AS (
    DELETE FROM webhook_event_keys_backfill WHERE (SELECT count(*) FROM batch) < %(limit)s
)
SELECT count(*) FROM batch

-- name: scan_timeout
-- How long this transaction's statements may run: the range check's scan gets what is left of
-- the sweeper's run (partition_switch.py), and is started over next run if that was not enough.
SELECT set_config('statement_timeout', %(timeout)s, true)

-- name: validate_range
-- One scan of the old table under SHARE UPDATE EXCLUSIVE, which no reader or writer waits for.
ALTER TABLE {table} VALIDATE CONSTRAINT {legacy_range}

-- name: switch_to_partitions
-- One transaction, under the caller's lock timeout (the claim's: 500 ms), holding the table's
-- ACCESS EXCLUSIVE lock for the catalog changes only: the validated range check proves the old
-- table's range, so attaching it scans nothing, and its indexes become the partitions of the parent's indexes
-- (same definitions), so none is built. The old indexes are renamed out of the way first: index
-- names are unique per schema, and the parent's keep the names the plans and docs use.
LOCK TABLE webhook_events IN ACCESS EXCLUSIVE MODE;
ALTER TABLE webhook_events RENAME TO webhook_events_legacy;
DO $$
DECLARE
    old record;
BEGIN
    FOR old IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                WHERE i.indrelid = 'webhook_events_legacy'::regclass
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', old.relname, left('legacy_' || old.relname, 63));
    END LOOP;
END
$$;
-- A partition may not have an identity column; its sequence goes with it (ids come from
-- webhook_event_ids from now on).
ALTER TABLE webhook_events_legacy ALTER COLUMN id DROP IDENTITY;
DROP TRIGGER webhook_events_keys ON webhook_events_legacy;
CREATE TABLE webhook_events (LIKE webhook_events_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (id);
ALTER TABLE webhook_events DROP CONSTRAINT webhook_events_legacy_range;
CREATE OR REPLACE FUNCTION webhook_inbox_next_event_id() RETURNS bigint LANGUAGE sql VOLATILE
    AS $$ SELECT (floor(extract(epoch FROM now()) / 86400)::bigint << 32)
                 | (nextval('webhook_event_ids') & 4294967295) $$;
ALTER TABLE webhook_events ALTER COLUMN id SET DEFAULT webhook_inbox_next_event_id();
ALTER TABLE webhook_events ADD CONSTRAINT webhook_events_pkey PRIMARY KEY (id);
-- The indexes of 0001-0011, as they were defined there (the old table's attach to them).
CREATE INDEX webhook_events_ready_idx ON webhook_events (available_at)
    WHERE status IN ('received', 'failed');
CREATE INDEX webhook_events_lease_idx ON webhook_events (lease_expires_at)
    WHERE status = 'processing';
CREATE INDEX webhook_events_status_received_idx ON webhook_events (status, received_at);
CREATE INDEX webhook_events_terminal_idx ON webhook_events (updated_at)
    WHERE status IN ('processed', 'ignored', 'dead_letter');
CREATE INDEX webhook_events_purgeable_idx ON webhook_events (updated_at)
    WHERE status IN ('processed', 'ignored') AND payload IS NOT NULL;
CREATE INDEX webhook_events_unsent_idx ON webhook_events (available_at)
    WHERE status IN ('received', 'failed') AND enqueued_at IS NULL;
CREATE INDEX webhook_events_sent_idx ON webhook_events ((greatest(enqueued_at, available_at)))
    WHERE status IN ('received', 'failed') AND enqueued_at IS NOT NULL;
CREATE INDEX webhook_events_delivery_id_idx ON webhook_events (provider, delivery_id)
    WHERE delivery_id IS NOT NULL;
CREATE INDEX webhook_events_held_idx ON webhook_events (provider, event_type, received_at)
    WHERE available_at = '9999-01-01 00:00:00+00';
CREATE INDEX webhook_events_backlog_idx ON webhook_events (status, received_at, available_at)
    WHERE status IN ('received', 'processing', 'failed', 'dead_letter');
CREATE TRIGGER webhook_events_keys AFTER INSERT OR DELETE ON webhook_events
    FOR EACH ROW EXECUTE FUNCTION webhook_inbox_keep_key();
ALTER TABLE webhook_events ATTACH PARTITION webhook_events_legacy
    FOR VALUES FROM (MINVALUE) TO (4294967296)

-- name: partitions
-- The table's attached partitions, and its tables left detached by a retention cut short
-- ({pattern}: the names '<table>_pYYYYMMDD' and '<table>_legacy').
SELECT c.relname AS name, c.relispartition AS attached
  FROM pg_class c
 WHERE c.relkind = 'r' AND c.relname ~ {pattern}
 ORDER BY c.relname

-- name: lock_wait
-- How long this transaction's next lock may be waited for: the claim's lock wait, so a busy
-- table makes a partition step give up (and come back next run) before a writer notices.
SELECT set_config('lock_timeout', %(lock_timeout)s, true)

-- name: lock_partitions
-- Serialises the sweepers that create or retire partitions (two runs may overlap): SHARE UPDATE
-- EXCLUSIVE conflicts with itself and with no reader or writer of rows. Then whether the
-- partition is there, and attached, as this transaction sees it after the lock (partition_state).
LOCK TABLE {table} IN SHARE UPDATE EXCLUSIVE MODE

-- name: partition_state
SELECT c.relispartition FROM pg_class c WHERE c.oid = to_regclass(%(name)s)

-- name: create_partition
-- A new day's partition without making a writer wait: built apart (an empty table, its check
-- proving the range, so the attach scans nothing), then attached, which takes SHARE UPDATE
-- EXCLUSIVE on the table (CREATE TABLE ... PARTITION OF would take ACCESS EXCLUSIVE).
-- The parent's indexes and trigger are created on the empty table by the attach.
CREATE TABLE {partition} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE {partition} ADD CONSTRAINT {range_check} CHECK (id >= {low} AND id < {high});
ALTER TABLE {table} ATTACH PARTITION {partition} FOR VALUES FROM ({low}) TO ({high});
ALTER TABLE {partition} DROP CONSTRAINT {range_check}

-- name: lock_table
-- Retention's detach, under the claim's lock timeout: held for milliseconds (catalog changes and
-- two index probes), so a writer waits at most that timeout, once per partition dropped.
LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE

-- name: detach_partition
ALTER TABLE {table} DETACH PARTITION {partition}

-- name: partition_blockers
-- Why a partition past the key retention must stay: a row not yet terminal (received,
-- processing, failed: still owed processing), or a terminal row changed within the retention
-- (a replayed event that finished recently). Two probes of the partition's own indexes
-- (webhook_events_status_received_idx, webhook_events_terminal_idx), never a scan.
SELECT EXISTS (SELECT FROM {partition} WHERE status IN ('received', 'processing', 'failed'))
           AS unfinished,
       EXISTS (SELECT FROM {partition}
                WHERE status IN ('processed', 'ignored', 'dead_letter')
                  AND updated_at >= now() - make_interval(days => %(days)s)) AS recent

-- name: forget_references
-- What ON DELETE SET NULL did before the foreign keys went (prepare_switch): audit rows that name
-- an event of the partition keep their own row, without the reference (operator_actions_event_idx;
-- outbox.sql's forget_source_events does the same for outbox messages).
UPDATE operator_actions SET event_row_id = NULL
 WHERE event_row_id >= %(low)s AND event_row_id < %(high)s

-- name: forget_keys
-- The keys of a detached partition's rows, a bounded batch at a time (webhook_event_keys_row_idx):
-- until its key is gone a redelivery is answered 503 (its row is gone), after it the redelivery
-- is accepted as new, as after any key retention.
DELETE FROM webhook_event_keys
 WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM webhook_event_keys
         WHERE event_row_id >= %(low)s AND event_row_id < %(high)s
         LIMIT %(limit)s))

-- name: drop_partition
DROP TABLE {partition}
