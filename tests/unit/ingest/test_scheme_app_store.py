"""App Store Server Notifications V2 against Apple's own app-store-server-library
(``SignedDataVerifier``, offline, with a test root CA made here): what our ``sign`` makes, Apple's
verifier accepts and decodes to the same notification; every chain, OID, date, app and signature
forgery is refused by both. The nested transaction and renewal info are verified too (the
library does so only when asked, one by one)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from typing import Any

import pytest
from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier, VerificationException

from tests.token_keys import Chain, chain
from webhook_inbox.errors import AuthenticationFailed, ConfigurationError, SignatureMismatch
from webhook_inbox.ingest.schemes import Delivery, build, jose
from webhook_inbox.ingest.schemes.app_store import APPLE_ROOT_CA_G3, AppStore

BUNDLE = "com.example.app"
NOW = int(time.time())
OPTIONS = {"bundle_id": BUNDLE, "environment": "Sandbox"}


def notification(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "notificationType": "SUBSCRIBED",
        "subtype": "INITIAL_BUY",
        "notificationUUID": str(uuid.uuid4()),
        "version": "2.0",
        "signedDate": NOW * 1000,
        "data": {
            "appAppleId": 1234,
            "bundleId": BUNDLE,
            "bundleVersion": "1.0",
            "environment": "Sandbox",
            "status": 1,
            "transactionInfo": {
                "transactionId": "2000000000000001",
                "originalTransactionId": "2000000000000001",
                "bundleId": BUNDLE,
                "productId": "com.example.monthly",
                "environment": "Sandbox",
                "type": "Auto-Renewable Subscription",
            },
            "renewalInfo": {
                "originalTransactionId": "2000000000000001",
                "autoRenewProductId": "com.example.monthly",
                "autoRenewStatus": 1,
                "environment": "Sandbox",
            },
        },
    }
    document.update(changes)
    return document


def signed_body(document: dict[str, Any], used: Chain | None = None) -> bytes:
    return (
        build("app-store", OPTIONS)
        .sign((used or chain()).pin(), json.dumps(document).encode(), timestamp=NOW)
        .body
    )


def verify(body: bytes, roots: Chain | None = None, **options: Any) -> Any:
    scheme = build("app-store", OPTIONS | options)
    return scheme.verify(
        Delivery({}, body), [(roots or chain()).pin(with_key=False)], now=NOW, tolerance=0
    )


def apple_verifier(used: Chain | None = None) -> SignedDataVerifier:
    return SignedDataVerifier([(used or chain()).root_der()], False, Environment.SANDBOX, BUNDLE)


def signed_payload(body: bytes) -> str:
    return str(json.loads(body)["signedPayload"])


def test_the_embedded_root_is_apple_root_ca_g3_by_its_published_fingerprint() -> None:
    from cryptography import x509

    digest = hashlib.sha256(APPLE_ROOT_CA_G3).hexdigest()
    assert digest == "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179"
    root = x509.load_der_x509_certificate(APPLE_ROOT_CA_G3)
    assert root.subject.rfc4514_string() == (
        "C=US,O=Apple Inc.,OU=Apple Certification Authority,CN=Apple Root CA - G3"
    )


def test_a_notification_verifies_here_and_in_apples_library_alike() -> None:
    document = notification()
    body = signed_body(document)
    verified = verify(body)
    decoded = apple_verifier().verify_and_decode_notification(signed_payload(body))
    assert verified.signed_id == decoded.notificationUUID == document["notificationUUID"]
    (identity,) = build("app-store", OPTIONS).identify(
        Delivery({}, body), verified.payload, verified
    )
    assert identity.event_type == "SUBSCRIBED.INITIAL_BUY"
    # The nested JWS, verified here and in Apple's library, are stored decoded beside them.
    data = verified.payload["data"]
    transaction = apple_verifier().verify_and_decode_signed_transaction(
        data["signedTransactionInfo"]
    )
    assert data["transactionInfo"]["transactionId"] == transaction.transactionId
    renewal = apple_verifier().verify_and_decode_renewal_info(data["signedRenewalInfo"])
    assert data["renewalInfo"]["autoRenewProductId"] == renewal.autoRenewProductId


def test_without_pins_only_apples_root_is_trusted() -> None:
    scheme = build("app-store", OPTIONS)
    with pytest.raises(AuthenticationFailed, match="trusted root"):
        scheme.verify(Delivery({}, signed_body(notification())), [], now=NOW, tolerance=0)


def both_refuse(body: bytes, match: str, used: Chain | None = None) -> None:
    with pytest.raises(AuthenticationFailed, match=match):
        verify(body, used)
    with pytest.raises(VerificationException):
        apple_verifier(used).verify_and_decode_notification(signed_payload(body))


def test_a_chain_to_another_root_is_refused() -> None:
    body = signed_body(notification(), chain("other"))
    with pytest.raises(AuthenticationFailed, match="trusted root"):
        verify(body)
    with pytest.raises(VerificationException):
        apple_verifier().verify_and_decode_notification(signed_payload(body))


def test_a_leaf_without_apples_oid_is_refused() -> None:
    both_refuse(
        signed_body(notification(), chain("no-leaf-oid", leaf_oid=False)),
        "OID",
        chain("no-leaf-oid", leaf_oid=False),
    )


def test_an_intermediate_without_apples_oid_is_refused() -> None:
    used = chain("no-int-oid", intermediate_oid=False)
    with pytest.raises(AuthenticationFailed, match="OID"):
        verify(signed_body(notification(), used), used)
    with pytest.raises(VerificationException):
        apple_verifier(used).verify_and_decode_notification(
            signed_payload(signed_body(notification(), used))
        )


def test_a_leaf_not_valid_at_signed_date_is_refused() -> None:
    used = chain("expired", leaf_days=(-30, -1))
    body = signed_body(notification(), used)
    with pytest.raises(AuthenticationFailed, match="signedDate"):
        verify(body, used)
    with pytest.raises(VerificationException):
        apple_verifier(used).verify_and_decode_notification(signed_payload(body))
    # Judged at signedDate, not now: a retry of an old notification still verifies.
    old_ms = (NOW - 10 * 86400) * 1000
    document = notification(signedDate=old_ms)
    for nested in ("transactionInfo", "renewalInfo"):
        document["data"][nested]["signedDate"] = old_ms
    verify(signed_body(document, used), used)


def test_another_apps_or_environments_notification_is_refused() -> None:
    both_refuse(
        signed_body(notification(data={**notification()["data"], "bundleId": "com.evil"})),
        "bundleId",
    )
    with pytest.raises(AuthenticationFailed, match="environment"):
        verify(signed_body(notification()), environment="Production")
    with pytest.raises(AuthenticationFailed, match="appAppleId"):
        verify(signed_body(notification()), app_apple_id=999)


def test_a_tampered_payload_is_a_mismatch() -> None:
    token = signed_payload(signed_body(notification()))
    header, payload, signature = token.split(".")
    changed = json.loads(jose.b64url_decode(payload, "p"))
    changed["notificationType"] = "REFUND"
    forged = f"{header}.{jose.b64url_encode(json.dumps(changed).encode())}.{signature}"
    with pytest.raises(SignatureMismatch):
        verify(json.dumps({"signedPayload": forged}).encode())
    with pytest.raises(VerificationException):
        apple_verifier().verify_and_decode_notification(forged)


def test_a_forged_nested_transaction_is_refused() -> None:
    """The outer signature is Apple's, the nested transaction is signed by another chain."""
    forged_transaction = signed_payload(signed_body(notification(), chain("other")))
    document = notification()
    document["data"].pop("transactionInfo")
    body = json.loads(signed_body(document))
    outer = json.loads(jose.b64url_decode(body["signedPayload"].split(".")[1], "p"))
    outer["data"]["signedTransactionInfo"] = forged_transaction
    outer["data"].pop("signedRenewalInfo")
    resigned = build("app-store", OPTIONS).sign(
        chain().pin(), json.dumps(outer).encode(), timestamp=NOW
    )
    with pytest.raises(AuthenticationFailed, match="trusted root"):
        verify(resigned.body)


