"""Plaid: ``Plaid-Verification`` tokens as Plaid's documentation builds them (ES256, ``kid``,
``iat``, ``request_body_sha256``), minted by PyJWT (an independent JOSE implementation: Plaid's
own plaid-python only wraps ``/webhook_verification_key/get`` and verifies nothing), verified
here; and what ``sign`` makes verifies in PyJWT. Each documented check refuses its forgery."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from tests.token_keys import ec_key, pem_private, private_jwk_text, public_jwk, rsa_key
from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    SenderUnavailable,
    SignatureMismatch,
)
from webhook_inbox.ingest.schemes import Delivery, Verified, build, jose

KID = "plaid-test-1"
NOW = int(time.time())
# Plaid pretty-prints with two spaces: the digest covers exactly these bytes.
BODY = json.dumps(
    {
        "environment": "sandbox",
        "item_id": "wz666MBjYWTp2PDzzggYhM6oWWmBb",
        "new_transactions": 3,
        "webhook_code": "DEFAULT_UPDATE",
        "webhook_type": "TRANSACTIONS",
    },
    indent=2,
).encode()


def token(
    body: bytes = BODY, *, kid: str = KID, key: Any = None, algorithm: str = "ES256", **claims: Any
) -> str:
    found = {"iat": NOW, "request_body_sha256": hashlib.sha256(body).hexdigest()} | claims
    found = {k: v for k, v in found.items() if v is not None}
    signing_key = key if key is not None else pem_private(ec_key(kid))
    return pyjwt.encode(found, signing_key, algorithm=algorithm, headers={"kid": kid})


def pins(kid: str = KID, **extra: Any) -> list[str]:
    return [json.dumps(public_jwk(kid, "ec") | extra)]


def verify(header: str, body: bytes = BODY, secrets: list[str] | None = None) -> Verified:
    return build("plaid").verify(
        Delivery({"Plaid-Verification": header}, body),
        pins() if secrets is None else secrets,
        now=NOW,
        tolerance=300,
    )


def test_a_plaid_token_verifies_and_the_key_is_the_signed_body_digest() -> None:
    verified = verify(token())
    assert verified.timestamp == NOW
    (identity,) = build("plaid").identify(Delivery({}, BODY), json.loads(BODY), verified)
    assert identity.event_type == "TRANSACTIONS.DEFAULT_UPDATE"
    assert identity.event_id.startswith("sha256:")
    # A retry: the same body under a new token, a minute later, is the same event.
    retry = token(iat=NOW + 60)
    again = build("plaid").verify(
        Delivery({"Plaid-Verification": retry}, BODY), pins(), now=NOW + 60, tolerance=300
    )
    (same,) = build("plaid").identify(Delivery({}, BODY), json.loads(BODY), again)
    assert same.event_id == identity.event_id


def test_another_body_under_a_captured_token_is_refused() -> None:
    reformatted = json.dumps(json.loads(BODY)).encode()  # the same JSON, other bytes
    with pytest.raises(AuthenticationFailed, match="request_body_sha256"):
        verify(token(), reformatted)


@pytest.mark.parametrize(
    "claims",
    [
        {"request_body_sha256": None},
        {"request_body_sha256": "ABC"},
        {"request_body_sha256": hashlib.sha256(BODY).hexdigest().upper()},
        {"iat": None},
        {"iat": "now"},
    ],
)
def test_missing_or_malformed_claims_are_refused(claims: dict[str, Any]) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(token(**claims))


def test_iat_older_than_five_minutes_is_stale() -> None:
    verify(token(iat=NOW - 299))
    for iat in (NOW - 301, NOW + 301):
        with pytest.raises(AuthenticationFailed) as raised:
            verify(token(iat=iat))
        assert raised.value.reason == "stale"


def test_another_key_under_the_pinned_kid_is_a_mismatch() -> None:
    with pytest.raises(SignatureMismatch):
        verify(token(key=pem_private(ec_key("attacker"))))


@pytest.mark.parametrize("algorithm", ["HS256", "RS256", "ES384", "none"])
def test_only_es256_is_accepted(algorithm: str) -> None:
    key: Any = {
        # PyJWT refuses to key an HMAC with a public key: the forgery is built by hand below.
        "HS256": b"u" * 32,
        "RS256": pem_private(rsa_key("plaid-rsa")),
        "ES384": pem_private(ec.generate_private_key(ec.SECP384R1())),
        "none": None,
    }[algorithm]
    forged = pyjwt.encode(
        {"iat": NOW, "request_body_sha256": hashlib.sha256(BODY).hexdigest()},
        key,
        algorithm=algorithm,
        headers={"kid": KID},
    )
    if algorithm == "HS256":  # the classic confusion: an HMAC keyed with the public key
        import hmac

        signing_input = forged.rsplit(".", 1)[0]
        mac = hmac.new(pins()[0].encode(), signing_input.encode(), hashlib.sha256).digest()
        forged = f"{signing_input}.{jose.b64url_encode(mac)}"
    with pytest.raises(AuthenticationFailed, match="alg"):
        verify(forged)


def test_a_kid_nobody_pinned_is_a_503_that_pages() -> None:
    with pytest.raises(SenderUnavailable) as raised:
        verify(token(kid="plaid-rotated"))
    assert raised.value.cause == "not_pinned"


def test_a_pinned_key_past_its_expired_at_verifies_nothing() -> None:
    with pytest.raises(AuthenticationFailed, match="expired"):
        verify(token(), secrets=pins(expired_at=NOW - 1))
    verify(token(), secrets=pins(expired_at=NOW + 3600))


@pytest.mark.parametrize(
    "header", ["", "a.b", "a.b.c", "x" * 5000, token().replace(".", "..", 1), token() + "="]
)
def test_malformed_or_oversized_headers_are_401(header: str) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(header)


def test_pins_are_p256_jwks_with_a_kid() -> None:
    scheme = build("plaid")
    scheme.check_secret(pins()[0])
    no_kid = {k: v for k, v in public_jwk(KID, "ec").items() if k != "kid"}
    for bad in (json.dumps(public_jwk("r", "rsa")), "{}", "not json", json.dumps(no_kid)):
        with pytest.raises(ConfigurationError):
            scheme.check_secret(bad)


def test_what_sign_makes_verifies_in_pyjwt() -> None:
    signed = build("plaid").sign(private_jwk_text(KID, "ec"), BODY, timestamp=NOW)
    header = signed.headers["Plaid-Verification"]
    assert pyjwt.get_unverified_header(header)["kid"] == KID
    public = pyjwt.PyJWK(public_jwk(KID, "ec")).key
    claims = pyjwt.decode(header, public, algorithms=["ES256"])
    assert claims["request_body_sha256"] == hashlib.sha256(BODY).hexdigest()
    verify(header)
    assert jose.parse_compact(header, "t", max_chars=4096, algorithms=frozenset({"ES256"}))
