-- 0008: the fast pass's batched mark fails when a row is no longer leased to the worker.
--
-- The processor's fast pass sends its processed/ignored marks and COMMIT in one pipeline and
-- waits once, for both: the mark itself must stop the COMMIT when a row's lease was lost, not a
-- reader of its answer afterwards. The mark statement (mark_batch_done in sql/inbox.sql) passes
-- the ids it was given and the ids it marked to this function, which raises when any is missing:
-- the error aborts the rest of the pipeline, COMMIT included. Its SQLSTATE (WI001, a class of
-- our own) and its DETAIL (the missing ids, comma-separated) are read by the processor
-- (store_errors.translate: LeaseLost). A plain function: no table, no lock.
CREATE OR REPLACE FUNCTION webhook_inbox_require_marked(given bigint[], marked bigint[])
    RETURNS boolean LANGUAGE plpgsql
    AS $$
DECLARE
    lost bigint[] := ARRAY(SELECT unnest(given) EXCEPT SELECT unnest(marked) ORDER BY 1);
BEGIN
    IF cardinality(lost) > 0 THEN
        RAISE EXCEPTION 'webhook_inbox: % of % rows are no longer leased to this worker',
                        cardinality(lost), cardinality(given)
              USING ERRCODE = 'WI001', DETAIL = array_to_string(lost, ',');
    END IF;
    RETURN true;
END
$$;
