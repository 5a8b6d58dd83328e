"""The names the VPC already resolves privately: Route 53 private hosted zones associated with it,
directly or through a Route 53 Profile.

A zone named like an interface endpoint's private DNS name collides exactly like an endpoint
(creating the endpoint fails with "conflicting DNS domain"), and it is how a hub-and-spoke account
reaches the endpoints of a shared-services VPC: the zone points the service's name at them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook_inbox_tools.cli.preflight.common import (
    WARN,
    Clients,
    Finding,
    Options,
    could_not_check,
)

CHECK = "Route 53 private zones"


@dataclass
class PrivateNames:
    """Zone name (lower case, no trailing dot) -> where the VPC gets it from."""

    zones: dict[str, str] = field(default_factory=dict)
    readable: bool = True  # the VPC's own zone associations could be listed
    findings: list[Finding] = field(default_factory=list)  # what could not be read

    def serving(self, host: str) -> tuple[str, str] | None:
        """The most specific zone that answers for ``host`` (the name itself or a parent), with
        where it comes from."""
        matches = [z for z in self.zones if host == z or host.endswith("." + z)]
        if not matches:
            return None
        zone = max(matches, key=len)
        return zone, self.zones[zone]


def service_host(service: str, region: str) -> str:
    """The name an interface endpoint's private DNS takes over (and the SDK calls)."""
    return f"{service}.{region}.amazonaws.com"


def read_private_names(aws: Clients, opts: Options) -> PrivateNames:
    names = PrivateNames()
    try:
        _read_vpc_zones(aws, opts, names)
    except Exception as exc:  # noqa: BLE001 - any AWS error is this read's finding
        names.readable = False
        names.findings.append(
            could_not_check(CHECK, exc, "route53:ListHostedZonesByVPC", aws.region, required=False)
        )
    try:
        _read_profile_zones(aws, opts, names)
    except Exception as exc:  # noqa: BLE001 - any AWS error is this read's finding
        names.findings.append(
            could_not_check(
                "Route 53 Profiles",
                exc,
                "route53profiles:ListProfileAssociations, ListProfileResourceAssociations, "
                "route53:GetHostedZone",
                aws.region,
                required=False,
            )
        )
    return names


def _read_vpc_zones(aws: Clients, opts: Options, names: PrivateNames) -> None:
    token: dict[str, str] = {}
    while True:
        page = aws.route53.list_hosted_zones_by_vpc(
            VPCId=opts.vpc_id, VPCRegion=aws.region, **token
        )
        for zone in page.get("HostedZoneSummaries", []):
            name = str(zone["Name"]).rstrip(".").lower()
            names.zones[name] = f"private hosted zone {zone['HostedZoneId']}"
        if not page.get("NextToken"):
            return
        token = {"NextToken": page["NextToken"]}


def _read_profile_zones(aws: Clients, opts: Options, names: PrivateNames) -> None:
    associations = aws.route53profiles.list_profile_associations(ResourceId=opts.vpc_id)
    for association in associations.get("ProfileAssociations", []):
        profile = association["ProfileId"]
        resources = aws.route53profiles.list_profile_resource_associations(ProfileId=profile)
        for resource in resources.get("ProfileResourceAssociations", []):
            _add_profile_resource(aws, names, profile, resource)


def _add_profile_resource(
    aws: Clients, names: PrivateNames, profile: str, resource: dict[str, str]
) -> None:
    arn, kind = str(resource.get("ResourceArn", "")), str(resource.get("ResourceType", ""))
    if kind == "PRIVATE_HOSTED_ZONE":
        zone_id = arn.rsplit("/", 1)[-1]
        try:
            zone = aws.route53.get_hosted_zone(Id=zone_id)["HostedZone"]
        except Exception:  # noqa: BLE001 - a zone shared from another account is not readable
            names.findings.append(
                Finding(
                    WARN,
                    "Route 53 Profiles",
                    f"profile {profile} gives the VPC the zone {zone_id}, whose name this account "
                    "cannot read: if it is a service name the stack makes an endpoint for, "
                    "that endpoint fails with conflicting DNS domain",
                    "ask the profile's owner for the zone's name and list that service in "
                    "ExistingVpcEndpoints",
                )
            )
            return
        name = str(zone["Name"]).rstrip(".").lower()
        names.zones[name] = f"private hosted zone {zone_id} (Route 53 Profile {profile})"
    elif kind == "INTERFACE_VPC_ENDPOINT":
        names.findings.append(
            Finding(
                WARN,
                "Route 53 Profiles",
                f"profile {profile} gives the VPC the endpoint {arn}: if it serves a service "
                "the stack makes an endpoint for, that endpoint fails with conflicting DNS domain",
                "list that service in ExistingVpcEndpoints",
            )
        )
