-- migrate:no-transaction
-- migrate:supersedes 6c83b1ba505e2195ee9c8980298cb54c991dfe5a0f666c4e801b49920d66c859
-- 0003: keep what a replay erases. A replay resets an event's attempts and error so that it gets
-- a full retry budget again (a dead-lettered row replayed with its attempts kept would be
-- dead-lettered again on its first failure); the audit row keeps the values it replaced.
--
-- Rewritten after release (same schema): the index is now built CONCURRENTLY, and every
-- statement is safe to run again. See 0002 and README.md (Schema and migrations).
ALTER TABLE operator_actions
    ADD COLUMN IF NOT EXISTS previous_attempts   integer CHECK (previous_attempts >= 0),
    ADD COLUMN IF NOT EXISTS previous_error_kind text    CHECK (length(previous_error_kind) <= 64),
    ADD COLUMN IF NOT EXISTS previous_last_error text    CHECK (length(previous_last_error) <= 1000);

-- Operators look up an outbox message's history the way they look up an event's.
DROP INDEX CONCURRENTLY IF EXISTS operator_actions_outbox_idx;
CREATE INDEX CONCURRENTLY operator_actions_outbox_idx ON operator_actions (outbox_id);
