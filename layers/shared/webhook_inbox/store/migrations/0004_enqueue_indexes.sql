-- migrate:no-transaction
-- 0004: the sweeper's re-enqueue reads only the rows it sends.
--
-- webhook_events_ready_idx (0001) holds every received or failed row, including each row already
-- sent to SQS and waiting there. The re-enqueue looks for rows never sent or sent long ago, so
-- with a backlog in the queue it stepped over the whole backlog every minute (0.6-0.9 s at 600k
-- rows, past the statement timeout at a few million: every sweep then aborted). One index per
-- case, each ordered the way the statement reads it: the first rows of each are the ones to send.
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_unsent_idx;
CREATE INDEX CONCURRENTLY webhook_events_unsent_idx ON webhook_events (available_at)
    WHERE status IN ('received', 'failed') AND enqueued_at IS NULL;

DROP INDEX CONCURRENTLY IF EXISTS webhook_events_sent_idx;
CREATE INDEX CONCURRENTLY webhook_events_sent_idx
    ON webhook_events ((greatest(enqueued_at, available_at)))
    WHERE status IN ('received', 'failed') AND enqueued_at IS NOT NULL;