def test_a_nested_transaction_of_another_app_is_refused() -> None:
    document = notification()
    document["data"]["transactionInfo"]["bundleId"] = "com.evil"
    with pytest.raises(AuthenticationFailed, match="signedTransactionInfo"):
        verify(signed_body(document))


@pytest.mark.parametrize(
    "header_change",
    [
        {"alg": "ES384"},
        {"alg": "none"},
        {"x5c": []},
        {"x5c": "not a list"},
        {"crit": ["b64"]},
    ],
)
def test_malformed_headers_are_refused(header_change: dict[str, Any]) -> None:
    token = signed_payload(signed_body(notification()))
    header, payload, signature = token.split(".")
    decoded = json.loads(jose.b64url_decode(header, "h")) | header_change
    changed = f"{jose.b64url_encode(json.dumps(decoded).encode())}.{payload}.{signature}"
    with pytest.raises(AuthenticationFailed):
        verify(json.dumps({"signedPayload": changed}).encode())


def test_a_two_certificate_chain_is_refused() -> None:
    token = signed_payload(signed_body(notification()))
    header, payload, signature = token.split(".")
    decoded = json.loads(jose.b64url_decode(header, "h"))
    decoded["x5c"] = decoded["x5c"][:2]
    changed = f"{jose.b64url_encode(json.dumps(decoded).encode())}.{payload}.{signature}"
    both_refuse(json.dumps({"signedPayload": changed}).encode(), "three")


@pytest.mark.parametrize(
    "body",
    [b"", b"[]", b'{"signedPayload": 1}', b'{"signedPayload": "a.b"}', b'{"other": "x"}',
     json.dumps({"signedPayload": "a." * 200_000}).encode()],
)  # fmt: skip
def test_malformed_or_oversized_bodies_are_401(body: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(body)


def test_pins_are_roots_or_development_chains() -> None:
    scheme = build("app-store", OPTIONS)
    scheme.check_secret(chain().pin(with_key=False))
    scheme.check_secret(chain().pin())
    two = "".join(chain().pin().split("-----END CERTIFICATE-----")[i] + "-----END CERTIFICATE-----"
                  for i in (0, 1))  # fmt: skip
    for bad in (
        "",
        "not a certificate",
        two,
        two + chain().pin().split("-----END CERTIFICATE-----")[-1],
    ):
        with pytest.raises(ConfigurationError):
            scheme.check_secret(bad)
    with pytest.raises(ConfigurationError):
        AppStore({"bundle_id": BUNDLE, "environment": "Staging"})
    with pytest.raises(ConfigurationError):
        AppStore({})


def test_x5c_entries_are_standard_base64_der() -> None:
    token = signed_payload(signed_body(notification()))
    header = json.loads(jose.b64url_decode(token.split(".")[0], "h"))
    assert [base64.b64decode(c)[:1] for c in header["x5c"]] == [b"\x30"] * 3
