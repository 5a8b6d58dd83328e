"""The Endpoint parameter (issue 18): the HTTP API or the ingest function's URL, exactly one.

Both deployments are resolved from template.yaml and from SAM's own translation of it (what
CloudFormation receives): which resources exist, that none of them refers to a resource its
deployment lacks, the URL providers are given, who may invoke ingest, and the dashboard.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra_support import (
    Placeholders,
    Resolver,
    dangling_references,
    load_template,
    parameter_values,
    translated_template,
)

ENDPOINTS = ("HttpApi", "FunctionUrl")
NETWORK = {"VpcId": "vpc-0abc", "SubnetIds": "subnet-a,subnet-b", "PrivateRouteTableIds": "rtb-1"}
EXISTING_DB = {"DatabaseSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbC"}
# Resources that exist only for one endpoint, in template.yaml and (prefixed) once translated.
ONLY_FOR = {
    "HttpApi": {
        "HttpApi",
        "IngestFunctionDeliveryPermission",
        "IngestFunctionChallengePermission",
        "ApiAccessLogGroup",
    },
    "FunctionUrl": {
        "IngestFunctionUrl",
        "IngestFunctionUrlPermission",
        "IngestFunctionUrlInvokePermission",
    },
}


def resolver(endpoint: str, **params: str) -> Resolver:
    return Resolver(
        parameter_values(**NETWORK, Endpoint=endpoint, **params), Placeholders(), "webhook-inbox"
    )


def created(template: dict[str, Any], r: Resolver) -> set[str]:
    return {
        name
        for name, res in template["Resources"].items()
        if "Condition" not in res or r.condition(res["Condition"])
    }


def test_the_endpoint_parameter_allows_the_two_endpoints_and_defaults_to_the_http_api() -> None:
    spec = load_template()["Parameters"]["Endpoint"]
    assert set(spec["AllowedValues"]) == set(ENDPOINTS)
    assert spec["Default"] == "HttpApi"


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("translated", [False, True], ids=["template", "translated"])
def test_exactly_one_endpoint_exists(endpoint: str, translated: bool) -> None:
    template = translated_template() if translated else load_template()
    made = created(template, resolver(endpoint))
    other = next(e for e in ENDPOINTS if e != endpoint)
    assert ONLY_FOR[endpoint] <= made
    assert not ONLY_FOR[other] & made
    gateway = {
        name
        for name, res in template["Resources"].items()
        if res["Type"].startswith(("AWS::ApiGateway", "AWS::Serverless::HttpApi"))
    }
    assert gateway, "the HTTP API (SAM's, or its AWS::ApiGatewayV2 translation)"
    assert gateway & made == (gateway if endpoint == "HttpApi" else set())


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("database", [{}, EXISTING_DB], ids=["created-db", "existing-db"])
@pytest.mark.parametrize("translated", [False, True], ids=["template", "translated"])
def test_nothing_refers_to_a_resource_its_deployment_lacks(
    endpoint: str, database: dict[str, str], translated: bool
) -> None:
    """An HttpApi event on IngestFunction failed this: SAM gave its invoke permission no
    condition, so Endpoint=FunctionUrl referred to an API it does not create."""
    template = translated_template() if translated else load_template()
    assert dangling_references(template, resolver(endpoint, **database)) == []


def test_the_reference_check_sees_a_permission_without_its_endpoints_condition() -> None:
    template = json.loads(json.dumps(load_template()))
    del template["Resources"]["IngestFunctionDeliveryPermission"]["Condition"]
    found = dangling_references(template, resolver("FunctionUrl"))
    assert found == ["IngestFunctionDeliveryPermission -> HttpApi"]


def test_ingest_has_no_event_source_of_its_own() -> None:
    """Its route lives in HttpApi's definition (see the comment there) or is its Function URL."""
    ingest = load_template()["Resources"]["IngestFunction"]["Properties"]
    assert "Events" not in ingest


