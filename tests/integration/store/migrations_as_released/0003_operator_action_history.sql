-- 0003: keep what a replay erases. A replay resets an event's attempts and error so that it gets
-- a full retry budget again (a dead-lettered row replayed with its attempts kept would be
-- dead-lettered again on its first failure); the audit row keeps the values it replaced.
ALTER TABLE operator_actions
    ADD COLUMN previous_attempts   integer CHECK (previous_attempts >= 0),
    ADD COLUMN previous_error_kind text    CHECK (length(previous_error_kind) <= 64),
    ADD COLUMN previous_last_error text    CHECK (length(previous_last_error) <= 1000);

-- Operators look up an outbox message's history the way they look up an event's.
CREATE INDEX operator_actions_outbox_idx ON operator_actions (outbox_id);
