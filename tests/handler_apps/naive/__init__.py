"""An application whose handlers are wrong in the ways check-handlers must catch, each beside
its guarded twin (tests/integration/cli/test_check_handlers.py)."""
