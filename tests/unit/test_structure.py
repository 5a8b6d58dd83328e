"""The structure the design asks for, checked on the code rather than described.

- Only the data modules run SQL on the runtime's tables: ``inbox.py``, ``inbox_claims.py`` and
  ``inbox_upkeep.py`` (webhook_events), ``outbox.py`` (outbox_messages), ``pauses.py``
  (handler_pauses, handler_failures, and the held rows they release) and ``pacing.py``
  (handler_pacing, handler_admissions, and the leased rows pacing hands back), each with the one
  SQL file of its name beside it (``inbox_upkeep.py``, the sweeper's part of the inbox, and
  ``inbox_claims.py``, ingest's, share ``inbox.sql``);
  ``partitions.py`` and ``partition_switch.py`` change the layout of both tables (DDL, keys),
  each table's own statements in its own file (``partitions.sql``, ``outbox_partitions.sql``). The
  migration runner (the schema), ``db.py`` (the role's session defaults) and
  ``handler_guard.py`` (the savepoint around each handler, with its own SQL file) are the only
  other modules that talk SQL, and none touches a table's rows; the one exception is the
  operator's stage (``operations/``), whose ``listings.py`` and ``actions.py`` run the audited
  operator statements of its own ``sql/operator_actions.sql`` and no other file's.
- The entry points (functions/*/app.py) run no SQL themselves.
- The runtime package imports neither the tools nor the application (it must run without them:
  only the processor's and migrations' entry points install the application).
- docs/state-machine.md names every statement of the two SQL files, and no statement that
  does not exist.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from tests.infra_support import PACKAGE_DIR, ROOT

DATA_MODULES = {
    "inbox.py": "inbox.sql",
    "inbox_upkeep.py": "inbox.sql",  # the sweeper's statements on the inbox
    "inbox_claims.py": "inbox.sql",  # ingest's claim
    "outbox.py": "outbox.sql",
    "pauses.py": "pauses.sql",
    "pacing.py": "pacing.sql",
    # The partitions of the inbox and the outbox (DDL), retention by partition: what both tables
    # share and the inbox's own in partitions.sql, the outbox's own in outbox_partitions.sql.
    "partitions.py": ("partitions.sql", "outbox_partitions.sql"),
    "partition_switch.py": ("partitions.sql", "outbox_partitions.sql"),
}
SQL_FILES = {
    f for files in DATA_MODULES.values() for f in (files if isinstance(files, tuple) else (files,))
}
# Besides inbox.sql, the statements that move webhook_events rows, and the one move each makes.
MOVES_INBOX_ROWS = {"pauses.sql", "pacing.sql"}
# The inbox's layout (its partitions): DDL on webhook_events, never a row moved; the outbox's.
INBOX_LAYOUT = {"partitions.sql"}
OUTBOX_LAYOUT = {"outbox_partitions.sql"}
# Transaction control around the processor's handlers: savepoints and a setting, no table.
TRANSACTION_GUARD = {"handler_guard.py": "handler_guard.sql"}
SCHEMA_AND_SESSION = {"migrate.py", "db.py"}
# The operator's listings, replays and retries (webhook_inbox.operations), audited.
OPERATOR_SQL = PACKAGE_DIR / "operations" / "sql" / "operator_actions.sql"
OPERATOR_MODULES = {"listings.py", "actions.py"}
SQL_CALLS = {"execute", "executemany", "copy", "query"}


def _runtime_modules() -> list[Path]:
    return sorted(PACKAGE_DIR.rglob("*.py"))


def _calls(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_only_the_data_modules_run_sql() -> None:
    running_sql = {
        path.name
        for path in _runtime_modules()
        if path.name != "queries.py" and _calls(path) & SQL_CALLS
    }
    assert running_sql == (
        set(DATA_MODULES) | set(TRANSACTION_GUARD) | SCHEMA_AND_SESSION | OPERATOR_MODULES
    )


def test_the_operators_statements_are_its_own_files_only() -> None:
    """operations/ runs the statements of operator_actions.sql (``statement``, bound once in
    listings.py) and no other SQL file's; no other stage loads that file."""
    operations = PACKAGE_DIR / "operations"
    assert sorted(p.name for p in (operations / "sql").glob("*.sql")) == [OPERATOR_SQL.name]
    for path in _runtime_modules():
        loads = re.findall(r"SqlFile\(([^)]*)\)", path.read_text())
        if path.parent == operations:
            assert all("webhook_inbox.operations" in call for call in loads), path
        else:
            assert not any("operations" in call for call in loads), path


def test_the_entry_points_run_no_sql_of_their_own() -> None:
    # Thin handlers: a function's app.py reaches the tables through the runtime's data modules.
    entry_points = sorted((ROOT / "functions").glob("*/app.py"))
    assert len(entry_points) >= 4
    running_sql = [str(p.relative_to(ROOT)) for p in entry_points if _calls(p) & SQL_CALLS]
    assert running_sql == []


