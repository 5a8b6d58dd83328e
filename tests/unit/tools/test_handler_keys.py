"""Handler keys that can never match are named, with the closest known types."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT
from webhook_inbox.ingest import providers
from webhook_inbox_tools.handler_lab.keys import check_keys

REGISTRY = providers.load_config_text((ROOT / "events" / "providers.local.json").read_text())


def _messages(*keys: tuple[str, str]) -> dict[tuple[str, str], str]:
    return {(p.provider, p.event_type): p.message for p in check_keys(keys, REGISTRY)}


def test_a_github_event_without_its_action_never_matches() -> None:
    (message,) = _messages(("github", "issues")).values()
    assert "issues.opened" in message
    assert "('github', 'issues.*')" in message


def test_a_provider_not_configured_is_named_with_the_closest_configured() -> None:
    (message,) = _messages(("strpe", "customer.created")).values()
    assert "'strpe' is not configured" in message
    assert "closest configured: stripe" in message


def test_a_typo_in_a_type_names_the_closest_known_types() -> None:
    (message,) = _messages(("stripe", "customer.create")).values()
    assert "closest: customer.created" in message


def test_known_types_patterns_and_types_the_samples_do_not_list_pass() -> None:
    assert (
        _messages(
            ("stripe", "customer.created"),
            ("stripe", "invoice.*"),
            ("github", "issues.*"),
            ("stripe", "radar.early_fraud_warning.created"),  # real, not in the samples: silent
            ("example", "subscription.updated"),
        )
        == {}
    )


def test_a_pattern_no_known_type_matches_is_a_note_not_a_warning() -> None:
    (problem,) = check_keys([("stripe", "zebra.*")], REGISTRY)
    assert problem.warning is False
    assert "no type stripe is known to send matches it" in problem.message


def test_dev_warns_at_start_about_a_key_that_never_matches(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.handler_apps import mistyped
    from webhook_inbox_tools.cli import dev

    monkeypatch.setattr(dev, "application_handlers", lambda: mistyped.HANDLERS)
    dev.warn_unserved_handlers(REGISTRY)
    said = capsys.readouterr()
    assert "warning: handler key ('github', 'issues'): github sends these events with an" in (
        said.out + said.err
    )
    assert "issues.opened'" not in said.out + said.err  # the key GitHub does send: no warning


def test_the_layers_known_types_are_the_samples() -> None:
    from webhook_inbox.processing.handler_keys import KNOWN_TYPES_FILE
    from webhook_inbox_tools.handler_lab.keys import known_types_by_scheme

    shipped = json.loads(KNOWN_TYPES_FILE.read_text())
    assert shipped == known_types_by_scheme(), (
        "a sample file changed: run python -m webhook_inbox_tools.handler_lab.keys"
    )


def test_the_processor_judges_keys_of_providers_named_after_their_scheme() -> None:
    from webhook_inbox.processing.handler_keys import cold_start_problems

    problems = cold_start_problems(
        [("github", "issues"), ("github", "issues.opened"), ("acme", "issues"), ("stripe", "zz.*")]
    )
    assert [(p.provider, p.event_type) for p in problems] == [("github", "issues")]


def test_the_processor_warns_at_its_cold_start(tmp_path: Path) -> None:
    # The application's map with a key GitHub never sends, as ApplicationLayer would ship it.
    app = tmp_path / "webhook_inbox_app"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "handlers.py").write_text("from tests.handler_apps.mistyped import HANDLERS\n")
    code = (
        "import runpy; runpy.run_path("
        f"{str(ROOT / 'functions' / 'processor' / 'app.py')!r}, run_name='processor')"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.update(AWS_DEFAULT_REGION="us-east-1", POWERTOOLS_SERVICE_NAME="webhook-inbox")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    (line,) = [json.loads(x) for x in done.stdout.splitlines() if "never matches" in x]
    assert line["level"] == "WARNING"
    assert "('github', 'issues')" in line["key"]
    assert "('github', 'issues.*')" in line["key"]
