-- 0014: add_message's statement as a function, so that each database session plans it once.
-- A function and nothing else: no table is touched, no lock a writer waits for
-- (tests/integration/store/test_migration_locks.py). The release before does not call it.
--
-- Why a function: the processor writes one outbox message per handled event, and PostgreSQL
-- planned the statement below on every call (45 µs, fifteen times the plain INSERT's that came
-- before the outbox's keys table: its CTEs, the old table's look-up, the id function inlined).
-- A prepared statement would keep the plan, but RDS Proxy pins the client's session for the
-- rest of its life once one is prepared. PL/pgSQL keeps the plan of each statement it runs per
-- session (after five calls, the generic plan when it costs no more than the custom ones), and
-- the proxy does not see it: the client sends a plain SELECT of the function, planned in a few
-- microseconds.
--
-- The statement (what outbox.sql's add_message ran itself before this migration; its comment
-- there explains the deduplication): a new key gets the id of its message and the message is
-- inserted with it; a key already there inserts nothing; a key new to the keys table whose
-- message was stored before the switch (stored: found by the old table's unique index, which
-- id below 2^32 prunes the search to) is a duplicate. The id of the message inserted, NULL for
-- a duplicate. A later change to it is a new migration that replaces the function
-- (tests/integration/store/test_outbox_function.py holds the function to the statement).
CREATE OR REPLACE FUNCTION webhook_inbox_add_message(
    topic text, deduplication_key text, payload jsonb, source_event_id bigint
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    added bigint;
BEGIN
    WITH given AS MATERIALIZED (
        SELECT (SELECT o.id FROM outbox_messages o
                 WHERE o.deduplication_key = webhook_inbox_add_message.deduplication_key
                   AND o.id < 4294967296) AS stored
    ), keyed AS (
        INSERT INTO outbox_message_keys AS k (deduplication_key, message_id)
        SELECT webhook_inbox_add_message.deduplication_key,
               coalesce(g.stored, webhook_inbox_next_message_id())
          FROM given g
        ON CONFLICT ON CONSTRAINT outbox_message_keys_pkey DO NOTHING
        RETURNING k.message_id
    )
    INSERT INTO outbox_messages AS m (id, topic, deduplication_key, payload, source_event_id)
    OVERRIDING SYSTEM VALUE  -- the id its key holds (until the switch the column is an identity)
    SELECT k.message_id, webhook_inbox_add_message.topic,
           webhook_inbox_add_message.deduplication_key, webhook_inbox_add_message.payload,
           webhook_inbox_add_message.source_event_id
      FROM keyed k, given g
     WHERE g.stored IS NULL
    RETURNING m.id INTO added;
    RETURN added;
END
$$;
