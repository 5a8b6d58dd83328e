"""The generic scheme's signed content is the template rendered in one left-to-right pass.

A header value substituted for a placeholder is never scanned for placeholders again: otherwise an
attacker could put ``{timestamp}`` into the (attacker-controlled) id header, keep a captured
signature valid and change the deduplication key (issue 12).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook_inbox.errors import AuthenticationFailed, ConfigurationError
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.schemes import Delivery

SECRET = "generic-template-secret"
BODY = b'{"type":"thing.happened","n":1}'
NOW = 1_700_000_000

TEMPLATES = {
    # template: how the sender renders it, written out literally (the test's own oracle)
    "{id}.{body}": lambda i, t: f"{i}.",
    "{id}.{timestamp}.{body}": lambda i, t: f"{i}.{t}.",
    "{timestamp}.{id}.{body}": lambda i, t: f"{t}.{i}.",
    "{timestamp}:{id}:{body}": lambda i, t: f"{t}:{i}:",
    "v0|{id}|{timestamp}|{id}|{body}": lambda i, t: f"v0|{i}|{t}|{i}|",
}

# Id texts that a naive "replace each placeholder in turn" rendering re-interprets.
HOSTILE_IDS = [
    "evt_1{timestamp}",
    "{timestamp}evt_1",
    "evt_1{timestamp}{timestamp}",
    "evt_{id}",
    "evt_{body}",
    "{",
    "}",
    "{}",
    "{{timestamp}}",
    "evt.1",
    "evt:1|",
    f"evt_{NOW}.",
]


def scheme_for(template: str) -> schemes.GenericHmac:
    options = {"signature_header": "X-Sig", "id_header": "X-Id", "signed_content": template}
    if "{timestamp}" in template:
        options["timestamp_header"] = "X-Ts"
    return schemes.GenericHmac(options)


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def expected_signature(head: str) -> str:
    return hmac.new(SECRET.encode(), head.encode() + BODY, hashlib.sha256).hexdigest()


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize("event_id", HOSTILE_IDS)
def test_signing_renders_each_value_literally(template: str, event_id: str) -> None:
    headers = scheme_for(template).sign(SECRET, BODY, event_id=event_id, timestamp=NOW).headers
    assert headers["X-Sig"] == expected_signature(TEMPLATES[template](event_id, str(NOW)))


_FRAGMENTS = st.sampled_from(
    ["{timestamp}", "{id}", "{body}", "{", "}", ".", ":", "|", "evt", "_", "1", "17", "x"]
)


@given(
    template=st.sampled_from(sorted(TEMPLATES)),
    event_id=st.lists(_FRAGMENTS, min_size=1, max_size=8).map("".join),
    timestamp=st.integers(min_value=0, max_value=10**12 - 1),
)
def test_signed_head_is_the_literal_left_to_right_rendering(
    template: str, event_id: str, timestamp: int
) -> None:
    scheme = scheme_for(template)
    headers = scheme.sign(SECRET, BODY, event_id=event_id, timestamp=timestamp).headers
    assert headers["X-Sig"] == expected_signature(TEMPLATES[template](event_id, str(timestamp)))
    # And what was signed verifies (the round trip uses the same rendering).
    verified = scheme.verify(Delivery(lower(headers), BODY), [SECRET], now=timestamp, tolerance=300)
    assert verified.signed_id == event_id


@pytest.mark.parametrize("template", ["{id}.{body}", "{id}.{timestamp}.{body}"])
@pytest.mark.parametrize(
    "mutate",
    [
        lambda i, t: i + "{timestamp}",
        lambda i, t: "{timestamp}" + i,
        lambda i, t: i + "{timestamp}{timestamp}",
        lambda i, t: i.replace(t, "{timestamp}"),
        lambda i, t: i + "{id}",
        lambda i, t: i + "{body}",
        lambda i, t: i + "{}",
        lambda i, t: i + ".",
        lambda i, t: i + f".{t}",
    ],
    ids=[
        "id+{timestamp}",
        "{timestamp}+id",
        "id+{timestamp}x2",
        "timestamp digits->{timestamp}",
        "id+{id}",
        "id+{body}",
        "id+{}",
        "id+separator",
        "id+separator+timestamp",
    ],
)
def test_a_captured_signature_does_not_verify_under_a_mutated_id(template, mutate) -> None:  # type: ignore[no-untyped-def]
    scheme = scheme_for(template)
    captured_id = f"evt_{NOW}"  # a sender whose ids carry the timestamp's digits
    headers = lower(scheme.sign(SECRET, BODY, event_id=captured_id, timestamp=NOW).headers)
    forged_id = mutate(captured_id, str(NOW))
    assert forged_id != captured_id
    with pytest.raises(AuthenticationFailed):
        scheme.verify(
            Delivery({**headers, "x-id": forged_id}, BODY), [SECRET], now=NOW, tolerance=300
        )


@pytest.mark.parametrize("template", ["{id}.{tiemstamp}.{body}", "{ID}.{body}", "{type}{body}"])
def test_an_unknown_placeholder_is_a_configuration_error(template: str) -> None:
    with pytest.raises(ConfigurationError, match="placeholder"):
        schemes.GenericHmac(
            {"signature_header": "X-Sig", "id_header": "X-Id", "signed_content": template}
        )


def test_literal_braces_that_are_not_placeholders_are_signed_as_written() -> None:
    scheme = scheme_for("{{id}}-{body}")
    headers = scheme.sign(SECRET, BODY, event_id="e1", timestamp=NOW).headers
    assert headers["X-Sig"] == expected_signature("{e1}-")


def test_base64_encoding_uses_the_same_rendering() -> None:
    scheme = schemes.GenericHmac(
        {
            "signature_header": "X-Sig",
            "id_header": "X-Id",
            "signed_content": "{id}.{body}",
            "encoding": "base64",
        }
    )
    headers = scheme.sign(SECRET, BODY, event_id="a{timestamp}", timestamp=NOW).headers
    mac = hmac.new(SECRET.encode(), b"a{timestamp}." + BODY, hashlib.sha256).digest()
    assert headers["X-Sig"] == base64.b64encode(mac).decode()


@pytest.mark.parametrize(("forged_id", "forged_ts"), [("evt_10", f"0{NOW}"), ("evt_1", f"00{NOW}")])
def test_a_captured_signature_does_not_verify_with_zeros_moved_into_the_timestamp(
    forged_id: str, forged_ts: str
) -> None:
    # "{id}{timestamp}" has no separator: an id ending in "0" can hand its zeros to the
    # timestamp ("evt_1" + "00<ts>" renders exactly like "evt_100" + "<ts>"). Were leading zeros
    # accepted, that would verify as a fresh delivery under a new deduplication key.
    scheme = scheme_for("{id}{timestamp}.{body}")
    headers = lower(scheme.sign(SECRET, BODY, event_id="evt_100", timestamp=NOW).headers)
    forged = {**headers, "x-id": forged_id, "x-ts": forged_ts}
    assert scheme._head(forged_id, forged_ts) == scheme._head("evt_100", str(NOW))
    with pytest.raises(AuthenticationFailed):
        scheme.verify(Delivery(forged, BODY), [SECRET], now=NOW, tolerance=300)


def test_moving_a_non_zero_digit_into_the_timestamp_is_stale() -> None:
    # Any other digit moved across the boundary changes the timestamp at least tenfold.
    scheme = scheme_for("{id}{timestamp}.{body}")
    headers = lower(scheme.sign(SECRET, BODY, event_id="evt_7", timestamp=NOW).headers)
    forged = {**headers, "x-id": "evt_", "x-ts": f"7{NOW}"}
    with pytest.raises(AuthenticationFailed) as failure:
        scheme.verify(Delivery(forged, BODY), [SECRET], now=NOW, tolerance=86_400)
    assert failure.value.reason == "stale"
