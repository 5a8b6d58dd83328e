"""Ingest: an HTTP delivery → verified, validated, claimed and enqueued inbox rows
(:mod:`.pipeline`), with who may send and how they sign (:mod:`.providers`, :mod:`.schemes`),
where the providers come from (the registry document :mod:`.provider_registry`, the execution
environment's copy :mod:`.provider_source`, cached secrets :mod:`.managed_secrets`) and how
bodies are parsed (:mod:`.bodies`)."""

# What other stages may import: the providers model and the registry's document (the sweeper
# judges the registry once a run). tests/unit/test_structure.py enforces it.
__all__ = ["provider_registry", "providers"]
