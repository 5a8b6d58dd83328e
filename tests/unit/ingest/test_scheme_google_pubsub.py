"""Google Pub/Sub push (OIDC): tokens minted by google-auth (Google's own library) verify here,
tokens signed here verify in google-auth (``verify_oauth2_token`` against a certs URL served on
loopback), and every check Google documents refuses its forgery: another key, another audience,
issuer or service account, an unverified email, an expired token, ``alg`` none or HS256, a
malformed or oversized one. Keys come pinned or from a key set served over HTTPS on loopback
(the connection routed there as in test_certificate_fetch.py), kept by its Cache-Control."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import google.auth.crypt
import google.auth.jwt
import google.auth.transport.requests
import pytest
from google.oauth2 import id_token

from tests.cert_authority import authority_pem, leaf
from tests.token_keys import pem_private, private_jwk_text, public_jwk, rsa_key
from webhook_inbox.errors import AuthenticationFailed, SenderUnavailable, SignatureMismatch
from webhook_inbox.ingest.schemes import Delivery, build, certificate_fetch, jose, key_sets

AUDIENCE = "https://example.com/webhooks/pubsub"
EMAIL = "pusher@project-1.iam.gserviceaccount.com"
KID = "google-test-1"
OPTIONS = {"audience": AUDIENCE, "service_account_email": EMAIL}
NOW = int(time.time())
ENVELOPE = {
    "message": {
        "attributes": {"eventType": "OBJECT_FINALIZE"},
        "data": base64.b64encode(b'{"name":"a.txt"}').decode(),
        "messageId": "2070443601311540",
        "message_id": "2070443601311540",
        "publishTime": "2026-01-01T00:00:00.000Z",
        "publish_time": "2026-01-01T00:00:00.000Z",
    },
    "subscription": "projects/project-1/subscriptions/push-sub",
}
BODY = json.dumps(ENVELOPE).encode()
JWKS_HOST = "www.googleapis.com"


def claims(**changes: Any) -> dict[str, Any]:
    found = {
        "aud": AUDIENCE,
        "azp": "1234",
        "email": EMAIL,
        "email_verified": True,
        "exp": NOW + 3600,
        "iat": NOW,
        "iss": "https://accounts.google.com",
        "sub": "1234",
    }
    found.update(changes)
    return {k: v for k, v in found.items() if v is not None}


def google_token(kid: str = KID, **changes: Any) -> str:
    """A token as Google signs one, by google-auth's own encoder."""
    signer = google.auth.crypt.RSASigner.from_string(pem_private(rsa_key(kid)), kid)
    return google.auth.jwt.encode(signer, claims(**changes)).decode()


def delivery(token: str, body: bytes = BODY) -> Delivery:
    return Delivery({"Authorization": f"Bearer {token}"}, body)


def pinned(kid: str = KID) -> list[str]:
    return [json.dumps(public_jwk(kid))]


def verify(token: str, *, secrets: list[str] | None = None, **options: Any) -> Any:
    scheme = build("google-pubsub", OPTIONS | {"keys": "pinned"} | options)
    return scheme.verify(
        delivery(token), pinned() if secrets is None else secrets, now=NOW, tolerance=60
    )


