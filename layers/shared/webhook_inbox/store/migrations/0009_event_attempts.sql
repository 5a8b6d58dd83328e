-- 0009: the history of an event's attempts that ended without processing it: when each began
-- (its lease), when it ended, how (failed, dead_letter, lease_expired) and its error kind, for
-- `events show` and the console. Written by the statements that end such an attempt
-- (mark_failed, mark_dead_letter, expire_leases, and lease_events when it takes over an expired
-- lease); an attempt that processes its event adds nothing: the event row says when it ended.
-- A table of its own, not columns of webhook_events: an ALTER TABLE would make every writer
-- wait, and so would a foreign key to it (its lock blocks writers while the migration runs):
-- retention deletes an event's attempts in the statement that deletes the event
-- (delete_expired_events).
CREATE TABLE IF NOT EXISTS webhook_event_attempts (
    event_row_id bigint      NOT NULL,
    attempt      integer     NOT NULL CHECK (attempt >= 1),
    started_at   timestamptz NOT NULL,
    ended_at     timestamptz NOT NULL,
    outcome      text        NOT NULL CHECK (outcome IN ('failed', 'dead_letter', 'lease_expired')),
    error_kind   text        CHECK (length(error_kind) <= 64),
    PRIMARY KEY (event_row_id, ended_at, attempt)
);
