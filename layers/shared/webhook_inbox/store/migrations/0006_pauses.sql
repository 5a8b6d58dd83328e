-- migrate:no-transaction
-- 0006: pause and resume, and the per-handler circuit breaker.
--
-- A pause names a provider (event_type '*') or a handler key (an exact type, or a pattern
-- ending in '*'); while it is active (resumed_at IS NULL) the processor holds every event it
-- matches instead of leasing it: no attempt, no lease, nothing for the sweeper to re-send or
-- dead-letter. A held row keeps its status (received, or failed if it was tried) and is due
-- never: available_at = '9999-01-01 00:00:00+00' is the mark (finite: clients read it as a date).
-- webhook_events itself is not altered: an ALTER TABLE would make every writer wait. Resuming puts them back, due in arrival order
-- (`resume` itself, or the sweeper for a circuit that closed). Rows are kept after a resume:
-- who paused, why, who resumed and when is the pause's audit trail.
-- A circuit is a pause the processor makes itself when a handler key fails (handler_failures
-- counts the run): it holds the failed events at once, and everything once the run reaches the
-- threshold; then the sweeper lets one held event through (probe_event_id) every
-- cooldown_seconds, doubling up to a maximum. The key's first success resumes it.
-- No transaction: CREATE INDEX CONCURRENTLY. Every statement can run again after a failed run.
CREATE TABLE IF NOT EXISTS handler_pauses (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider         text        NOT NULL CHECK (provider ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    event_type       text        NOT NULL CHECK (length(event_type) BETWEEN 1 AND 255
                                                 AND strpos(left(event_type, -1), '*') = 0),
    reason           text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    paused_by        text        NOT NULL CHECK (length(paused_by) BETWEEN 1 AND 200),
    paused_at        timestamptz NOT NULL DEFAULT now(),
    circuit          boolean     NOT NULL DEFAULT false,
    -- Whether never-tried events are held too. A circuit starts at a key's first failure holding
    -- only the events that failed (new ones pass and test the handler) and holds everything
    -- once the run reaches the threshold (open); an operator's pause holds everything.
    holds_new        boolean     NOT NULL DEFAULT true,
    last_error       text        CHECK (length(last_error) <= 1000),
    cooldown_seconds integer     CHECK (cooldown_seconds > 0),
    probe_at         timestamptz,
    probe_event_id   bigint,
    probes           integer     NOT NULL DEFAULT 0 CHECK (probes >= 0),
    resumed_at       timestamptz,
    resumed_by       text        CHECK (length(resumed_by) BETWEEN 1 AND 200),
    -- Every row it held was released (by `resume`, else by the sweeper's next run).
    released_at      timestamptz,
    CHECK (circuit = (cooldown_seconds IS NOT NULL AND probe_at IS NOT NULL)),
    CHECK (circuit OR holds_new),
    CHECK ((resumed_at IS NULL) = (resumed_by IS NULL)),
    CHECK (released_at IS NULL OR resumed_at IS NOT NULL)
);
-- At most one active pause per key; the processor's lease looks them up by provider.
CREATE UNIQUE INDEX IF NOT EXISTS handler_pauses_active_idx
    ON handler_pauses (provider, event_type) WHERE resumed_at IS NULL;

-- Whether a pause's key (provider aside) takes an event type: '*' every type, 'invoice.*' every
-- type starting 'invoice.', anything else that exact type. A plain SQL expression, inlined.
CREATE OR REPLACE FUNCTION handler_pause_matches(pattern text, event_type text)
    RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT pattern IN ('*', event_type)
              OR (right(pattern, 1) = '*' AND starts_with(event_type, left(pattern, -1))) $$;

-- The current run of consecutive failures per handler key; a success deletes it.
CREATE TABLE IF NOT EXISTS handler_failures (
    provider         text        NOT NULL,
    handler_key      text        NOT NULL,
    consecutive      integer     NOT NULL CHECK (consecutive >= 1),
    first_failure_at timestamptz NOT NULL DEFAULT now(),
    last_failure_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text        CHECK (length(last_error) <= 1000),
    PRIMARY KEY (provider, handler_key)
);

-- Held rows by key and arrival: resume and the probes read them oldest first. Dropped first: a
-- failed CONCURRENTLY build leaves an invalid index behind that IF NOT EXISTS would keep.
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_held_idx;
CREATE INDEX CONCURRENTLY webhook_events_held_idx
    ON webhook_events (provider, event_type, received_at)
    WHERE available_at = '9999-01-01 00:00:00+00';
