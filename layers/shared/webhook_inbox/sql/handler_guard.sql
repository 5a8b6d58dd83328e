-- The processor's guard around each handler (webhook_inbox/handler_guard.py, nothing else): a
-- savepoint the handler did not create, and a mark inside it, that tell afterwards whether the
-- handler ended or rewound the batch's transaction. No statement here touches a table or takes
-- a row lock. Why each fact is needed: docs/design.md, "A handler cannot end the batch".

-- name: batch_transaction
-- The batch transaction's id, assigned now (the batch writes its marks anyway): a handler that
-- ends the transaction, even AND CHAIN, leaves the session in another one, and pg_xact_status()
-- of this id then says whether its work was committed, rolled back or prepared.
SELECT pg_current_xact_id()::text

-- name: open_handler_savepoint
-- Everything the handler does after this can be rolled back without touching its batch-mates.
-- A handler that RELEASEs it, or rolls back past it (ROLLBACK TO an older savepoint, or the end
-- of the transaction, AND CHAIN included), destroys it: release_handler_savepoint then fails.
SAVEPOINT webhook_inbox_handler

-- name: mark_handler_savepoint
-- Set inside the savepoint, transaction-local: a ROLLBACK TO the savepoint (which keeps the
-- savepoint itself) or the end of the transaction takes the setting back with it.
SELECT set_config('webhook_inbox.handler', %(token)s, true)

-- name: handler_guard_facts
-- Read right after the handler: is the mark still there, is this still the batch's transaction
-- (NULL xid: the fast pass does not ask), and what became of the batch's transaction.
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
-- Fails (3B001) when the handler destroyed the savepoint, or (25P01) when the transaction ended
-- and the session runs statements in an implicit one (the fast pass, in pipeline mode).
RELEASE SAVEPOINT webhook_inbox_handler

-- name: rollback_to_handler_savepoint
-- Undo the handler's work only; the savepoint is released next.
ROLLBACK TO SAVEPOINT webhook_inbox_handler

-- name: rollback_prepared_batch
-- Undo a batch transaction a handler prepared (its name, from prepared_batch, as a literal:
-- the command takes no parameters). Only the role that prepared it, or a superuser, may.
ROLLBACK PREPARED {gid}
