"""Sweeper Lambda entry point — owned by its own issue; this placeholder only fixes the layout."""

from __future__ import annotations

from typing import Any


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    raise NotImplementedError("the sweeper function is not built yet")
