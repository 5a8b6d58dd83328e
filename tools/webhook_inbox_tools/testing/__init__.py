"""The testing kit for handler authors: a pytest plugin (:mod:`.plugin`, registered as the
``webhook_inbox`` pytest11 entry point) whose ``webhook_inbox`` fixture delivers events through the
real ingest and processor on a throwaway PostgreSQL. Installed with the tools, never in a layer."""
