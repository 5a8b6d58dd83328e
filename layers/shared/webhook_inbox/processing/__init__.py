"""Processing: one SQS batch of inbox ids → leased rows, the application's handlers run in one
transaction with their outbox messages, retries scheduled (:mod:`.batch`, :mod:`.leasing`,
:mod:`.passes`); the handler registry and its guard (:mod:`.handlers`,
:mod:`.handler_guard`) and the API handlers are written against (:mod:`.domain`)."""

# No other stage imports processing (tests/unit/test_structure.py enforces it).
__all__: list[str] = []