def test_one_sql_file_per_data_module_and_nothing_else() -> None:
    assert sorted(p.name for p in (PACKAGE_DIR / "store" / "sql").glob("*.sql")) == sorted(
        {*SQL_FILES, *TRANSACTION_GUARD.values()}
    )


def test_the_handler_guard_touches_no_table() -> None:
    statements = _statements("handler_guard.sql").lower()
    for table in ("webhook_events", "outbox_messages", "insert ", "update ", "delete "):
        assert table not in statements


def _statements(sql_file: str) -> str:
    lines = (PACKAGE_DIR / "store" / "sql" / sql_file).read_text().splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("--"))


def test_each_table_is_in_its_own_sql_file_only() -> None:
    owners = {"inbox.sql": "webhook_events", "outbox.sql": "outbox_messages"}
    for sql_file, table in owners.items():
        assert table in _statements(sql_file)
        for other in SQL_FILES - {sql_file}:
            # pauses.sql releases held rows, pacing.sql hands back the leased rows it defers;
            # the layout files change their table's layout.
            allowed = {
                "webhook_events": MOVES_INBOX_ROWS | INBOX_LAYOUT,
                "outbox_messages": OUTBOX_LAYOUT,
            }[table]
            if other not in allowed:
                assert table not in _statements(other), (other, table)
    for layouts, table in ((INBOX_LAYOUT, "webhook_events"), (OUTBOX_LAYOUT, "outbox_messages")):
        for layout in layouts:
            moves = re.findall(
                rf"(?:insert\s+into|update|delete\s+from)\s+{table}\b",
                _statements(layout).lower(),
            )
            assert moves == [], (layout, moves)
    for table in ("handler_pauses", "handler_failures"):
        assert table in _statements("pauses.sql")
        # The lease reads the pauses (to hold what they match); nothing else does.
        assert f"update {table}" not in _statements("inbox.sql").lower()
    for table in ("handler_pacing", "handler_admissions"):
        for other in SQL_FILES - {"pacing.sql"}:
            assert table not in _statements(other), (other, table)
    # An attempt's end is recorded by the inbox statement that ends it, and nowhere else.
    for other in SQL_FILES - {"inbox.sql"}:
        assert "webhook_event_attempts" not in _statements(other), other
    # pacing.sql's one statement on webhook_events: the leased rows it defers, handed back.
    assert _statements("pacing.sql").lower().count("webhook_events") == 1


def test_the_runtime_imports_neither_tools_nor_application() -> None:
    for path in _runtime_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                modules = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                )
                for module in modules:
                    assert not module.startswith(("webhook_inbox_tools", "webhook_inbox_app")), (
                        f"{path.name} imports {module}"
                    )


def _statement_names(sql_file: Path) -> set[str]:
    return set(re.findall(r"^-- name: (\w+)$", sql_file.read_text(), flags=re.MULTILINE))


def test_the_state_machine_page_names_every_statement_and_only_real_ones() -> None:
    page = (ROOT / "docs" / "state-machine.md").read_text()
    runtime = set().union(*(_statement_names(PACKAGE_DIR / "store" / "sql" / f) for f in SQL_FILES))
    tools = _statement_names(OPERATOR_SQL)
    mentioned = set(re.findall(r"`([a-z_]+)`", page))
    assert sorted(runtime - mentioned) == []
    # The statement column names only statements that exist.
    in_tables = {
        name
        for line in page.splitlines()
        if line.startswith("| ") and line.count(" | ") == 2
        for name in re.findall(r"`([a-z_]+)`", line.split(" | ")[1])
    }
    assert {"claim_events", "reset_event_for_replay", "add_message"} <= in_tables  # parsed
    assert sorted(in_tables - runtime - tools) == []


def _bench_imports() -> dict[str, set[str]]:
    """Each bench/ module and the bench/ modules it imports (lazy and type-only ones too)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "bench").glob("*.py")):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "bench":
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bench."):
                found.add((node.module or "").split(".")[1])
        graph[path.stem] = found & {p.stem for p in (ROOT / "bench").glob("*.py")}
    return graph


def test_the_benchmarks_import_without_cycles() -> None:
    graph = _bench_imports()
    assert len(graph) >= 10
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, " -> ".join((*path, module))
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


def test_the_session_end_check_finds_what_a_run_leaves_behind(tmp_path: Path) -> None:
    from tests.conftest import leftovers

    (tmp_path / ".lockfile").touch()  # the embedded PostgreSQL's shared lock: expected
    (tmp_path / "pytest-of-someone").mkdir()  # pytest's own
    assert leftovers(tmp_path) == []
    (tmp_path / "webhook-inbox-dev-e2e-abc").mkdir()
    assert leftovers(tmp_path) == ["webhook-inbox-dev-e2e-abc"]
    # A process started from it ($0 names the folder, as a server's data directory would).
    sleeper = subprocess.Popen(["sh", "-c", "sleep 30", str(tmp_path)])
    try:
        assert any(str(tmp_path) in found for found in leftovers(tmp_path)[1:])
    finally:
        sleeper.kill()
        sleeper.wait()
