"""Every command explains itself: `webhook-inbox COMMAND --help` says what it does, every option
says what it is, and an option with a default shows it (issue 29)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from webhook_inbox_tools.cli.app import build_parser

# Defaults that say nothing worth showing: unset, off, empty.
_SILENT_DEFAULTS = (None, False, [], argparse.SUPPRESS)


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("webhook-inbox",)
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield path, parser
    for action in subcommands:
        for name, child in action.choices.items():
            yield from _commands(child, (*path, name))


def _options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            yield action


def test_every_command_has_a_description() -> None:
    missing = [" ".join(path) for path, p in _commands(build_parser()) if not p.description]
    assert missing == []


def test_every_argument_has_help() -> None:
    missing = [
        f"{' '.join(path)} {a.option_strings or a.dest}"
        for path, p in _commands(build_parser())
        for a in _options(p)
        if not a.help
    ]
    assert missing == []


def test_every_default_is_shown() -> None:
    hidden = [
        f"{' '.join(path)} {a.option_strings}"
        for path, p in _commands(build_parser())
        if p.formatter_class is not argparse.ArgumentDefaultsHelpFormatter
        for a in _options(p)
        if a.option_strings
        and a.default not in _SILENT_DEFAULTS
        and "default" not in (a.help or "")
    ]
    assert hidden == []


def test_sign_help_shows_the_format_default() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["sign"].format_help()  # type: ignore[union-attr]
    assert "(default headers)" in " ".join(text.split())


def test_the_cli_starts_without_the_functions_loggers() -> None:
    """The processor's and ingest's modules make their Powertools logger at import, at the level
    of that moment: imported by the CLI's start, they would fix it in every function process
    `dev` forks, before dev could quieten them (POWERTOOLS_LOG_LEVEL)."""
    import subprocess
    import sys

    probe = (
        "import sys, webhook_inbox_tools.cli.app; "
        "print(sorted(m for m in sys.modules if m.startswith('webhook_inbox.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    for module in (
        "webhook_inbox.processing.batch",
        "webhook_inbox.ingest.pipeline",
        "webhook_inbox.maintenance.sweeper",
    ):
        assert f"'{module}'" not in loaded, module
