-- 0007: per-handler pacing: a rate (events per second, with a burst) and a concurrency per
-- handler key, enforced across every processor by these two tables.
--
-- handler_pacing holds one row per paced key: the key's next free rate slot (a generic cell
-- rate algorithm's theoretical arrival time). A processor locks its keys' rows (in key order)
-- before it decides, so two processors never hand out the same slot or the last free place.
-- handler_admissions holds one row per event the pacing has decided about: its rate slot
-- (slot_at, in the future while it waits for it) and, once it runs, the end of its lease
-- (running_until). The rows running right now are a key's concurrency; a finished event's row is
-- deleted after its batch commits, and a crashed one stops counting when its lease would have
-- expired. webhook_events is not altered: an ALTER TABLE would make every writer wait.
CREATE TABLE IF NOT EXISTS handler_pacing (
    provider     text        NOT NULL,
    handler_key  text        NOT NULL,
    -- Long past for a new key: its first event is on time.
    next_slot_at timestamptz NOT NULL DEFAULT '1970-01-01 00:00:00+00',
    PRIMARY KEY (provider, handler_key)
);

CREATE TABLE IF NOT EXISTS handler_admissions (
    event_row_id  bigint      PRIMARY KEY,
    provider      text        NOT NULL,
    handler_key   text        NOT NULL,
    slot_at       timestamptz NOT NULL,
    running_until timestamptz
);
CREATE INDEX IF NOT EXISTS handler_admissions_key_idx
    ON handler_admissions (provider, handler_key, running_until);
