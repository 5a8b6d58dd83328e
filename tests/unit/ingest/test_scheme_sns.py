"""AWS SNS (ingest/schemes/sns.py) with certificates from a test CA: the string to sign for each
message type and both signature versions, the topic allow-list and the certificate host checked
before anything is fetched, confirmations, raw delivery, and every refusal.

No library of AWS's signs SNS messages (only SNS does); these messages are signed by the
documented algorithm with a test key, and tests/unit/ingest/test_sns_aws_validator.py has AWS's
own validator verify the same construction."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cert_authority import SNS_CERT_URL, TOPIC, leaf
from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    InvalidPayload,
    SenderUnavailable,
    SignatureMismatch,
)
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.schemes import Delivery, Reply, certificate_fetch, certificates, sns

NOW = int(time.time())
PIN = leaf().pin(SNS_CERT_URL)


def scheme(**options: Any) -> schemes.Scheme:
    return schemes.build("sns", {"topic_arns": [TOPIC], **options})


def signed(body: dict[str, Any] | bytes = b"hello", **options: Any) -> dict[str, Any]:
    raw = json.dumps(body).encode() if isinstance(body, dict) else body
    made = scheme(**options).sign(PIN, raw, timestamp=NOW, event_id="m-1")
    return dict(json.loads(made.body))


def resign(message: dict[str, Any], key_pem: str | None = None) -> dict[str, Any]:
    """``message`` signed again after a test changed it (a sender's valid signature)."""
    digest = {"1": "sha1", "2": "sha256"}[message["SignatureVersion"]]
    signature = certificates.sign_rsa(
        key_pem or leaf().private_key_pem, sns.string_to_sign(message), digest=digest
    )
    return {**message, "Signature": base64.b64encode(signature).decode()}


def delivery(message: dict[str, Any], **headers: str) -> Delivery:
    return Delivery(headers, json.dumps(message).encode())


def verify(message: dict[str, Any], secrets: list[str] | None = None, **options: Any) -> Any:
    return scheme(**options).verify(
        delivery(message), [PIN] if secrets is None else secrets, now=NOW, tolerance=3600
    )


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every GET a test lets through is recorded; none reaches a network."""
    calls: list[str] = []

    def refuse(url: str, *, what: str, budget_s: float = 0, cause: str = "") -> bytes:
        calls.append(url)
        raise SenderUnavailable(f"{what}: no network in unit tests", cause=cause or "fetch_failed")

    monkeypatch.setattr(certificate_fetch, "https_get", refuse)
    certificate_fetch.CACHE.clear()
    yield calls
    certificate_fetch.CACHE.clear()


def test_the_string_to_sign_follows_the_documented_order() -> None:
    message = {
        "Type": "Notification",
        "MessageId": "id",
        "TopicArn": TOPIC,
        "Subject": "s",
        "Message": "m",
        "Timestamp": "t",
        "UnsubscribeURL": "not signed",
    }
    assert (
        sns.string_to_sign(message)
        == (
            f"Message\nm\nMessageId\nid\nSubject\ns\nTimestamp\nt\nTopicArn\n{TOPIC}\n"
            "Type\nNotification\n"
        ).encode()
    )
    del message["Subject"]
    assert b"Subject" not in sns.string_to_sign(message)
    confirmation = {
        **message,
        "Type": "SubscriptionConfirmation",
        "Token": "k",
        "SubscribeURL": "u",
    }
    assert (
        sns.string_to_sign(confirmation)
        == (
            f"Message\nm\nMessageId\nid\nSubscribeURL\nu\nTimestamp\nt\nToken\nk\nTopicArn\n{TOPIC}\n"
            "Type\nSubscriptionConfirmation\n"
        ).encode()
    )


@pytest.mark.parametrize("version", ["1", "2"])
def test_a_signed_notification_verifies_and_is_keyed_by_its_message_id(version: str) -> None:
    message = resign({**signed(), "SignatureVersion": version, "Subject": "Hi"})
    verified = verify(message)
    assert verified.signed_id == "m-1"
    identities = scheme().identify(delivery(message), verified.payload, verified)
    assert [(i.event_id, i.event_type) for i in identities] == [("m-1", "orders")]


def test_type_path_reads_the_type_from_a_json_message() -> None:
    message = resign({**signed(), "Message": json.dumps({"notificationType": "Bounce"})})
    verified = verify(message, type_path="notificationType")
    found = scheme(type_path="notificationType").identify(
        delivery(message), verified.payload, verified
    )
    assert [i.event_type for i in found] == ["Bounce"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("Message", "hello!"), ("MessageId", "m-2"), ("Timestamp", "2026-01-15T08:00:01.000Z"),
     ("Subject", "added")],
)  # fmt: skip
def test_a_changed_signed_field_fails(field: str, value: str) -> None:
    with pytest.raises(SignatureMismatch):
        verify({**signed(), field: value})


def test_unsigned_fields_may_change() -> None:
    message = {**signed(), "UnsubscribeURL": "https://elsewhere", "MessageAttributes": {"a": 1}}
    assert verify(message).signed_id == "m-1"


def test_a_topic_not_allowed_is_refused_before_any_fetch(no_network: list[str]) -> None:
    other = "arn:aws:sns:us-east-1:123456789012:other"
    message = resign({**signed(), "TopicArn": other})
    with pytest.raises(AuthenticationFailed, match="topic_arns"):
        verify(message, secrets=[])
    assert no_network == []


@pytest.mark.parametrize(
    "url",
    [
        "http://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
        "https://sns.us-east-1.amazonaws.com.evil.example/SimpleNotificationService-x.pem",
        "https://evil.example/sns.us-east-1.amazonaws.com/x.pem",
        "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-x.pem",  # other region
        "https://sns.us-east-1.amazonaws.com:8443/SimpleNotificationService-x.pem",
        "https://user@sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
        "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem?x=1",
        "https://sns.us-east-1.amazonaws.com/../etc/x.pem",
        "https://sns.us-east-1.amazonaws.com/x.txt",
        "",
    ],
)
def test_a_certificate_url_off_the_region_s_sns_host_is_refused_unfetched(
    url: str, no_network: list[str]
) -> None:
    with pytest.raises(AuthenticationFailed):
        verify({**signed(), "SigningCertURL": url}, secrets=[])
    assert no_network == []


def test_a_certificate_is_fetched_once_per_url(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[str] = []

    def download(url: str) -> bytes:
        served.append(url)
        der = certificates.first_certificate(leaf().certificate_pem)
        assert der is not None
        return der

    monkeypatch.setattr(certificates, "download_certificate", download)
    for _ in range(3):
        assert verify(signed(), secrets=[]).signed_id == "m-1"
    assert served == [SNS_CERT_URL]


def test_a_fetch_failure_is_503_and_remembered_briefly(no_network: list[str]) -> None:
    for _ in range(2):
        with pytest.raises(SenderUnavailable) as raised:
            verify(signed(), secrets=[])
        assert raised.value.cause == "fetch_failed"
    assert no_network == [SNS_CERT_URL]  # the second delivery did not wait on the dead host


def test_pinned_only_refuses_an_unpinned_certificate_with_503(no_network: list[str]) -> None:
    other_url = SNS_CERT_URL.replace("test0001", "test0002")
    message = resign({**signed(), "SigningCertURL": other_url})
    with pytest.raises(SenderUnavailable) as raised:
        verify(message, certificates="pinned")
    assert raised.value.cause == "not_pinned"
    assert no_network == []
    assert verify(signed(), certificates="pinned").signed_id == "m-1"


def test_a_certificate_of_another_key_fails() -> None:
    other = leaf("sns.amazonaws.com", days_valid=31)
    message = resign(signed(), other.private_key_pem)
    with pytest.raises(SignatureMismatch):
        verify(message)
    assert verify(message, secrets=[other.pin(SNS_CERT_URL)]).signed_id == "m-1"


@pytest.mark.parametrize(
    ("pinned", "match"),
    [
        (leaf(days_valid=1, starts_in_days=-400), "not valid now"),
        (leaf(starts_in_days=30000), "not valid now"),
        (leaf(kind="ec"), "RSA"),
    ],
)
def test_an_expired_not_yet_valid_or_non_rsa_certificate_is_refused(
    pinned: Any, match: str
) -> None:
    with pytest.raises(AuthenticationFailed, match=match):
        verify(signed(), secrets=[pinned.pin(SNS_CERT_URL, with_key=False)])


def test_a_message_outside_the_tolerance_is_stale() -> None:
    with pytest.raises(AuthenticationFailed) as raised:
        scheme().verify(delivery(signed()), [PIN], now=NOW + 3601, tolerance=3600)
    assert raised.value.reason == "stale"


def test_minimum_signature_version_2_refuses_sha1() -> None:
    message = resign({**signed(), "SignatureVersion": "1"})
    with pytest.raises(AuthenticationFailed, match="SignatureVersion"):
        verify(message, minimum_signature_version=2)


@pytest.mark.parametrize(
    "change",
    [
        {"Signature": "not base64!"},
        {"Signature": base64.b64encode(b"x" * 1025).decode()},
        {"Signature": ""},
        {"SignatureVersion": "3"},
        {"Type": "Other"},
        {"Timestamp": "yesterday"},
        {"Message": 5},
        {"MessageId": None},
    ],
)
def test_malformed_fields_are_401(change: dict[str, Any]) -> None:
    with pytest.raises(AuthenticationFailed):
        verify({**signed(), **change})


@pytest.mark.parametrize("body", [b"", b"[]", b"not json", b"\xff\xfe", b'{"Type":'])
def test_a_body_that_is_no_sns_message_is_401(body: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        scheme().verify(Delivery({}, body), [PIN], now=NOW, tolerance=3600)


def test_the_message_type_header_must_agree() -> None:
    message = signed()
    with pytest.raises(AuthenticationFailed):
        scheme().verify(
            delivery(message, **{"x-amz-sns-message-type": "SubscriptionConfirmation"}),
            [PIN],
            now=NOW,
            tolerance=3600,
        )


def confirmation(kind: str = "SubscriptionConfirmation", **fields: str) -> dict[str, Any]:
    subscribe = (
        "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription"
        f"&TopicArn={TOPIC}&Token=tok"
    )
    message = {
        "Type": kind,
        "Message": "You have chosen to subscribe",
        "Token": "tok",
        "SubscribeURL": subscribe,
        **fields,
    }
    return signed(message)


def test_a_subscription_confirmation_is_confirmed_and_not_stored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got: list[str] = []
    monkeypatch.setattr(
        certificate_fetch, "https_get", lambda url, **_: got.append(url) or b"<ok/>"
    )
    message = confirmation()
    verified = verify(message)
    answer = scheme().identify(delivery(message), verified.payload, verified)
    assert isinstance(answer, Reply)
    assert answer.status == 200
    assert got == [message["SubscribeURL"]]
    stored = scheme(store_confirmations=True).identify(
        delivery(message), verified.payload, verified
    )
    assert [i.event_type for i in stored] == ["SubscriptionConfirmation"]  # type: ignore[union-attr]


def test_a_confirmation_whose_get_fails_is_503(no_network: list[str]) -> None:
    message = confirmation()
    verified = verify(message)
    with pytest.raises(SenderUnavailable) as raised:
        scheme().identify(delivery(message), verified.payload, verified)
    assert raised.value.cause == "confirm_failed"
    assert no_network == [message["SubscribeURL"]]


@pytest.mark.parametrize(
    "url",
    [
        "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&Token=t",
        "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&Token=t",
        "https://evil.example/?Action=ConfirmSubscription",
    ],
)
def test_a_subscribe_url_elsewhere_is_never_called(url: str, no_network: list[str]) -> None:
    message = confirmation(SubscribeURL=url)
    verified = verify(message)
    with pytest.raises((InvalidPayload, AuthenticationFailed)):
        scheme().identify(delivery(message), verified.payload, verified)
    assert no_network == []


def test_an_unsubscribe_confirmation_is_answered_without_any_call(no_network: list[str]) -> None:
    message = confirmation("UnsubscribeConfirmation")
    verified = verify(message)
    answer = scheme().identify(delivery(message), verified.payload, verified)
    assert isinstance(answer, Reply)
    assert answer.status == 200
    assert no_network == []


RAW = {"x-amz-sns-rawdelivery": "true", "x-amz-sns-topic-arn": TOPIC, "x-amz-sns-message-id": "r1"}


def test_raw_delivery_is_refused_unless_the_user_accepts_it_unsigned() -> None:
    with pytest.raises(AuthenticationFailed, match="raw"):
        scheme().verify(Delivery(RAW, b"hi"), [], now=NOW, tolerance=3600)
    accepting = scheme(accept_unsigned_raw_delivery=True)
    raw = Delivery(RAW, b"hi")
    verified = accepting.verify(raw, [], now=NOW, tolerance=3600)
    payload = accepting.parse(raw)
    [identity] = accepting.identify(raw, payload, verified)  # type: ignore[misc]
    assert identity.event_id.startswith("sha256:")
    assert identity.delivery_id == "r1"
    assert payload["Message"] == "hi"
    foreign = {**RAW, "x-amz-sns-topic-arn": "arn:aws:sns:us-east-1:123456789012:other"}
    with pytest.raises(AuthenticationFailed):
        accepting.verify(Delivery(foreign, b"hi"), [], now=NOW, tolerance=3600)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"topic_arns": []},
        {"topic_arns": ["orders"]},
        {"topic_arns": [TOPIC], "certificates": "maybe"},
        {"topic_arns": [TOPIC], "minimum_signature_version": 3},
        {"topic_arns": [TOPIC], "store_confirmations": "yes"},
    ],
)
def test_bad_options_are_configuration_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        schemes.build("sns", options)


@pytest.mark.parametrize(
    "pin",
    [
        "no url\n" + leaf().certificate_pem,
        "url: https://evil.example/x.pem\n" + leaf().certificate_pem,
        f"url: {SNS_CERT_URL}\n-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n",
    ],
)
def test_a_malformed_pin_is_a_configuration_error(pin: str) -> None:
    with pytest.raises(ConfigurationError):
        scheme().check_secret(pin)


def test_fetch_mode_needs_no_secret_pinned_mode_does() -> None:
    assert scheme().requires_secrets is False
    assert scheme(certificates="pinned").requires_secrets is True
    with pytest.raises(ConfigurationError, match="only verifies"):
        scheme().sign(leaf().pin(SNS_CERT_URL, with_key=False), b"x", timestamp=NOW)
