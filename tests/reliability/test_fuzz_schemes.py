"""Fuzzing every signature scheme's parser (``webhook_inbox.schemes``) directly.

Garbage and near-valid headers: verification raises only ``AuthenticationFailed`` (the 401
path), never another exception, and never accepts a signature whose digest was altered.
Arbitrary payloads: ``identify`` raises only ``InvalidPayload`` (the 400 path) or returns a
bounded, non-empty id and type.

Sized by the Hypothesis profile: ``HYPOTHESIS_PROFILE=long pytest tests/reliability -k fuzz``.
"""

from __future__ import annotations

import time
from typing import Any

from hypothesis import assume, event, given
from hypothesis import strategies as st

from webhook_inbox import schemes
from webhook_inbox.errors import AuthenticationFailed, InvalidPayload
from webhook_inbox.schemes import Delivery

NOW = int(time.time())
TOLERANCE = 300
SVIX_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
PLAIN_SECRET = "fuzz-only-secret"

# (label, scheme, secret): every scheme, the generic one in each of its shapes.
SCHEMES: list[tuple[str, schemes.Scheme, str]] = [
    ("standard-webhooks", schemes.build("standard-webhooks"), SVIX_SECRET),
    ("svix", schemes.build("standard-webhooks", {"header_prefix": "svix"}), SVIX_SECRET),
    ("stripe", schemes.build("stripe"), "whsec_fuzz"),
    ("github", schemes.build("github"), PLAIN_SECRET),
    ("shopify", schemes.build("shopify"), PLAIN_SECRET),
    ("slack", schemes.build("slack"), PLAIN_SECRET),
    (
        "hmac-hex-prefix",
        schemes.build("hmac-sha256", {"signature_header": "X-Sig", "prefix": "sha256="}),
        PLAIN_SECRET,
    ),
    (
        "hmac-b64-timestamped-id",
        schemes.build(
            "hmac-sha256",
            {
                "signature_header": "X-Sig",
                "encoding": "base64",
                "timestamp_header": "X-Ts",
                "id_header": "X-Id",
                "signed_content": "{id}.{timestamp}.{body}",
                "type_header": "X-Type",
            },
        ),
        PLAIN_SECRET,
    ),
    (
        "hmac-id-path",
        schemes.build(
            "hmac-sha256", {"signature_header": "X-Sig", "id_path": "meta.id", "type_path": "kind"}
        ),
        PLAIN_SECRET,
    ),
]
LABELS = [label for label, _, _ in SCHEMES]
BY_LABEL = {label: (scheme, secret) for label, scheme, secret in SCHEMES}
HEADER_NAMES = [
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "stripe-signature",
    "x-hub-signature-256",
    "x-github-event",
    "x-github-delivery",
    "x-shopify-hmac-sha256",
    "x-shopify-topic",
    "x-slack-signature",
    "x-slack-request-timestamp",
    "x-sig",
    "x-ts",
    "x-id",
    "x-type",
]

hex_digits = st.text("0123456789abcdefABCDEF", min_size=0, max_size=70)
b64_digits = st.text(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", max_size=50
)
numbers = st.one_of(
    st.integers(-(10**13), 10**13).map(str),
    st.sampled_from(["", "0", "00000000001", "1e9", "١٢٣٤", " 1", "1 ", "+5", "9" * 40]),
)
header_values = st.one_of(
    st.text(max_size=60),
    st.text(max_size=5000).map(lambda s: s * 2),
    hex_digits,
    b64_digits,
    numbers,
    st.builds(lambda t, h: f"t={t},v1={h}", numbers, hex_digits),
    st.builds(lambda a, b: f"t={a},t={b},v1=", numbers, numbers),
    st.lists(
        st.builds(lambda v, s: f"{v},{s}", st.sampled_from(["v1", "v1a", "v2", ""]), b64_digits),
        max_size=20,
    ).map(" ".join),
    st.builds(
        lambda p, h: p + h, st.sampled_from(["sha256=", "v0=", "sha1=", "=", ""]), hex_digits
    ),
    st.sampled_from([",", "=", ",,,", "v1,", "t=", " ", "\x00", "\n"]),
)
garbage_headers = st.dictionaries(st.sampled_from(HEADER_NAMES), header_values, max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300) | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
payloads = st.one_of(
    st.dictionaries(st.text(max_size=10), json_values, max_size=6),
    st.fixed_dictionaries(
        {},
        optional={
            "id": json_values,
            "type": json_values,
            "event_id": json_values,
            "event": json_values,
            "action": json_values,
            "challenge": json_values,
            "meta": st.dictionaries(st.sampled_from(["id", "x"]), json_values, max_size=2),
            "kind": json_values,
        },
    ),
)