def test_a_token_google_auth_mints_verifies_and_keys_the_message_id() -> None:
    scheme = build("google-pubsub", OPTIONS | {"keys": "pinned"})
    verified = scheme.verify(delivery(google_token()), pinned(), now=NOW, tolerance=60)
    assert verified.timestamp == NOW
    (identity,) = scheme.identify(delivery(google_token()), ENVELOPE, verified)
    assert (identity.event_id, identity.event_type) == ("2070443601311540", "push-sub")
    typed = build("google-pubsub", OPTIONS | {"type_attribute": "eventType"})
    assert typed.identify(delivery(""), ENVELOPE, verified)[0].event_type == "OBJECT_FINALIZE"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"aud": "https://example.com/other"}, "aud"),
        ({"iss": "https://evil.example"}, "iss"),
        ({"email": "other@project-1.iam.gserviceaccount.com"}, "email"),
        ({"email_verified": False}, "email"),
        ({"email_verified": "true"}, "email"),  # a string is not the boolean Google sends
        ({"email": None}, "email"),
        ({"aud": [AUDIENCE, "other"]}, "aud"),
    ],
)
def test_each_documented_claim_check_refuses(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(AuthenticationFailed, match=reason):
        verify(google_token(**changes))


def test_expired_and_future_tokens_are_stale_outside_the_leeway() -> None:
    with pytest.raises(AuthenticationFailed) as expired:
        verify(google_token(iat=NOW - 4000, exp=NOW - 61))
    assert expired.value.reason == "stale"
    verify(google_token(iat=NOW - 4000, exp=NOW - 30))  # within the 60 s leeway
    with pytest.raises(AuthenticationFailed) as future:
        verify(google_token(iat=NOW + 120))
    assert future.value.reason == "stale"
    with pytest.raises(AuthenticationFailed, match="exp"):
        verify(google_token(exp=None))


def test_a_token_signed_by_another_key_under_the_same_kid_is_a_mismatch() -> None:
    forged = google_token(kid="attacker")
    _header, payload, signature = forged.split(".")
    relabelled = jose.b64url_encode(json.dumps({"alg": "RS256", "kid": KID, "typ": "JWT"}).encode())
    with pytest.raises(SignatureMismatch):
        verify(f"{relabelled}.{payload}.{signature}")


def test_alg_none_and_hs256_keyed_with_the_public_key_are_refused() -> None:
    """The two classic JOSE forgeries: no signature at all, and an HMAC whose key is the
    public key (libraries that let the token choose the algorithm accept it)."""
    import hashlib
    import hmac

    payload = jose.b64url_encode(json.dumps(claims()).encode())
    none_header = jose.b64url_encode(json.dumps({"alg": "none", "kid": KID}).encode())
    with pytest.raises(AuthenticationFailed, match="alg"):
        verify(f"{none_header}.{payload}.")
    hs_header = jose.b64url_encode(json.dumps({"alg": "HS256", "kid": KID}).encode())
    mac = hmac.new(pinned()[0].encode(), f"{hs_header}.{payload}".encode(), hashlib.sha256)
    with pytest.raises(AuthenticationFailed, match="alg"):
        verify(f"{hs_header}.{payload}.{jose.b64url_encode(mac.digest())}")


@pytest.mark.parametrize(
    "authorization",
    [
        "",
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer a.b",
        "Bearer a.b.c.d",
        "Bearer !!.!!.!!",
        "Bearer " + "A" * 5000,
    ],
)
def test_malformed_or_oversized_authorization_is_a_401(authorization: str) -> None:
    scheme = build("google-pubsub", OPTIONS | {"keys": "pinned"})
    with pytest.raises(AuthenticationFailed):
        scheme.verify(
            Delivery({"Authorization": authorization}, BODY), pinned(), now=NOW, tolerance=60
        )


def test_padded_or_non_canonical_base64url_is_refused() -> None:
    header, payload, signature = google_token().split(".")
    with pytest.raises(AuthenticationFailed, match="Bearer"):  # '=' is no token character
        verify(f"{header}=.{payload}.{signature}")
    with pytest.raises(AuthenticationFailed, match="base64url"):
        jose.parse_compact(
            f"{header}=.{payload}.{signature}", "t", max_chars=4096, algorithms=frozenset({"RS256"})
        )
    # A 256-byte signature leaves four unused bits in its last character: setting one spells
    # the same bytes another way (a lenient decoder accepts it).
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    twin = signature[:-1] + alphabet[alphabet.index(signature[-1]) | 1]
    assert twin != signature
    assert base64.urlsafe_b64decode(twin + "==") == base64.urlsafe_b64decode(signature + "==")
    with pytest.raises(AuthenticationFailed, match="canonical"):
        verify(f"{header}.{payload}.{twin}")


def test_the_token_covers_no_body_so_another_body_under_it_still_verifies() -> None:
    """Documented, not hidden: the OIDC token authenticates the sender, not the content."""
    scheme = build("google-pubsub", OPTIONS | {"keys": "pinned"})
    token = google_token()
    other = json.dumps({**ENVELOPE, "message": {**ENVELOPE["message"], "data": ""}}).encode()
    scheme.verify(delivery(token, other), pinned(), now=NOW, tolerance=60)


def test_an_unpinned_kid_is_a_503_that_pages_not_a_401() -> None:
    with pytest.raises(SenderUnavailable) as raised:
        verify(google_token(kid="rotated-2"))
    assert raised.value.cause == "not_pinned"


def test_envelope_checks() -> None:
    scheme = build(
        "google-pubsub", OPTIONS | {"subscriptions": ["projects/project-1/subscriptions/other"]}
    )
    from webhook_inbox.errors import InvalidPayload
    from webhook_inbox.ingest.schemes import Verified

    with pytest.raises(InvalidPayload, match="subscriptions"):
        scheme.identify(delivery(""), ENVELOPE, Verified())
    for broken in ({"subscription": ENVELOPE["subscription"]}, {**ENVELOPE, "subscription": "x"}):
        with pytest.raises(InvalidPayload):
            build("google-pubsub", OPTIONS).identify(delivery(""), broken, Verified())


def test_our_signature_verifies_in_google_auth(jwks_server: int) -> None:
    """What ``sign`` makes (webhook-inbox sign / trigger) is what google-auth accepts as a
    Google ID token: verify_token checks the signature against the certs URL on loopback and
    ``aud`` (``iss`` and ``email`` are asserted: it checks neither)."""
    scheme = build("google-pubsub", OPTIONS)
    signed = scheme.sign(private_jwk_text(KID), BODY, timestamp=int(time.time()))
    token = signed.headers["Authorization"].removeprefix("Bearer ")
    request = google.auth.transport.requests.Request()
    url = f"http://127.0.0.1:{jwks_server}/oauth2/v3/certs"
    found = id_token.verify_token(token, request, audience=AUDIENCE, certs_url=url)
    assert found["email"] == EMAIL
    assert found["iss"] == "https://accounts.google.com"


# --- the key set, downloaded over HTTPS ---------------------------------------------------

SERVED: dict[str, Any] = {"max_age": 300, "status": 200, "requests": 0, "extra": []}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        SERVED["requests"] += 1
        if self.path != "/oauth2/v3/certs" or SERVED["status"] != 200:
            self.send_error(SERVED["status"] if SERVED["status"] != 200 else 404)
            return
        body = json.dumps({"keys": [public_jwk(KID), *SERVED["extra"]]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", f"public, max-age={SERVED['max_age']}, must-revalidate")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(context: ssl.SSLContext | None) -> tuple[http.server.ThreadingHTTPServer, int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, httpd.server_address[1]


@pytest.fixture(scope="module")
def jwks_server() -> Iterator[int]:
    """The key set over plain HTTP on loopback, for google-auth's certs_url."""
    httpd, port = _serve(None)
    yield port
    httpd.shutdown()


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """www.googleapis.com goes to an HTTPS server on loopback trusting only the test CA."""
    served = leaf(JWKS_HOST, dns_name=JWKS_HOST)
    with tempfile.TemporaryDirectory() as folder:
        cert, key = Path(folder, "c.pem"), Path(folder, "k.pem")
        cert.write_text(served.certificate_pem)
        key.write_text(served.private_key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        httpd, port = _serve(context)
    trust = ssl.create_default_context(cadata=authority_pem().decode())

    def open_connection(host: str, timeout: float) -> certificate_fetch._HttpsConnection:
        assert host == JWKS_HOST  # nothing a token says can send the download elsewhere
        return certificate_fetch._HttpsConnection(host, port, timeout=timeout, context=trust)

    monkeypatch.setattr(certificate_fetch, "_open_connection", open_connection)
    monkeypatch.setattr(certificate_fetch.network, "addresses", lambda host, port: ["127.0.0.1"])
    # A key of a type nobody verifies with is skipped, not an error.
    SERVED.update(max_age=300, status=200, requests=0, extra=[{"kty": "oct", "kid": "x"}])
    key_sets.CACHE.clear()
    certificate_fetch.BUDGET.clear()
    yield
    key_sets.CACHE.clear()
    certificate_fetch.BUDGET.clear()
    SERVED["extra"] = []
    httpd.shutdown()


def fetching_verify(token: str) -> Any:
    scheme = build("google-pubsub", OPTIONS)
    return scheme.verify(delivery(token), [], now=NOW, tolerance=60)


def test_keys_download_once_and_are_kept_for_max_age(
    routed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A jku header is not a place keys come from: the download goes to Google's host only
    # (the routed connection asserts it).
    token = google_token()
    _header, payload, signature = token.split(".")
    jku = {"alg": "RS256", "kid": KID, "typ": "JWT", "jku": "https://evil.example/certs"}
    with pytest.raises(SignatureMismatch):  # the header is signed: changing it breaks that
        fetching_verify(f"{jose.b64url_encode(json.dumps(jku).encode())}.{payload}.{signature}")
    for _ in range(3):
        fetching_verify(token)
    assert SERVED["requests"] == 1
    clock = time.monotonic()
    monkeypatch.setattr(key_sets.time, "monotonic", lambda: clock + 301)
    fetching_verify(token)
    assert SERVED["requests"] == 2  # expired after max-age: fetched again


def test_an_unknown_kid_refetches_at_most_every_30_seconds_then_is_a_401(routed: None) -> None:
    fetching_verify(google_token())
    for _ in range(3):
        with pytest.raises(AuthenticationFailed, match="key set"):
            fetching_verify(google_token(kid="made-up"))
    assert SERVED["requests"] == 1


def test_a_first_download_that_fails_is_a_503_remembered(routed: None) -> None:
    SERVED["status"] = 500
    for _ in range(3):
        with pytest.raises(SenderUnavailable) as raised:
            fetching_verify(google_token())
        assert raised.value.cause == "fetch_failed"
    assert SERVED["requests"] == 1


def test_an_expired_set_serves_while_its_refresh_fails(
    routed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetching_verify(google_token())
    SERVED["status"] = 503
    clock = time.monotonic()
    monkeypatch.setattr(key_sets.time, "monotonic", lambda: clock + 400)
    fetching_verify(google_token())
    monkeypatch.setattr(
        key_sets.time, "monotonic", lambda: clock + 400 + key_sets.STALE_GRACE_S + 60
    )
    with pytest.raises(SenderUnavailable):
        fetching_verify(google_token())


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("public, max-age=19043, must-revalidate, no-transform", 19043),
        ("max-age=5", key_sets.MIN_MAX_AGE_S),
        ("max-age=99999999", key_sets.MAX_MAX_AGE_S),
        (None, key_sets.DEFAULT_MAX_AGE_S),
        ("no-store", key_sets.DEFAULT_MAX_AGE_S),
        ("s-maxage=10", key_sets.DEFAULT_MAX_AGE_S),
    ],
)
def test_max_age_is_read_and_bounded(header: str | None, seconds: int) -> None:
    assert key_sets.max_age(header) == seconds
