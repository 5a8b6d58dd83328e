"""The presets that are more than a configuration (Zendesk's ISO timestamp, DocuSign's header per
key, Telegram's token) and the preset-specific identity rules, each failure mode it handles."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from webhook_inbox.errors import AuthenticationFailed, ConfigurationError, InvalidPayload
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.providers import parse_config
from webhook_inbox.ingest.schemes import Delivery
from webhook_inbox.ingest.schemes.zendesk import iso_seconds

# Zendesk's documented example: secret, body and timestamp (its older page's signature).
ZD_SECRET = "HRkRd4BeOAoUkfZr-mhauJT64rvBASlJRoIyPsd3zeA="
ZD_BODY = b'{"say": "hello"}'
ZD_STAMP = "2021-07-25T10:00:00Z"
ZD_OLD_PAGE_SIGNATURE = "tRDSF7URY8BLCDlaBcQ7FHu051Zk+aAB0NKMP53teMw="


def zendesk_headers(signature: str, stamp: str = ZD_STAMP) -> dict[str, str]:
    return {
        "x-zendesk-webhook-signature": signature,
        "x-zendesk-webhook-signature-timestamp": stamp,
    }


def test_zendesk_signs_the_timestamp_then_the_body_as_its_current_page_says() -> None:
    now = iso_seconds(ZD_STAMP)
    current = base64.b64encode(
        hmac.new(ZD_SECRET.encode(), ZD_STAMP.encode() + ZD_BODY, hashlib.sha256).digest()
    ).decode()
    zendesk = schemes.build("zendesk")
    verified = zendesk.verify(
        Delivery(zendesk_headers(current), ZD_BODY), [ZD_SECRET], now=now, tolerance=300
    )
    assert verified.timestamp == 1627207200
    # The older page's example (body, then timestamp) is the other construction: refused. If
    # Zendesk's deliveries ever all fail with reason signature, this is the discrepancy.
    with pytest.raises(AuthenticationFailed):
        zendesk.verify(
            Delivery(zendesk_headers(ZD_OLD_PAGE_SIGNATURE), ZD_BODY),
            [ZD_SECRET],
            now=now,
            tolerance=300,
        )


@pytest.mark.parametrize(
    "stamp",
    ["1627207200", "2021-07-25 10:00:00Z", "2021-07-25T10:00:00", "2021-07-25T10:00:00+00:00",
     "2021-02-30T10:00:00Z", "2021-13-01T10:00:00Z", "2021-07-25T24:00:00Z", "",
     "2021-07-25T10:00:60Z"],
)  # fmt: skip
def test_a_zendesk_timestamp_that_is_not_iso_utc_is_a_401(stamp: str) -> None:
    with pytest.raises(AuthenticationFailed) as failure:
        iso_seconds(stamp)
    assert failure.value.reason == "signature"


def test_a_zendesk_timestamp_with_milliseconds_is_read_to_the_second() -> None:
    assert iso_seconds("2021-07-25T10:00:00.123Z") == iso_seconds(ZD_STAMP)


def docusign_signature(key: str, body: bytes) -> str:
    return base64.b64encode(hmac.new(key.encode(), body, hashlib.sha256).digest()).decode()


def test_docusign_verifies_when_any_of_its_per_key_headers_matches_any_key() -> None:
    body = b'{"event":"envelope-sent","retryCount":0,"data":{"envelopeId":"e1"}}'
    headers = {
        "X-DocuSign-Signature-1": docusign_signature("old-key", body),
        "X-DocuSign-Signature-2": docusign_signature("new-key", body),
    }
    docusign = schemes.build("docusign")
    for keys in (["new-key"], ["old-key"], ["other", "new-key"]):
        verified = docusign.verify(Delivery(headers, body), keys, now=0, tolerance=300)
        assert verified.secret in keys
    with pytest.raises(AuthenticationFailed):
        docusign.verify(Delivery(headers, body), ["other"], now=0, tolerance=300)


def test_docusign_refuses_more_signature_headers_than_keys_anyone_holds() -> None:
    body = b"{}"
    headers = {f"x-docusign-signature-{n}": docusign_signature("k", body) for n in range(1, 18)}
    with pytest.raises(AuthenticationFailed, match="too many"):
        schemes.build("docusign").verify(Delivery(headers, body), ["k"], now=0, tolerance=300)
    lookalike = {"x-docusign-signature-0": docusign_signature("k", body)}
    with pytest.raises(AuthenticationFailed, match="missing"):
        schemes.build("docusign").verify(Delivery(lookalike, body), ["k"], now=0, tolerance=300)


def test_a_docusign_event_and_its_retries_share_a_key_and_other_envelopes_do_not() -> None:
    docusign = schemes.build("docusign")
    first: dict[str, Any] = {
        "event": "envelope-sent",
        "retryCount": 0,
        "data": {"envelopeId": "e1"},
    }
    keys = [
        docusign.identify(Delivery({}, b""), doc, schemes.Verified())[0].event_id
        for doc in (first, {**first, "retryCount": 3}, {**first, "data": {"envelopeId": "e2"}})
    ]
    assert keys[0] == keys[1] != keys[2]


@pytest.mark.parametrize("token", ["", "a" * 257, "has space", "sl/ash", "dé"])
def test_a_telegram_secret_token_outside_telegrams_alphabet_is_refused_at_load(token: str) -> None:
    config = {"providers": {"bot": {"scheme": "telegram", "secrets": [{"value": token}]}}}
    with pytest.raises(ConfigurationError):
        parse_config(config)


def test_telegram_compares_the_token_and_keys_by_update_id_typed_by_its_one_field() -> None:
    telegram = schemes.build("telegram")
    body = b'{"update_id":10001,"callback_query":{"id":"1","data":"ok"}}'
    token = {"x-telegram-bot-api-secret-token": "Tok_en-1"}
    verified = telegram.verify(Delivery(token, body), ["other", "Tok_en-1"], now=0, tolerance=1)
    assert verified.secret == "Tok_en-1"
    (identity,) = telegram.identify(Delivery(token, body), json.loads(body), verified)
    assert (identity.event_id, identity.event_type) == ("10001", "callback_query")
    with pytest.raises(AuthenticationFailed):
        telegram.verify(Delivery({**token, "x-telegram-bot-api-secret-token": "Tok_en-2"}, body),
                        ["Tok_en-1"], now=0, tolerance=1)  # fmt: skip


@pytest.mark.parametrize(
    "update",
    [{"update_id": 1}, {"update_id": 1, "message": {}, "edited_message": {}},
     {"update_id": "1", "message": {}}, {"update_id": True, "message": {}}, {"message": {}}],
)  # fmt: skip
def test_a_telegram_update_without_one_id_and_one_field_is_a_400(update: dict[str, Any]) -> None:
    with pytest.raises(InvalidPayload):
        schemes.build("telegram").identify(Delivery({}, b""), update, schemes.Verified())


@pytest.mark.parametrize(
    ("name", "header", "header_value", "payload", "event_type"),
    [
        ("gitea", "x-gitea-event", "issues", {"action": "opened"}, "issues.opened"),
        ("gitea", "x-gitea-event", "push", {"ref": "refs/heads/main"}, "push"),
        ("sentry", "sentry-hook-resource", "issue", {"action": "resolved"}, "issue.resolved"),
        ("bitbucket", "x-event-key", "repo:push", {}, "repo:push"),
        ("woocommerce", "x-wc-webhook-topic", "order.created", {"id": 1}, "order.created"),
    ],
)
def test_a_type_from_a_header_is_refined_by_the_signed_action_where_the_sender_has_one(
    name: str, header: str, header_value: str, payload: dict[str, Any], event_type: str
) -> None:
    body = json.dumps(payload).encode()
    (identity,) = schemes.build(name).identify(
        Delivery({header: header_value}, body), payload, schemes.Verified()
    )
    assert identity.event_type == event_type
    assert identity.event_id == schemes.body_digest_id(event_type, body)


def test_replicate_types_a_prediction_by_its_status() -> None:
    payload = {"id": "p1", "status": "succeeded"}
    (identity,) = schemes.build("replicate").identify(
        Delivery({}, b""), payload, schemes.Verified(signed_id="msg_1")
    )
    assert (identity.event_id, identity.event_type) == ("msg_1", "prediction.succeeded")


def test_presets_take_no_options_and_polar_needs_a_secret() -> None:
    for name in ("clerk", "intercom", "calendly", "zendesk", "docusign", "telegram"):
        with pytest.raises(ConfigurationError):
            schemes.build(name, {"signature_header": "X-Other"})
    with pytest.raises(ConfigurationError, match="polar: empty secret"):
        schemes.build("polar").check_secret("")