def test_the_http_api_routes_post_and_get_webhooks_provider_to_ingest() -> None:
    """POST for deliveries, GET for the senders' challenges (Meta, X, Dropbox, Okta,
    Braintree), each with its own invoke permission, no other method."""
    api = load_template()["Resources"]["HttpApi"]["Properties"]
    (path,) = api["DefinitionBody"]["paths"]
    assert path == "/webhooks/{provider}"
    operations = api["DefinitionBody"]["paths"][path]
    assert set(operations) == {"post", "get"}
    resources = load_template()["Resources"]
    for method, permission_name in (
        ("post", "IngestFunctionDeliveryPermission"),
        ("get", "IngestFunctionChallengePermission"),
    ):
        integration = operations[method]["x-amazon-apigateway-integration"]
        assert integration["type"] == "aws_proxy"
        assert integration["httpMethod"] == "POST"  # how API Gateway invokes Lambda
        assert integration["payloadFormatVersion"] == "2.0"
        # The alias a deploy shifts (docs/deploy.md, "Gradual deployments"), not the function.
        assert "${IngestFunctionAliaslive}" in integration["uri"]["Fn::Sub"]
        permission = resources[permission_name]["Properties"]
        assert permission["Principal"] == "apigateway.amazonaws.com"
        assert permission["FunctionName"] == {"Ref": "IngestFunctionAliaslive"}
        expected = f"${{HttpApi}}/*/{method.upper()}/webhooks/*"
        assert permission["SourceArn"]["Fn::Sub"].endswith(expected)


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("HttpApi", "https://<HttpApi>.execute-api.us-east-1.amazonaws.com/webhooks/{provider}"),
        # The FunctionUrl attribute is https://<id>.lambda-url.<region>.on.aws/ (trailing slash).
        ("FunctionUrl", "<IngestFunctionUrl.FunctionUrl>webhooks/{provider}"),
    ],
)
def test_the_webhook_url_output_names_the_endpoint_that_exists(endpoint: str, url: str) -> None:
    output = load_template()["Outputs"]["WebhookUrl"]
    assert resolver(endpoint).resolve(output["Value"]) == url


def test_the_function_url_is_public_only_through_the_url_and_without_cors() -> None:
    resources = load_template()["Resources"]
    url = resources["IngestFunctionUrl"]["Properties"]
    assert url["TargetFunctionArn"] == {"Ref": "IngestFunction"}
    assert url["Qualifier"] == "live"  # the alias a deploy shifts
    assert url["AuthType"] == "NONE"  # providers sign their deliveries; ingest verifies them
    assert "Cors" not in url
    statements = {
        name: res["Properties"]
        for name, res in resources.items()
        if res["Type"] == "AWS::Lambda::Permission" and res["Properties"].get("Principal") == "*"
    }
    assert set(statements) == {"IngestFunctionUrlPermission", "IngestFunctionUrlInvokePermission"}
    by_action = {p["Action"]: p for p in statements.values()}
    assert set(by_action) == {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"}
    assert by_action["lambda:InvokeFunctionUrl"]["FunctionUrlAuthType"] == "NONE"
    # Without this condition the public could call the Invoke API directly.
    assert by_action["lambda:InvokeFunction"]["InvokedViaFunctionUrl"] is True
    for permission in statements.values():
        assert permission["FunctionName"] == {"Ref": "IngestFunctionAliaslive"}
        assert resources_condition(permission) == "UseFunctionUrl"


def resources_condition(properties: dict[str, Any]) -> str:
    resources = load_template()["Resources"]
    (name,) = [n for n, r in resources.items() if r.get("Properties") is properties]
    return str(resources[name]["Condition"])


@pytest.mark.parametrize(("endpoint", "reserved"), [("HttpApi", None), ("FunctionUrl", 20)])
def test_only_the_function_url_reserves_ingest_concurrency(
    endpoint: str, reserved: int | None
) -> None:
    """The URL's throttle: beyond the reservation Lambda answers 429, which providers retry.
    Behind the HTTP API the stage throttles, and a reservation would only cost quota."""
    ingest = load_template()["Resources"]["IngestFunction"]["Properties"]
    value = resolver(endpoint).resolve(ingest["ReservedConcurrentExecutions"])
    assert value == reserved
    assert load_template()["Parameters"]["IngestReservedConcurrency"]["MinValue"] == 1


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_the_dashboard_is_valid_json_and_shows_the_endpoint_that_exists(endpoint: str) -> None:
    body = load_template()["Resources"]["Dashboard"]["Properties"]["DashboardBody"]
    dashboard = json.loads(resolver(endpoint).resolve(body))
    text = json.dumps(dashboard)
    namespaces = {
        metric[0]
        for widget in dashboard["widgets"]
        for metric in widget["properties"]["metrics"]
        if isinstance(metric[0], str)
    }
    if endpoint == "HttpApi":
        assert "AWS/ApiGateway" in namespaces
        assert '"ApiId", "<HttpApi>"' in text
        assert "UrlRequestCount" not in text
    else:
        assert "AWS/ApiGateway" not in namespaces
        assert '"UrlRequestCount", "FunctionName", "<IngestFunction>"' in text
        assert "<HttpApi>" not in text


@pytest.mark.parametrize("proxy", ["true", "false"])
def test_the_dashboard_shows_rds_proxys_pinned_sessions_where_there_is_a_proxy(proxy: str) -> None:
    body = load_template()["Resources"]["Dashboard"]["Properties"]["DashboardBody"]
    dashboard = json.loads(resolver("HttpApi", CreateDatabaseProxy=proxy).resolve(body))
    text = json.dumps(dashboard)
    if proxy == "true":
        assert '"DatabaseConnectionsCurrentlySessionPinned", "ProxyName", "<DatabaseProxy>"' in text
    else:
        assert "DatabaseConnectionsCurrentlySessionPinned" not in text
