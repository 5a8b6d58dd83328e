"""Every `webhook-inbox …` command infra/RUNBOOK.md tells an operator to run exists, with the
flags it uses (parsed by the CLI's own parser), and every operator command in it runs against
the deployed stack (``--stack``): the runbook's reader is on call, not inside the VPC."""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import shlex

import pytest

from tests.support import ROOT
from webhook_inbox_tools.cli.app import build_parser

RUNBOOK = (ROOT / "infra" / "RUNBOOK.md").read_text()
OPERATOR_COMMANDS = re.compile(r"^(status|events (list|show)|replay|outbox (list|retry))\b")
# The runbook's placeholders, as an operator fills them in ("…": more of the same, or nothing).
EXAMPLES: dict[str, str | None] = {
    "NAME": "acme", "PROVIDER": "stripe", "EVENT_ID": "evt_1", "ID": "17", "…": None,
}  # fmt: skip


def arguments(command: str) -> list[str]:
    """The command's arguments, its placeholders filled in."""
    words = shlex.split(command)
    assert words[0] == "webhook-inbox"
    filled = []
    for before, word in itertools.pairwise(words):
        if word == "…" and before.startswith("--"):
            filled.append("why")  # an option's value: `--reason "…"`
        elif EXAMPLES.get(word, word) is not None:
            filled.append(EXAMPLES.get(word, word))
    return filled


def runbook_commands() -> list[str]:
    """Each command: in a `code span` (over line breaks too) or on a line of a ```sh block."""
    found = [" ".join(m.split()) for m in re.findall(r"`(webhook-inbox [^`]+)`", RUNBOOK)]
    for block in re.findall(r"```sh\n(.*?)```", RUNBOOK, flags=re.DOTALL):
        found += [line.strip() for line in block.splitlines() if line.startswith("webhook-inbox ")]
    return list(dict.fromkeys(found))


def test_the_runbook_names_the_commands_an_operator_needs() -> None:
    commands = runbook_commands()
    assert len(commands) >= 15
    named = {" ".join(c.split()[1:3]) for c in commands}
    assert {"events list", "events show", "outbox list", "outbox retry"} <= named
    assert any(c.startswith("webhook-inbox replay") for c in commands)
    assert any(c.startswith("webhook-inbox status") for c in commands)


@pytest.mark.parametrize("command", runbook_commands())
def test_each_command_parses_with_the_flags_it_uses(command: str) -> None:
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            build_parser().parse_args(arguments(command))
    except SystemExit:
        pytest.fail(f"{command!r}: {errors.getvalue().strip()}")


@pytest.mark.parametrize(
    "command",
    [c for c in runbook_commands() if OPERATOR_COMMANDS.match(c.removeprefix("webhook-inbox "))],
)
def test_each_operator_command_runs_against_the_deployed_stack(command: str) -> None:
    args = build_parser().parse_args(arguments(command))
    assert args.stack == "<stack>", command
    assert not getattr(args, "operator", None)  # the audit takes the AWS principal


def test_the_check_catches_a_flag_that_does_not_exist() -> None:
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        build_parser().parse_args(shlex.split("events list --state dead_letter --stack s"))
