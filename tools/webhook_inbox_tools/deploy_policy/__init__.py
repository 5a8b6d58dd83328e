"""The deploying principal's least-privilege IAM policy (docs/deploy.md, "The deploy
principal's permissions").

Two customer managed policy documents (together over IAM's 6,144-character limit for one),
written for the stack name ``webhook-inbox``; :func:`documents` renders them for another.
``resource_actions.json`` is what they are built from: per resource type of the translated
template, the actions CloudFormation's handlers call, and the deploy tools' own calls
(infra/build_deploy_policy.py rebuilds both; tests/unit/infra/test_deploy_policy.py checks that
the documents grant every action the data requires).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from importlib import resources
from typing import Any

DEFAULT_STACK = "webhook-inbox"
FILES = ("deploy-policy.json", "deploy-policy-2.json")
# IAM's limit for one customer managed policy, in characters without whitespace.
MANAGED_POLICY_LIMIT = 6144


def documents(stack_name: str = DEFAULT_STACK) -> list[dict[str, Any]]:
    """The policy documents, their resources named for ``stack_name``."""
    found = []
    for name in FILES:
        document = json.loads(_read(name))
        for statement in document["Statement"]:
            statement["Resource"] = [_for_stack(arn, stack_name) for arn in statement["Resource"]]
        found.append(document)
    return found


def _for_stack(arn: str, stack_name: str) -> str:
    # The default name appears in the ARNs only where the stack's own name goes: as the stack
    # (stack/webhook-inbox/), a name prefix (webhook-inbox-*) or a folder (/webhook-inbox/*).
    # A bucket CloudFormation names is the stack's name lowercased (the idle ledger's), and IAM
    # compares ARNs case-sensitively.
    if arn.startswith("arn:aws:s3:::"):
        return arn.replace(DEFAULT_STACK, stack_name.lower())
    return arn.replace(DEFAULT_STACK, stack_name)


def size(document: dict[str, Any]) -> int:
    """A document's length as IAM counts it against the limit: without whitespace."""
    return len(re.sub(r"\s", "", json.dumps(document)))


def fitted(stack_name: str = DEFAULT_STACK) -> list[dict[str, Any]]:
    """:func:`documents` for ``stack_name``, each within IAM's limit.

    The name occurs in many of the first document's ARNs, so a long one grows it past the
    limit (at the time of writing, a name of 23 characters or more): then its statements, in
    order, are packed again into as many documents as they need. A statement never grows past
    the limit on its own: the longest holds a handful of ARNs.
    """
    rendered = documents(stack_name)
    if all(size(document) <= MANAGED_POLICY_LIMIT for document in rendered):
        return rendered
    packed: list[list[dict[str, Any]]] = [[]]
    for statement in (s for document in rendered for s in document["Statement"]):
        if size(_document([*packed[-1], statement])) > MANAGED_POLICY_LIMIT and packed[-1]:
            packed.append([])
        packed[-1].append(statement)
    return [_document(statements) for statements in packed]


def file_names(count: int) -> list[str]:
    """deploy-policy.json, deploy-policy-2.json, … for ``count`` documents."""
    return [
        "deploy-policy.json" if n == 1 else f"deploy-policy-{n}.json" for n in range(1, count + 1)
    ]


def _document(statements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": statements}


def resource_actions() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(_read("resource_actions.json"))
    return loaded


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def granted(action: str, patterns: Iterable[str]) -> bool:
    """Whether an Action pattern (IAM's ``*`` and ``?``; case-insensitive) covers ``action``."""
    return any(fnmatch.fnmatchcase(action.lower(), p.lower()) for p in patterns)


def statements(stack_name: str = DEFAULT_STACK) -> list[dict[str, Any]]:
    return [s for document in documents(stack_name) for s in document["Statement"]]
