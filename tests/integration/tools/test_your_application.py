"""application/ is the team's: adding a handler, its table and its test the way docs/handlers.md
shows, in a copy of the tree, leaves the project's tests green and runs the team's own tests
against their handlers (not the project's copy of the examples)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

DOC = (ROOT / "docs" / "handlers.md").read_text()

# The project's suites that read the application: the handler map, the samples per handler,
# the migrations (runtime and application), the example-handler docs and the handler rules.
AFFECTED = [
    "tests/unit/tools/test_sample_events.py",
    "tests/unit/tools/test_handler_keys.py",
    "tests/unit/processing/test_handlers_doc_example.py",
    "tests/unit/test_packaging.py",
    "tests/unit/base/test_config.py",
    "tests/integration/store/test_application_migrations.py",
    "tests/integration/store/test_migrations.py",
    "tests/integration/processing/test_example_handlers_docs.py",
]

# A test of the team's new handler, next to the documented test file: the copy's handler is
# the one that runs (an unregistered type would end `ignored`).
THEIR_TEST = """
def test_an_unknown_invoice_is_processed_and_changes_nothing(webhook_inbox):
    done = webhook_inbox.deliver("stripe", "invoice.paid", overrides=["data.object.id=in_1"])
    assert (done.status, done.state, done.changed) == (202, "processed", False)
    assert webhook_inbox.query("SELECT count(*) AS n FROM invoices") == [{"n": 0}]
"""


def _block(pattern: str) -> str:
    found = re.search(pattern, DOC, re.DOTALL)
    assert found, f"docs/handlers.md lost the block {pattern!r}"
    return found[1]


def _copy_of_the_tree(target: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree is still listed
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _add_the_documented_handler(tree: Path) -> None:
    app = tree / "application" / "webhook_inbox_app"
    billing = _block(r"```python\n(# application/webhook_inbox_app/billing\.py\n.*?)```")
    (app / "billing.py").write_text(billing)
    registration = _block(r"```python\n# application/webhook_inbox_app/handlers\.py.*?\n(.*?)```")
    import_line = next(line for line in registration.splitlines() if line.startswith("from "))
    key_line = next(line for line in registration.splitlines() if "billing." in line)
    handlers = (app / "handlers.py").read_text()
    handlers = re.sub(r"^from webhook_inbox_app import .*$", import_line, handlers, flags=re.M)
    handlers = handlers.replace("\n}\n", f"\n{key_line}\n}}\n")
    (app / "handlers.py").write_text(handlers)
    migration = _block(r"```sql\n-- application/webhook_inbox_app/migrations/(0002_\w+\.sql).*?```")
    sql = _block(r"```sql\n(-- application/webhook_inbox_app/migrations/0002_.*?)```")
    (app / "migrations" / migration).write_text(sql)
    tests = tree / "application" / "tests"
    documented = _block(r"<!-- handler-test-example -->\n```python\n(.*?)```")
    (tests / "test_my_handlers.py").write_text(documented + THEIR_TEST)


def _pytest(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The copy's packages first, ahead of the installed project's (which maps to this checkout);
    # none of this session's (its fixture application, its database).
    paths = [tree / "application", tree / "layers" / "shared", tree / "tools", tree]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DATABASE_URL")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_handler_added_the_documented_way_leaves_the_projects_tests_green(
    tmp_path: Path,
) -> None:
    tree = _copy_of_the_tree(tmp_path / "tree")
    _add_the_documented_handler(tree)

    project = _pytest(tree, "-n", "0", *AFFECTED)
    assert project.returncode == 0, project.stdout[-4000:] + project.stderr[-2000:]
    assert " failed" not in project.stdout

    theirs = _pytest(tree, "application")
    assert theirs.returncode == 0, theirs.stdout[-4000:] + theirs.stderr[-2000:]
    # The examples' tests, the documented file's two and the new handler's own.
    assert re.search(r"\b7 passed\b", theirs.stdout), theirs.stdout[-2000:]
