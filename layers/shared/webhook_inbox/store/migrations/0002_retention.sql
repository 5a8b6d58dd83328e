-- migrate:no-transaction
-- migrate:supersedes b92b54eaba22361db7c4abdc6e222e77c32cf218ca57d07959804a224ff5adfa
-- 0002: what the sweeper's retention needs.
--
-- Rewritten after release (same schema, less locking): the first version built the index with a
-- plain CREATE INDEX, whose SHARE lock stops every write to webhook_events for the whole build.
-- A database that applied that version keeps its record (the checksum above); see
-- README.md (Schema and migrations). Each statement is safe to run again: a run that fails half-way starts over.

-- The payload purge looks for terminal rows that still carry a payload. webhook_events_terminal_idx
-- (0001) orders every terminal row by age, so once purged rows pile up (they stay until
-- KEY_RETENTION_DAYS) each purge batch would step over all of them to find the few that still
-- hold a payload. This index holds only rows that still need purging, so a purge batch reads
-- exactly the rows it changes and an idle run reads none.
-- A concurrent build that failed leaves an INVALID index behind: drop it before building again.
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_purgeable_idx;
CREATE INDEX CONCURRENTLY webhook_events_purgeable_idx ON webhook_events (updated_at)
    WHERE status IN ('processed', 'ignored') AND payload IS NOT NULL;

-- 0001 requires every audit row to reference an event or an outbox message, yet both references
-- are ON DELETE SET NULL: deleting an event an operator once replayed violated the check, which
-- failed the whole retention batch on every run. The audit row outlives its target (who did what,
-- when and why stays on record); the check goes. (A brief lock on operator_actions only.)
ALTER TABLE operator_actions DROP CONSTRAINT IF EXISTS operator_actions_check;
