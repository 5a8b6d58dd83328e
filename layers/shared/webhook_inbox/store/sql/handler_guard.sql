-- The processor's guard around each handler (webhook_inbox/processing/handler_guard.py, nothing else):
-- transaction-local settings (in the careful pass, inside a savepoint of ours around each
-- handler) that tell afterwards whether a handler ended or rewound the batch's transaction, and
-- the fast pass's BEGIN and COMMIT around them. No statement here touches a table or takes a row
-- lock. Why each fact is needed: docs/design.md,
-- "A handler cannot end the batch".

-- name: begin_batch
-- The fast pass's transaction, the first statement in its pipeline: nobody waits for the
-- answer (it travels with the first handler's read), so opening the batch costs no wait.
BEGIN

-- name: commit_batch
-- The fast pass's last statement, right behind the batch's marks (inbox.sql, mark_batch_done):
-- the pipeline's one closing sync carries the marks and the COMMIT together. After any error
-- before it (a handler's statement, the guard's check, a lost lease in the marks) the pipeline
-- is aborted and it never runs; the pass then rolls the transaction back.
COMMIT

-- name: open_batch_guard
-- The fast pass, right after its BEGIN (pipeline mode: read only when the pass gives up, for a
-- prepared batch to roll back): the batch transaction's id, assigned now (the batch writes its
-- marks anyway), kept in a transaction-local setting. The setting goes with the transaction
-- when a handler ends it (COMMIT, ROLLBACK, END, ABORT, AND CHAIN, PREPARE): check_batch_guard
-- then finds it missing, or another transaction's id beside it.
SELECT set_config('webhook_inbox.processing.batch', pg_current_xact_id()::text, true)

-- name: mark_handler
-- The fast pass, right after a handler that may have left a savepoint open (one that sent a
-- SAVEPOINT, or left a conn.transaction() block open; store/db.py notes them): append the
-- handler's token to a transaction-local list. A later handler that rolls back to that
-- savepoint takes the token with it. Handlers that cannot have left one open need no mark: the
-- batch's setting (open_batch_guard) covers the end of the transaction. Nobody waits for the
-- answer.
SELECT set_config('webhook_inbox.processing.handlers',
                  coalesce(current_setting('webhook_inbox.processing.handlers', true), '') || %(token)s || ',',
                  true)

-- name: check_batch_guard
-- The fast pass, after the last handler and before the batch's marks: fails unless this is
-- still the transaction open_batch_guard recorded and the list is exactly the tokens the pass
-- appended. Nobody waits for the answer, so the check must fail the statement; a plain SELECT
-- raises on demand only with a bad cast (22P02), whose text is computed (a constant would be
-- cast, and fail, at plan time). The WHERE has no column, so it is checked once, before
-- anything is returned. The error aborts the rest of the pipeline, the marks included, and
-- rolls back the implicit transaction a handler's COMMIT or ROLLBACK left the session in.
SELECT 1
 WHERE (CASE WHEN coalesce(current_setting('webhook_inbox.processing.batch', true), '')
                  = coalesce(pg_current_xact_id_if_assigned()::text, 'none')
              AND coalesce(current_setting('webhook_inbox.processing.handlers', true), '') = %(expected)s
             THEN '1'
             ELSE 'webhook_inbox: a handler ended or rewound the transaction (batch: '
                  || coalesce(current_setting('webhook_inbox.processing.batch', true), 'none')
                  || ', marks: '
                  || coalesce(current_setting('webhook_inbox.processing.handlers', true), 'none') || ')'
        END)::int = 1

-- name: batch_transaction
-- The careful pass: the batch transaction's id, assigned now (the batch writes its marks
-- anyway): a handler that ends the transaction, even AND CHAIN, leaves the session in another
-- one, and pg_xact_status() of this id then says whether its work was committed, rolled back or
-- prepared. (The fast pass has it from open_batch_guard.)
SELECT pg_current_xact_id()::text

-- name: open_handler_savepoint
-- The careful pass: everything the handler does after this can be rolled back without touching
-- its batch-mates.
-- A handler that RELEASEs it, or rolls back past it (ROLLBACK TO an older savepoint, or the end
-- of the transaction, AND CHAIN included), destroys it: release_handler_savepoint then fails.
SAVEPOINT webhook_inbox_handler

-- name: mark_handler_savepoint
-- The careful pass: set inside the savepoint, transaction-local: a ROLLBACK TO the savepoint
-- (which keeps the savepoint itself) or the end of the transaction takes the setting back.
SELECT set_config('webhook_inbox.handler', %(token)s, true)

-- name: handler_guard_facts
-- The careful pass, right after the handler: is the mark still there, is this still the batch's
-- transaction, and what became of the batch's transaction.
SELECT current_setting('webhook_inbox.handler', true) IS NOT DISTINCT FROM %(token)s
           AS savepoint_intact,
       pg_current_xact_id_if_assigned() IS NOT DISTINCT FROM %(xid)s::xid8 AS same_transaction,
       pg_xact_status(%(xid)s::xid8) AS batch_status

-- name: batch_status
-- After a handler ended the transaction (the session is idle, this runs on its own): whether the
-- batch's work was committed, rolled back, or prepared ('in progress': PREPARE TRANSACTION).
SELECT pg_xact_status(%(xid)s::xid8)

-- name: prepared_batch
-- The name under which a handler prepared the batch's transaction (PREPARE TRANSACTION), if it
-- still exists: it holds the row locks of everything the batch wrote until someone rolls it back.
SELECT gid FROM pg_prepared_xacts WHERE transaction = %(xid)s::xid8::xid

-- name: release_handler_savepoint
-- Fails (3B001) when the handler destroyed the savepoint (RELEASE, or an end it then hid behind
-- an error).
RELEASE SAVEPOINT webhook_inbox_handler

-- name: rollback_to_handler_savepoint
-- Undo the handler's work only; the savepoint is released next.
ROLLBACK TO SAVEPOINT webhook_inbox_handler

-- name: rollback_prepared_batch
-- Undo a batch transaction a handler prepared (its name, from prepared_batch, as a literal:
-- the command takes no parameters). Only the role that prepared it, or a superuser, may.
ROLLBACK PREPARED {gid}
