"""Operations: what an operator reads and changes, for the operator function (and the
``webhook-inbox`` CLI on a database of its own): listings and the status (:mod:`.listings`),
audited replays and outbox retries (:mod:`.actions`), both over the named statements of
``sql/operator_actions.sql``; a command as JSON (:mod:`.requests`), run and gathered into one
answer (:mod:`.commands`); the Function URL's side of it, the caller AWS authenticated, the
answer's size and the error statuses (:mod:`.function_url`)."""

# No other stage imports operations (tests/unit/test_structure.py enforces it).
__all__: list[str] = []
