"""The URL a sender called, rebuilt from each API Gateway event shape, and ``public_url``
(URL-signed schemes — Twilio, Square, HubSpot — verify over it)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import load_event
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.ingest.providers import parse_config
from webhook_inbox.ingest.schemes import Delivery


def _decode(event: dict[str, Any]) -> tuple[str, Delivery]:
    return ingest.decode_event(event, 1024 * 1024)


def test_http_api_v2_url_is_domain_raw_path_and_raw_query() -> None:
    event = load_event("apigw-v2-post.json")
    event["rawQueryString"] = "bodySHA256=ab%2Fcd&x=1"
    name, delivery = _decode(event)
    assert name == "acme"
    assert delivery.method == "POST"
    assert delivery.url == (
        "https://abc123.execute-api.us-east-1.amazonaws.com/webhooks/acme?bodySHA256=ab%2Fcd&x=1"
    )


def test_function_url_event_gives_the_function_url() -> None:
    _, delivery = _decode(load_event("function-url-post.json"))
    host = load_event("function-url-post.json")["requestContext"]["domainName"]
    assert delivery.url == f"https://{host}/webhooks/acme"


def test_rest_api_v1_url_carries_the_stage_and_reencodes_the_query() -> None:
    event = load_event("apigw-v1-post.json")
    event["requestContext"]["domainName"] = "r1.execute-api.eu-west-1.amazonaws.com"
    event["requestContext"]["path"] = "/prod/webhooks/acme"
    event["multiValueQueryStringParameters"] = {"a": ["1", "2"], "b": ["x y"]}
    _, delivery = _decode(event)
    assert (
        delivery.url
        == "https://r1.execute-api.eu-west-1.amazonaws.com/prod/webhooks/acme?a=1&a=2&b=x+y"
    )


def test_forwarded_proto_and_host_header_are_used_when_the_event_has_no_domain() -> None:
    event = load_event("apigw-v2-post.json")
    del event["requestContext"]["domainName"]
    event["headers"] |= {"host": "127.0.0.1:3000", "x-forwarded-proto": "http"}
    _, delivery = _decode(event)
    assert delivery.url == "http://127.0.0.1:3000/webhooks/acme"


def _provider(**extra: Any) -> Any:
    config = {"scheme": "github", "secrets": [{"value": "s"}], **extra}
    return parse_config({"providers": {"p": config}})["p"]


def test_public_url_replaces_the_rebuilt_url_and_keeps_the_query() -> None:
    provider = _provider(public_url="https://hooks.example.com/in/p")
    delivery = Delivery({}, b"{}", url="https://abc.execute-api.x/prod/webhooks/p?q=1&r=%20")
    assert provider.as_called(delivery).url == "https://hooks.example.com/in/p?q=1&r=%20"
    assert provider.as_called(Delivery({}, b"{}", url="https://a/b")).url == (
        "https://hooks.example.com/in/p"
    )
    assert _provider().as_called(delivery) is delivery


def test_a_public_url_with_a_query_is_kept_verbatim_plus_the_senders_own_parameters() -> None:
    # A REST API event has the query only as decoded, unordered parameters; ingest's re-encoding
    # of them ("b=x+y&a=%2F") is not what the provider called ("a=/&b=x%20y").
    provider = _provider(public_url="https://hooks.example.com/in/p?a=/&b=x%20y")
    rebuilt = "https://r1.execute-api.x/prod/webhooks/p?b=x+y&a=%2F"
    assert provider.as_called(Delivery({}, b"{}", url=rebuilt)).url == (
        "https://hooks.example.com/in/p?a=/&b=x%20y"
    )
    # A parameter the sender adds per request (Twilio's bodySHA256) follows, as it was sent.
    added = rebuilt + "&bodySHA256=ab%2Fcd&a=other"
    assert provider.as_called(Delivery({}, b"{}", url=added)).url == (
        "https://hooks.example.com/in/p?a=/&b=x%20y&bodySHA256=ab%2Fcd"
    )


@pytest.mark.parametrize(
    "bad",
    [
        "hooks.example.com/p",  # no scheme
        "ftp://hooks.example.com/p",
        "https:///p",  # no host
        "https://hooks.example.com/p#f",
        "https://hooks.example.com/p#",  # senders never send a fragment
        "https://hooks.example.com/p?",  # an empty query: say none
        42,
    ],
)
def test_public_url_must_be_an_absolute_http_url_without_fragment(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="public_url"):
        _provider(public_url=bad)


def test_a_handshake_reply_keeps_its_own_status_and_content_type() -> None:
    outcome = ingest.Outcome(ingest.Reply("challenge-text", 200, "text/plain"), "handshake")
    response = outcome.response()
    assert response["statusCode"] == 200
    assert response["headers"] == {"Content-Type": "text/plain"}
    assert response["body"] == "challenge-text"
    empty = ingest.Outcome(ingest.Reply("", 204), "handshake").response()
    assert (empty["statusCode"], empty["body"]) == (204, "")
    assert json.loads(ingest.Outcome(ingest._ACCEPTED, "accepted").response()["body"]) == {
        "status": "accepted"
    }