@given(label=st.sampled_from(LABELS), headers=garbage_headers, body=st.binary(max_size=200))
def test_garbage_headers_fail_authentication_and_nothing_else(
    label: str, headers: dict[str, str], body: bytes
) -> None:
    scheme, secret = BY_LABEL[label]
    try:
        scheme.verify(Delivery(headers, body), [secret], now=NOW, tolerance=TOLERANCE)
    except AuthenticationFailed as failure:
        event(f"{label}: {failure.reason}")
        return
    raise AssertionError(f"{label} accepted garbage headers {headers!r}")


@given(
    label=st.sampled_from(LABELS),
    body=st.binary(max_size=200),
    skew=st.sampled_from([0, 1, TOLERANCE, -TOLERANCE]),
    data=st.data(),
)
def test_a_signature_with_one_digest_character_changed_is_rejected(
    label: str, body: bytes, skew: int, data: st.DataObject
) -> None:
    scheme, secret = BY_LABEL[label]
    headers = {
        k.lower(): v
        for k, v in scheme.sign(
            secret, body, event_id="msg_fuzz", timestamp=NOW + skew, event_type="t"
        ).headers.items()
    }
    # The authentic delivery verifies (tolerance is inclusive) ...
    scheme.verify(Delivery(headers, body), [secret], now=NOW, tolerance=TOLERANCE)
    # ... and with any single character of its signature replaced, it does not.
    name = next(n for n in headers if "sig" in n or "hmac" in n)
    value = headers[name]
    # Not the last digit before base64 padding: its low bits are unused, so some replacements
    # decode to the same digest (and a hex digit's case is no change either).
    at = data.draw(st.integers(len(value) - 20, len(value) - 3), label="position in digest")
    replacement = data.draw(st.characters(codec="utf-8"), label="replacement")
    assume(replacement.lower() != value[at].lower())
    headers[name] = value[:at] + replacement + value[at + 1 :]
    try:
        scheme.verify(Delivery(headers, body), [secret], now=NOW, tolerance=TOLERANCE)
    except AuthenticationFailed:
        return
    raise AssertionError(f"{label} accepted an altered signature {headers[name]!r}")


@given(
    label=st.sampled_from(LABELS),
    headers=garbage_headers,
    payload=payloads,
    body=st.binary(max_size=50),
)
def test_identify_rejects_with_400_or_returns_a_bounded_identity(
    label: str, headers: dict[str, str], payload: dict[str, Any], body: bytes
) -> None:
    scheme, _ = BY_LABEL[label]
    verified = schemes.Verified(signed_id=headers.get("webhook-id") or headers.get("x-id"))
    try:
        found = scheme.identify(Delivery(headers, body), payload, verified)
    except InvalidPayload:
        event(f"{label}: 400")
        return
    event(f"{label}: identified")
    if isinstance(found, schemes.Reply):  # a handshake (Slack's url_verification)
        assert 200 <= found.status < 300
        return
    assert found, "a delivery identifies at least one event"
    for identity in found:
        assert 1 <= len(identity.event_id) <= schemes.MAX_ID_CHARS
        assert 1 <= len(identity.event_type) <= schemes.MAX_TYPE_CHARS
        assert identity.delivery_id is None or len(identity.delivery_id) <= schemes.MAX_ID_CHARS
