"""``webhook-inbox deploy-policy``: the deploy policy's documents, written for a stack name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.infra_support import ROOT
from webhook_inbox_tools import deploy_policy
from webhook_inbox_tools.cli.app import main


def _written(folder: Path) -> list[dict[str, object]]:
    names = deploy_policy.file_names(len(list(folder.glob("deploy-policy*.json"))))
    return [json.loads((folder / name).read_text()) for name in names]


def test_the_default_name_writes_the_shipped_documents(tmp_path: Path) -> None:
    assert main(["deploy-policy", "--stack-name", "webhook-inbox", "--out", str(tmp_path)]) == 0
    for name in deploy_policy.FILES:
        assert (tmp_path / name).read_text() == (ROOT / "infra" / name).read_text()


@pytest.mark.parametrize("length", [30, 128])
def test_a_long_name_grants_the_same_within_iams_limit(
    tmp_path: Path, length: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The name occurs in the first document's ARNs: past about 24 characters it would outgrow
    IAM's 6,144 characters, so the statements are packed again (a third document at 128)."""
    stack = ("orders-" * 20)[: length - 1] + "x"
    assert main(["deploy-policy", "--stack-name", stack, "--out", str(tmp_path)]) == 0
    written = _written(tmp_path)
    assert all(deploy_policy.size(d) <= deploy_policy.MANAGED_POLICY_LIMIT for d in written)
    rendered = deploy_policy.documents(stack)
    assert [s for d in written for s in d["Statement"]] == [  # type: ignore[attr-defined]
        s for d in rendered for s in d["Statement"]
    ]
    text = json.dumps(written)
    assert "webhook-inbox" not in text
    assert text.count(stack) == json.dumps(deploy_policy.documents()).count("webhook-inbox")
    assert len(written) == (3 if length == 128 else 2)
    out = capsys.readouterr().out
    assert f"--policy-name {stack}-deploy-2 --policy-document file://{tmp_path}" in out


def test_an_earlier_runs_extra_document_is_named_not_attached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["deploy-policy", "--stack-name", "s" * 128, "--out", str(tmp_path)])
    capsys.readouterr()
    main(["deploy-policy", "--stack-name", "short", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"note: {tmp_path / 'deploy-policy-3.json'} is not part of this policy" in out
    assert f"file://{tmp_path / 'deploy-policy-3.json'}" not in out


@pytest.mark.parametrize("name", ["1stack", "my_stack", "a" * 129, ""])
def test_a_name_cloudformation_refuses_is_a_usage_error(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deploy-policy", "--stack-name", name, "--out", str(tmp_path)]) == 2
    assert "is not a CloudFormation stack name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
