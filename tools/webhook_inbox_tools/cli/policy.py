"""``webhook-inbox deploy-policy``: the deploy principal's policy documents, written for a stack.

The shipped documents (infra/deploy-policy*.json) name the stack ``webhook-inbox``; this writes
them with another stack's name in their ARNs (:func:`webhook_inbox_tools.deploy_policy.fitted`,
the same rendering preflight checks the caller against), each within IAM's limit for one
customer managed policy, and prints the commands that create and attach them.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools import deploy_policy

# CloudFormation's rule for a stack name (CreateStack, StackName).
STACK_NAME = re.compile(r"[A-Za-z][-A-Za-z0-9]{0,127}")

DESCRIPTION = (
    "Write the deploy principal's least-privilege IAM policy (docs/deploy.md, \"The deploy "
    "principal's permissions\") with STACK's name in its resource ARNs: deploy-policy.json, "
    "deploy-policy-2.json (and -3.json when a long name needs a third document to stay within "
    "IAM's 6,144 characters per policy) in DIR, then print the commands that attach them."
)


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "deploy-policy",
        help="write the deploy principal's IAM policy documents for a stack name",
        description=DESCRIPTION,
    )
    p.add_argument("--stack-name", required=True, metavar="STACK", help="the stack to deploy")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="folder to write the documents to (created if missing; default: this folder)",
    )
    p.set_defaults(func=cmd_deploy_policy)


def cmd_deploy_policy(args: argparse.Namespace) -> int:
    stack = args.stack_name
    if not STACK_NAME.fullmatch(stack):
        raise ConfigurationError(
            f"{stack!r} is not a CloudFormation stack name: a letter, then letters, digits and "
            "hyphens, at most 128 characters"
        )
    documents = deploy_policy.fitted(stack)
    names = deploy_policy.file_names(len(documents))
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for name, document in zip(names, documents, strict=True):
        (out / name).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(
            f"wrote {out / name}: {len(document['Statement'])} statements, "
            f"{deploy_policy.size(document):,} of {deploy_policy.MANAGED_POLICY_LIMIT:,} characters"
        )
    # A longer name may once have needed more documents than this one: such a file is not part
    # of this policy, and attaching it would grant another stack's names.
    for extra in sorted(out.glob("deploy-policy-*.json")):
        if extra.name not in names:
            print(f"note: {extra} is not part of this policy (an earlier run's); do not attach it")
    print("\nattach them to the role (or user) that deploys, for instance:")
    for number, name in enumerate(names, 1):
        policy = f"{stack}-deploy" if number == 1 else f"{stack}-deploy-{number}"
        print(f"aws iam create-policy --policy-name {policy} --policy-document file://{out / name}")
    for number in range(1, len(names) + 1):
        policy = f"{stack}-deploy" if number == 1 else f"{stack}-deploy-{number}"
        print(
            "aws iam attach-role-policy --role-name DEPLOY_ROLE "
            f"--policy-arn arn:aws:iam::ACCOUNT:policy/{policy}"
        )
    return 0
