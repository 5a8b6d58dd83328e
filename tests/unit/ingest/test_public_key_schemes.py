"""Public-key schemes without I/O: Standard Webhooks v1a, Discord and SendGrid.

Oracles both ways: PyNaCl (libsodium, what Discord's own library verifies with) signs Ed25519
deliveries that we verify, discord-interactions' ``verify_key`` and SendGrid's ``EventWebhook``
verify what we sign. Known answers: RFC 8032's Ed25519 test vectors for the key handling and
SendGrid's published Event Webhook vector for the whole scheme.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import nacl.signing
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from discord_interactions import verify_key
from sendgrid.helpers.eventwebhook import EventWebhook

from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    InvalidPayload,
    SignatureMismatch,
)
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.providers import parse_config, sign_delivery
from webhook_inbox.ingest.schemes import Delivery, public_keys

NOW = 1_700_000_000

# RFC 8032 section 7.1, TEST 1 and TEST 2: (seed, public key, message, signature).
RFC8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
]

# SendGrid's published Event Webhook vector (sendgrid-python test/unit/test_eventwebhook.py).
SG_KEY = (
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw"
    "+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="
)
SG_TIMESTAMP = "1600112502"
SG_SIGNATURE = (
    "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtE"
    "ZtM="
)
SG_BODY = (
    b'[{"email":"hello@world.com","event":"dropped","reason":"Bounced Address",'
    b'"sg_event_id":"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA",'
    b'"sg_message_id":"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0",'
    b'"smtp-id":"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>","timestamp":1600112492}]'
    b"\r\n"
)
SG_HEADERS = {
    "x-twilio-email-event-webhook-signature": SG_SIGNATURE,
    "x-twilio-email-event-webhook-timestamp": SG_TIMESTAMP,
}


def pem(key: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def spki_b64(key: ec.EllipticCurvePublicKey) -> str:
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode()


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


SEED = bytes(range(32))
NACL_KEY = nacl.signing.SigningKey(SEED)
WHSK = "whsk_" + base64.b64encode(SEED).decode()
WHPK = "whpk_" + base64.b64encode(bytes(NACL_KEY.verify_key)).decode()
DISCORD_PUBLIC = bytes(NACL_KEY.verify_key).hex()
DISCORD_PEM = pem(ed25519.Ed25519PrivateKey.from_private_bytes(SEED))
SG_PRIVATE = ec.derive_private_key(12345678901234567890, ec.SECP256R1())
SG_PEM = pem(SG_PRIVATE)
SG_PUBLIC = spki_b64(SG_PRIVATE.public_key())


# --- the key handling (public_keys.py) ----------------------------------------------------


@pytest.mark.parametrize(("seed", "public", "message", "signature"), RFC8032)
def test_rfc8032_vectors_sign_and_verify(
    seed: str, public: str, message: str, signature: str
) -> None:
    private = public_keys.ed25519_private_from_seed(bytes.fromhex(seed), "test")
    assert private.public == public_keys.ed25519_public(bytes.fromhex(public), "test")
    assert private.sign(bytes.fromhex(message)).hex() == signature
    keys = [public_keys.ed25519_public(bytes.fromhex(public), "test")]
    assert public_keys.verified_index(keys, bytes.fromhex(message), [bytes.fromhex(signature)]) == 0
    assert public_keys.verified_index(keys, b"other", [bytes.fromhex(signature)]) is None


def test_verified_index_names_the_first_key_that_verifies_any_signature() -> None:
    one, two = (ed25519.Ed25519PrivateKey.generate() for _ in range(2))
    keys = [
        public_keys.ed25519_public(k.public_key().public_bytes_raw(), "test") for k in (one, two)
    ]
    garbage = bytes(64)
    assert public_keys.verified_index(keys, b"m", [garbage, two.sign(b"m")]) == 1
    assert public_keys.verified_index(keys, b"m", [one.sign(b"m"), two.sign(b"m")]) == 0
    assert public_keys.verified_index(keys, b"m", [garbage]) is None


def test_p256_public_key_check_agrees_with_the_library() -> None:
    for _ in range(20):
        key = ec.generate_private_key(ec.SECP256R1()).public_key()
        der = base64.b64decode(spki_b64(key))
        parsed = public_keys.p256_public(der, "test")
        loaded = serialization.load_der_public_key(parsed.data)
        assert isinstance(loaded, ec.EllipticCurvePublicKey)
        assert loaded.public_numbers() == key.public_numbers()
    # The same point with y + 1 is off the curve: refused by us and by the library.
    der = bytearray(base64.b64decode(SG_KEY))
    der[-1] ^= 0x01
    with pytest.raises(ConfigurationError, match="not on the P-256 curve"):
        public_keys.p256_public(bytes(der), "test")
    with pytest.raises(ValueError, match="Invalid key"):
        serialization.load_der_public_key(bytes(der))


@pytest.mark.parametrize(
    "key",
    [
        ec.generate_private_key(ec.SECP384R1()).public_key(),  # another curve
        ec.generate_private_key(ec.SECP256K1()).public_key(),
    ],
)
def test_p256_public_key_check_refuses_other_curves(key: ec.EllipticCurvePublicKey) -> None:
    with pytest.raises(ConfigurationError, match="not an ECDSA P-256 public key"):
        public_keys.p256_public(base64.b64decode(spki_b64(key)), "test")


def test_compressed_p256_keys_are_refused_with_a_clear_error() -> None:
    key = SG_PRIVATE.public_key()
    point = key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
    )
    der = public_keys.P256_SPKI_PREFIX[:-3] + bytes([0x03, 0x22, 0x00]) + point
    with pytest.raises(ConfigurationError, match="uncompressed"):
        public_keys.p256_public(der, "test")


# --- Standard Webhooks v1a ----------------------------------------------------------------


def _v1a_headers(msg_id: str, timestamp: int, signature: bytes) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": "v1a," + base64.b64encode(signature).decode(),
    }


def test_v1a_signed_by_pynacl_verifies_with_the_whpk_public_key() -> None:
    body = b'{"type":"invoice.paid"}'
    signature = NACL_KEY.sign(f"msg_1.{NOW}.".encode() + body).signature
    headers = _v1a_headers("msg_1", NOW, signature)
    scheme = schemes.StandardWebhooks()
    verified = scheme.verify(Delivery(headers, body), [WHPK], now=NOW, tolerance=300)
    assert verified.signed_id == "msg_1"
    with pytest.raises(SignatureMismatch):
        scheme.verify(Delivery(headers, body + b" "), [WHPK], now=NOW, tolerance=300)


def test_v1a_signed_with_whsk_verifies_with_pynacl() -> None:
    body = b'{"type":"invoice.paid"}'
    headers = schemes.StandardWebhooks().sign(WHSK, body, event_id="msg_2", timestamp=NOW).headers
    version, _, value = headers["webhook-signature"].partition(",")
    assert version == "v1a"
    NACL_KEY.verify_key.verify(f"msg_2.{NOW}.".encode() + body, base64.b64decode(value))


def test_whsk_is_a_32_byte_seed_or_64_bytes_of_seed_and_its_public_key() -> None:
    scheme = schemes.StandardWebhooks()
    long_form = "whsk_" + base64.b64encode(bytes(NACL_KEY) + bytes(NACL_KEY.verify_key)).decode()
    body = b'{"type":"t"}'
    short = scheme.sign(WHSK, body, event_id="m", timestamp=NOW).headers
    assert scheme.sign(long_form, body, event_id="m", timestamp=NOW).headers == short
    other_public = bytes(nacl.signing.SigningKey(bytes(32)).verify_key)
    mismatched = "whsk_" + base64.b64encode(SEED + other_public).decode()
    # Its shape passes at load (no cryptography there); the mismatch shows on first use.
    scheme.check_secret(mismatched)
    with pytest.raises(ConfigurationError, match="public half"):
        scheme.sign(mismatched, body, event_id="m", timestamp=NOW)
    for bad, reason in [
        ("whsk_" + base64.b64encode(SEED[:31]).decode(), "32-byte seed"),
        ("whsk_!!!!", "not base64"),
        ("whpk_" + base64.b64encode(bytes(31)).decode(), "not 32 bytes"),
    ]:
        with pytest.raises(ConfigurationError, match=reason):
            scheme.check_secret(bad)


def test_one_provider_holds_hmac_secrets_and_public_keys_and_accepts_either_entry() -> None:
    hmac_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    scheme = schemes.StandardWebhooks()
    body = b'{"type":"t"}'
    for signer in (hmac_secret, WHSK):
        headers = scheme.sign(signer, body, event_id="m", timestamp=NOW).headers
        scheme.verify(Delivery(headers, body), [hmac_secret, WHPK], now=NOW, tolerance=300)
    # Both entries in one header (a sender moving from HMAC to Ed25519): either may match.
    v1 = scheme.sign(hmac_secret, body, event_id="m", timestamp=NOW).headers["webhook-signature"]
    v1a = scheme.sign(WHSK, body, event_id="m", timestamp=NOW).headers["webhook-signature"]
    both = {"webhook-id": "m", "webhook-timestamp": str(NOW), "webhook-signature": f"{v1} {v1a}"}
    scheme.verify(Delivery(both, body), [WHPK], now=NOW, tolerance=300)
    scheme.verify(Delivery(both, body), [hmac_secret], now=NOW, tolerance=300)
    # An entry of the other kind never verifies against a key it was not made with.
    only_v1a = {**both, "webhook-signature": v1a}
    with pytest.raises(SignatureMismatch):
        scheme.verify(Delivery(only_v1a, body), [hmac_secret], now=NOW, tolerance=300)


@pytest.mark.parametrize(
    "entry",
    [
        "v1a,",
        "v1a,AAAA",
        "v1a," + base64.b64encode(bytes(63)).decode(),
        "v1a," + base64.b64encode(bytes(64)).decode().rstrip("="),
        "v1a," + base64.b64encode(bytes(64)).decode() + "AAAA",
    ],
)
def test_malformed_v1a_entries_are_refused(entry: str) -> None:
    headers = {"webhook-id": "m", "webhook-timestamp": str(NOW), "webhook-signature": entry}
    with pytest.raises(AuthenticationFailed) as info:
        schemes.StandardWebhooks().verify(Delivery(headers, b"{}"), [WHPK], now=NOW, tolerance=300)
    assert not isinstance(info.value, SignatureMismatch)  # a format error, not a key miss


def test_a_whpk_public_key_cannot_sign() -> None:
    with pytest.raises(ConfigurationError, match="whpk_ public key only verifies"):
        schemes.StandardWebhooks().sign(WHPK, b"{}", event_id="m", timestamp=NOW)


# --- Discord ------------------------------------------------------------------------------

INTERACTIONS = schemes.Discord({"endpoint": "interactions"})
EVENTS = schemes.Discord({"endpoint": "webhook-events"})


def test_discord_signed_by_pynacl_verifies_with_the_hex_public_key() -> None:
    body = b'{"type":1,"id":"1","application_id":"2","token":"t","version":1}'
    timestamp = str(NOW)
    signature = NACL_KEY.sign(timestamp.encode() + body).signature.hex()
    headers = {"x-signature-ed25519": signature, "x-signature-timestamp": timestamp}
    assert verify_key(body, signature, timestamp, DISCORD_PUBLIC)  # the oracle agrees
    verified = INTERACTIONS.verify(
        Delivery(headers, body), [DISCORD_PUBLIC], now=NOW, tolerance=600
    )
    assert verified.timestamp == NOW


def test_discord_signed_by_us_verifies_with_discord_interactions() -> None:
    body = b'{"type":2,"id":"123","data":{"name":"hello"}}'
    headers = INTERACTIONS.sign(DISCORD_PEM, body, timestamp=NOW).headers
    assert set(headers) == {"X-Signature-Ed25519", "X-Signature-Timestamp"}
    assert verify_key(
        body, headers["X-Signature-Ed25519"], headers["X-Signature-Timestamp"], DISCORD_PUBLIC
    )
    # Signed over the timestamp's text then the body, nothing between.
    assert not verify_key(body, headers["X-Signature-Ed25519"], f"{NOW}.", DISCORD_PUBLIC)


@pytest.mark.parametrize(
    "signature",
    ["", "ab" * 63, "ab" * 65, "zz" * 64, " " + "ab" * 63 + "a", "0x" + "ab" * 63],
)
def test_discord_refuses_malformed_signatures_before_verifying(signature: str) -> None:
    headers = {"x-signature-ed25519": signature, "x-signature-timestamp": str(NOW)}
    with pytest.raises(AuthenticationFailed) as info:
        INTERACTIONS.verify(Delivery(headers, b"{}"), [DISCORD_PUBLIC], now=NOW, tolerance=600)
    assert not isinstance(info.value, SignatureMismatch)


def test_discord_tolerance_defaults_to_ten_minutes_both_ways() -> None:
    assert schemes.Discord.default_tolerance_s == 600
    body = b'{"type":1}'
    headers = lower(INTERACTIONS.sign(DISCORD_PEM, body, timestamp=NOW).headers)
    for now in (NOW - 600, NOW + 600):
        INTERACTIONS.verify(Delivery(headers, body), [DISCORD_PUBLIC], now=now, tolerance=600)
    for now in (NOW - 601, NOW + 601):
        with pytest.raises(AuthenticationFailed) as info:
            INTERACTIONS.verify(Delivery(headers, body), [DISCORD_PUBLIC], now=now, tolerance=600)
        assert info.value.reason == "stale"


def _identify(scheme: schemes.Scheme, payload: Any) -> Any:
    body = json.dumps(payload).encode()
    return scheme.identify(Delivery({}, body), payload, schemes.Verified())


def test_discord_interactions_ping_is_answered_with_pong() -> None:
    assert _identify(INTERACTIONS, {"type": 1, "id": "1"}) == schemes.Reply('{"type":1}')


def test_discord_interactions_are_keyed_by_id_and_acknowledged_with_a_deferral() -> None:
    command = {"type": 2, "id": "1130000000000000000", "data": {"name": "hello"}}
    (identity,) = _identify(INTERACTIONS, command)
    assert (identity.event_id, identity.event_type) == (command["id"], "APPLICATION_COMMAND")
    assert INTERACTIONS.acknowledge(command, new=True) == schemes.Reply('{"type":5}')
    assert INTERACTIONS.acknowledge(command, new=False) == schemes.Reply('{"type":5}')
    component = {"type": 3, "id": "2"}
    assert _identify(INTERACTIONS, component)[0].event_type == "MESSAGE_COMPONENT"
    assert INTERACTIONS.acknowledge(component, new=True) == schemes.Reply('{"type":6}')
    modal = {"type": 5, "id": "3"}
    assert _identify(INTERACTIONS, modal)[0].event_type == "MODAL_SUBMIT"
    assert _identify(INTERACTIONS, {"type": 9, "id": "4"})[0].event_type == "INTERACTION_TYPE_9"


def test_discord_autocomplete_is_answered_with_no_choices_and_not_stored() -> None:
    reply = _identify(INTERACTIONS, {"type": 4, "id": "5"})
    assert reply == schemes.Reply('{"type":8,"data":{"choices":[]}}')


@pytest.mark.parametrize(
    "payload", [{"id": "1"}, {"type": "2", "id": "1"}, {"type": True, "id": "1"}, {"type": 2}]
)
def test_discord_interactions_without_an_integer_type_or_an_id_are_a_400(
    payload: dict[str, Any],
) -> None:
    with pytest.raises(InvalidPayload):
        _identify(INTERACTIONS, payload)


def test_discord_webhook_events_ping_is_a_204_and_events_are_keyed_by_their_content() -> None:
    assert _identify(EVENTS, {"version": 1, "application_id": "1", "type": 0}) == schemes.Reply(
        "", 204
    )
    event = {
        "version": 1,
        "application_id": "1",
        "type": 1,
        "event": {"type": "APPLICATION_AUTHORIZED", "timestamp": "2024-10-18T14:42:53.064834"},
    }
    (identity,) = _identify(EVENTS, event)
    assert identity.event_type == "APPLICATION_AUTHORIZED"
    assert identity.event_id == schemes.content_digest_id(
        "APPLICATION_AUTHORIZED", event, without=()
    )
    respaced = json.loads(json.dumps(event, indent=4, sort_keys=True))
    assert _identify(EVENTS, respaced)[0].event_id == identity.event_id
    later = {**event, "event": {**event["event"], "timestamp": "2024-10-18T14:42:54.000000"}}
    assert _identify(EVENTS, later)[0].event_id != identity.event_id
    assert EVENTS.acknowledge(event, new=True) == schemes.Reply("", 204)
    assert EVENTS.acknowledge(event, new=False) == schemes.Reply("", 204)


@pytest.mark.parametrize(
    "payload", [{"type": 1}, {"type": 1, "event": "x"}, {"type": 2, "event": {"type": "X"}}]
)
def test_discord_webhook_events_of_another_shape_are_a_400(payload: dict[str, Any]) -> None:
    with pytest.raises(InvalidPayload):
        _identify(EVENTS, payload)


def test_discord_needs_its_endpoint_and_refuses_keys_it_cannot_use() -> None:
    for options in ({}, {"endpoint": "events"}):
        with pytest.raises(ConfigurationError, match="endpoint"):
            schemes.Discord(options)
    for bad in ("ab" * 31, "zz" * 32, "whpk_abc", pem(SG_PRIVATE), "-----BEGIN PRIVATE KEY-----"):
        with pytest.raises(ConfigurationError, match="discord"):
            INTERACTIONS.check_secret(bad)
    with pytest.raises(ConfigurationError, match="public key only verifies"):
        INTERACTIONS.sign(DISCORD_PUBLIC, b"{}", timestamp=NOW)


# --- SendGrid -----------------------------------------------------------------------------

SENDGRID = schemes.SendGrid()


def test_sendgrid_known_answer_verifies() -> None:
    verified = SENDGRID.verify(
        Delivery(SG_HEADERS, SG_BODY), [SG_KEY], now=int(SG_TIMESTAMP), tolerance=300
    )
    assert verified.timestamp == int(SG_TIMESTAMP)
    (identity,) = SENDGRID.identify(
        Delivery(SG_HEADERS, SG_BODY), SENDGRID.parse(Delivery(SG_HEADERS, SG_BODY)), verified
    )
    assert identity.event_id == "ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA"
    assert identity.event_type == "dropped"


@pytest.mark.parametrize(
    ("body", "headers", "key"),
    [
        (SG_BODY.rstrip(), SG_HEADERS, SG_KEY),  # without SendGrid's trailing CR LF
        (SG_BODY, {**SG_HEADERS, "x-twilio-email-event-webhook-timestamp": "1600112503"}, SG_KEY),
        (SG_BODY, SG_HEADERS, SG_PUBLIC),  # another key
    ],
)
def test_sendgrid_known_answer_fails_when_anything_signed_changes(
    body: bytes, headers: dict[str, str], key: str
) -> None:
    assert not EventWebhook().verify_signature(
        body.decode(),
        headers["x-twilio-email-event-webhook-signature"],
        headers["x-twilio-email-event-webhook-timestamp"],
        EventWebhook().convert_public_key_to_ecdsa(key),
    )
    with pytest.raises(SignatureMismatch):
        SENDGRID.verify(Delivery(headers, body), [key], now=int(SG_TIMESTAMP), tolerance=300)


def test_sendgrid_signed_by_us_verifies_with_the_sendgrid_library() -> None:
    body = b'[{"event":"delivered","sg_event_id":"a"}]\r\n'
    headers = SENDGRID.sign(SG_PEM, body, timestamp=NOW).headers
    webhook = EventWebhook(SG_PUBLIC)
    assert webhook.verify_signature(
        body.decode(),
        headers["X-Twilio-Email-Event-Webhook-Signature"],
        headers["X-Twilio-Email-Event-Webhook-Timestamp"],
    )


def test_sendgrid_signed_by_the_library_verifies_with_the_verification_key() -> None:
    body = b'[{"event":"open","sg_event_id":"b"}]'
    signature = SG_PRIVATE.sign(str(NOW).encode() + body, ec.ECDSA(hashes.SHA256()))
    headers = {
        "x-twilio-email-event-webhook-signature": base64.b64encode(signature).decode(),
        "x-twilio-email-event-webhook-timestamp": str(NOW),
    }
    SENDGRID.verify(Delivery(headers, body), [SG_PUBLIC], now=NOW, tolerance=300)
    SENDGRID.verify(Delivery(headers, body), [SG_PEM], now=NOW, tolerance=300)  # dev config


@pytest.mark.parametrize(
    "signature",
    ["", "AAAA", "not base64!", SG_SIGNATURE.rstrip("="), "A" * 100, SG_SIGNATURE + "AAAA" * 10],
)
def test_sendgrid_refuses_malformed_signatures(signature: str) -> None:
    headers = {**SG_HEADERS, "x-twilio-email-event-webhook-signature": signature}
    with pytest.raises(AuthenticationFailed):
        SENDGRID.verify(Delivery(headers, SG_BODY), [SG_KEY], now=int(SG_TIMESTAMP), tolerance=300)


def test_sendgrid_tolerance_defaults_to_a_day() -> None:
    assert schemes.SendGrid.default_tolerance_s == 86_400
    delivery = Delivery(SG_HEADERS, SG_BODY)
    SENDGRID.verify(delivery, [SG_KEY], now=int(SG_TIMESTAMP) + 86_400, tolerance=86_400)
    with pytest.raises(AuthenticationFailed, match="tolerance"):
        SENDGRID.verify(delivery, [SG_KEY], now=int(SG_TIMESTAMP) + 86_401, tolerance=86_400)


def test_sendgrid_batch_is_one_identity_per_event_digest_keyed_without_sg_event_id() -> None:
    payload = [
        {"event": "processed", "sg_event_id": "p1", "email": "a@example.com"},
        {"event": "delivered", "email": "a@example.com", "timestamp": 1},
    ]
    found = SENDGRID.identify(Delivery({}, b""), payload, schemes.Verified())
    assert [(i.event_id, i.event_type, i.payload) for i in found[:1]] == [
        ("p1", "processed", payload[0])
    ]
    assert found[1].event_id == schemes.content_digest_id("delivered", payload[1], without=())
    assert found[1].payload == payload[1]
    for bad in ([{"sg_event_id": "x"}], [{"event": "open", "sg_event_id": ""}], {"event": "x"}):
        with pytest.raises(InvalidPayload):
            SENDGRID.identify(Delivery({}, b""), bad, schemes.Verified())


def test_sendgrid_keys_are_checked_at_configuration_load() -> None:
    for bad, reason in [
        ("MFkw", "not an ECDSA P-256 public key"),
        ("not base64", "Verification Key"),
        (spki_b64(ec.generate_private_key(ec.SECP384R1()).public_key()), "P-256"),
        (pem(ed25519.Ed25519PrivateKey.generate()), "not an ECDSA P-256 one"),
        (DISCORD_PUBLIC, "sendgrid"),
    ]:
        config = {"providers": {"sg": {"scheme": "sendgrid", "secrets": [{"value": bad}]}}}
        with pytest.raises(ConfigurationError, match=reason):
            parse_config(config)
    with pytest.raises(ConfigurationError, match="Verification Key only verifies"):
        SENDGRID.sign(SG_KEY, b"[]", timestamp=NOW)


def test_keys_in_a_configuration_verify_and_private_ones_sign() -> None:
    registry = parse_config(
        {
            "providers": {
                "discord": {
                    "scheme": "discord",
                    "options": {"endpoint": "interactions"},
                    "secrets": [{"value": DISCORD_PEM}, {"value": DISCORD_PUBLIC}],
                },
                "sendgrid": {"scheme": "sendgrid", "secrets": [{"value": SG_PEM}]},
            }
        }
    )
    now = int(time.time())
    for name, body in (("discord", b'{"type":2,"id":"1"}'), ("sendgrid", b'[{"event":"x"}]')):
        provider = registry[name]
        signed = sign_delivery(provider, body, timestamp=now)
        assert signed.headers["Content-Type"] == "application/json"
        provider.verify(Delivery(signed.headers, body), now=now)


def test_each_scheme_names_the_public_key_to_configure_for_a_private_one() -> None:
    assert schemes.Discord.public_key(DISCORD_PEM) == DISCORD_PUBLIC
    assert schemes.Discord.public_key(DISCORD_PUBLIC) == DISCORD_PUBLIC
    assert schemes.SendGrid.public_key(SG_PEM) == SG_PUBLIC
    assert schemes.SendGrid.public_key(SG_KEY) == SG_KEY
    assert schemes.StandardWebhooks.public_key(WHSK) == WHPK
    with pytest.raises(ConfigurationError, match="only whsk_ and whpk_"):
        schemes.StandardWebhooks.public_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")


def test_a_private_key_of_the_wrong_kind_is_refused_at_load_and_on_use() -> None:
    # check_pem looks for the algorithm's identifier; the library's parse is the final word.
    for scheme, wrong in ((INTERACTIONS, SG_PEM), (SENDGRID, DISCORD_PEM)):
        with pytest.raises(ConfigurationError, match="is a PEM private key but not"):
            scheme.check_secret(wrong)
        with pytest.raises(ConfigurationError, match="is a PEM private key but not"):
            scheme.sign(wrong, b"[]", timestamp=NOW)
    p384 = pem(ec.generate_private_key(ec.SECP384R1()))
    with pytest.raises(ConfigurationError, match="not an ECDSA P-256 one"):
        SENDGRID.check_secret(p384)
    garbled = DISCORD_PEM.replace("MC4C", "MC4!")
    with pytest.raises(ConfigurationError, match="not an unencrypted PEM private key"):
        INTERACTIONS.check_secret(garbled)


def test_private_keys_are_unencrypted_pem_pkcs8_or_sec1() -> None:
    sec1 = SG_PRIVATE.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    assert sec1.startswith("-----BEGIN EC PRIVATE KEY-----")
    assert SENDGRID.sign(sec1, b"[]", timestamp=NOW) == SENDGRID.sign(SG_PEM, b"[]", timestamp=NOW)
    encrypted = SG_PRIVATE.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    ).decode()
    with pytest.raises(ConfigurationError, match="not an unencrypted PEM private key"):
        SENDGRID.check_secret(encrypted)
    # Explanatory text before the PEM block (RFC 7468), as the sample keys carry their warning.
    assert INTERACTIONS.public_key("DEV ONLY\n" + DISCORD_PEM) == DISCORD_PUBLIC


def test_an_unknown_interaction_type_too_long_to_store_is_a_400() -> None:
    with pytest.raises(InvalidPayload, match="interaction type"):
        _identify(INTERACTIONS, {"type": 10**300, "id": "1"})
