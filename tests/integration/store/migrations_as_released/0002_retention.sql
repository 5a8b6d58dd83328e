-- 0002: what the sweeper's retention needs.

-- The payload purge looks for terminal rows that still carry a payload. webhook_events_terminal_idx
-- (0001) orders every terminal row by age, so once purged rows pile up (they stay until
-- KEY_RETENTION_DAYS) each purge batch would step over all of them to find the few that still
-- hold a payload. This index holds only rows that still need purging, so a purge batch reads
-- exactly the rows it changes and an idle run reads none.
CREATE INDEX webhook_events_purgeable_idx ON webhook_events (updated_at)
    WHERE status IN ('processed', 'ignored') AND payload IS NOT NULL;

-- 0001 requires every audit row to reference an event or an outbox message, yet both references
-- are ON DELETE SET NULL: deleting an event an operator once replayed violated the check, which
-- failed the whole retention batch on every run. The audit row outlives its target (who did what,
-- when and why stays on record); the check goes.
ALTER TABLE operator_actions DROP CONSTRAINT operator_actions_check;
