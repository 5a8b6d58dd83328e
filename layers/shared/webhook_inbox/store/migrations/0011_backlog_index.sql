-- migrate:no-transaction
-- 0011: the backlog measurement reads only the backlog.
--
-- event_backlog (every sweep) counts the rows still waiting for something: received,
-- processing, failed, dead_letter, and among them the held ones (available_at). It read
-- webhook_events_status_received_idx (status, received_at), which holds every row: the backlog's
-- entries are found by the leading status, but each partition's index grows with the day's
-- history, and so did the measurement (1.6x from 1M to 20M rows with the same backlog,
-- docs/benchmarks.md). This index holds the backlog alone, with what the statement reads, so
-- an index-only scan answers it in a handful of pages per partition at any size.
-- Applied before the sweeper switches the inbox to partitions (the switch gives the partitioned
-- table the same index, and the old table's becomes its partition), so CONCURRENTLY applies.
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_backlog_idx;
CREATE INDEX CONCURRENTLY webhook_events_backlog_idx
    ON webhook_events (status, received_at, available_at)
    WHERE status IN ('received', 'processing', 'failed', 'dead_letter');
