-- migrate:no-transaction
-- 0012: the outbox's backlog measurement reads only the backlog, as 0011 made the inbox's.
--
-- message_backlog (every sweep) counts pending and dead messages. It read
-- outbox_messages_status_idx (status, created_at), which holds every message: the backlog's
-- entries are found by the leading status, but the index's depth grows with the history the
-- table keeps, and so did the measurement (1.25x from 1M to 20M rows with the same backlog,
-- docs/benchmarks.md). This index holds the backlog alone, so an index-only scan answers in a
-- handful of pages per partition at any size.
-- Applied before 0013, which the sweeper's switch of the outbox to partitions waits for (the
-- switch gives the partitioned table the same index, and the old table's becomes its
-- partition), so the table is still a plain one and CONCURRENTLY applies.
DROP INDEX CONCURRENTLY IF EXISTS outbox_messages_backlog_idx;
CREATE INDEX CONCURRENTLY outbox_messages_backlog_idx
    ON outbox_messages (status, created_at)
    WHERE status IN ('pending', 'dead');
