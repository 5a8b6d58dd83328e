"""Apple App Store Server Notifications V2: the body is ``{"signedPayload": "<JWS>"}``, an ES256
JWS whose header carries its certificate chain (``x5c``: leaf, intermediate, root), which must
chain to Apple Root CA - G3. Nothing is fetched: Apple's root certificate is embedded here.

Checked, as Apple's own library (app-store-server-library's ``SignedDataVerifier``) does offline:
the ``x5c`` chain has three certificates, the intermediate is a CA issued and signed by a trusted
root (Apple Root CA - G3, or the provider's pinned roots), the leaf is issued and signed by the
intermediate; the leaf carries Apple's OID 1.2.840.113635.100.6.11.1 and the intermediate
1.2.840.113635.100.6.2.1; the JWS verifies under the leaf's P-256 key; every certificate is valid
at the payload's ``signedDate`` (the signed time, as the library judges it offline: a
retry days later still verifies); the payload's ``bundleId`` is ``options.bundle_id``, its
``environment`` ``options.environment`` when set, its ``appAppleId`` ``options.app_apple_id``
when set. The library checks the nested ``signedTransactionInfo`` and ``signedRenewalInfo`` only
when asked to, one by one: here each is verified the same way (its own chain, at its own
``signedDate``) and its decoded claims stored beside it as ``transactionInfo`` /
``renewalInfo``, so a handler reads verified data and never decodes a JWS itself.

The key is ``notificationUUID`` (signed; Apple's retries repeat it), the type ``notificationType``
with ``.subtype`` when there is one (``SUBSCRIBED.INITIAL_BUY``). The stored payload is the decoded
notification (with the nested claims), not the JWS.

Pins: a provider's secrets, if any, are PEM certificate bundles whose self-signed certificates
*replace* Apple's root as the trusted roots (a development chain; or Apple's own root pinned
explicitly). A development pin also holds the leaf, the intermediate and the leaf's private key,
so ``webhook-inbox sign``/``trigger`` and the tests sign as Apple would.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    InvalidPayload,
    SignatureMismatch,
)
from webhook_inbox.ingest import bodies
from webhook_inbox.ingest.schemes import base, jose
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Scheme, Signed, Verified

# Apple Root CA - G3 (www.apple.com/certificateauthority/), DER in base64. SHA-256 fingerprint
# 63343abf b89a6a03 ebb57e9b 3f5fa7be 7c4f5c75 6f3017b3 a8c488c3 653e9179, as Apple publishes it
# (tests/unit/ingest/test_scheme_app_store.py checks it).
APPLE_ROOT_CA_G3 = base64.b64decode(
    "MIICQzCCAcmgAwIBAgIILcX8iNLFS5UwCgYIKoZIzj0EAwMwZzEbMBkGA1UEAwwSQXBwbGUgUm9vdCBDQSAtIEczMSYw"
    "JAYDVQQLDB1BcHBsZSBDZXJ0aWZpY2F0aW9uIEF1dGhvcml0eTETMBEGA1UECgwKQXBwbGUgSW5jLjELMAkGA1UEBhMC"
    "VVMwHhcNMTQwNDMwMTgxOTA2WhcNMzkwNDMwMTgxOTA2WjBnMRswGQYDVQQDDBJBcHBsZSBSb290IENBIC0gRzMxJjAk"
    "BgNVBAsMHUFwcGxlIENlcnRpZmljYXRpb24gQXV0aG9yaXR5MRMwEQYDVQQKDApBcHBsZSBJbmMuMQswCQYDVQQGEwJV"
    "UzB2MBAGByqGSM49AgEGBSuBBAAiA2IABJjpLz1AcqTtkyJygRMc3RCV8cWjTnHcFBbZDuWmBSp3ZHtfTjjTuxxEtX/1"
    "H7YyYl3J6YRbTzBPEVoA/VhYDKX1DyxNB0cTddqXl5dvMVztK517IDvYuVTZXpmkOlEKMaNCMEAwHQYDVR0OBBYEFLuw"
    "3qFYM4iapIqZ3r6966/ayySrMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoGCCqGSM49BAMDA2gAMGUC"
    "MQCD6cHEFl4aXTQY2e3v9GwOAEZLuN+yRhHFD/3meoyhpmvOwgPUnPWTxnS4at+qIxUCMG1mihDK1A3UT82NQz60imOl"
    "M27jbdoXt2QfyFMm+YhidDkLF1vLUagM6BgD56KyKA=="
)
LEAF_OID = "1.2.840.113635.100.6.11.1"
INTERMEDIATE_OID = "1.2.840.113635.100.6.2.1"
ENVIRONMENTS = ("Production", "Sandbox", "Xcode", "LocalTesting")
MAX_JWS_CHARS = 256 * 1024
MAX_CERTIFICATE_CHARS = 8192
_ALGORITHMS = frozenset({jose.ES256})
_PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----([A-Za-z0-9+/=\s]+)-----END CERTIFICATE-----"
)
_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?:EC )?PRIVATE KEY-----[A-Za-z0-9+/=\s]+-----END (?:EC )?PRIVATE KEY-----"
)
_NESTED = (("signedTransactionInfo", "transactionInfo"), ("signedRenewalInfo", "renewalInfo"))


def _pem_certificates(text: str) -> list[bytes]:
    found = []
    for block in _PEM_CERTIFICATE.finditer(text):
        try:
            found.append(base64.b64decode("".join(block[1].split()), validate=True))
        except binascii.Error:
            raise ConfigurationError("app-store: a pinned certificate is not base64") from None
    return found


@functools.lru_cache(maxsize=64)
def _certificate(der: bytes) -> Any:
    from cryptography import x509

    try:
        return x509.load_der_x509_certificate(der)
    except ValueError:
        raise AuthenticationFailed("an x5c certificate does not parse") from None


def _has_extension(certificate: Any, oid: str) -> bool:
    from cryptography import x509

    try:
        certificate.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid))
    except x509.ExtensionNotFound:
        return False
    return True


def _is_ca(certificate: Any) -> bool:
    from cryptography import x509

    try:
        return bool(certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _issued_by(child: Any, parent: Any) -> bool:
    from cryptography.exceptions import InvalidSignature

    try:
        child.verify_directly_issued_by(parent)
    except (ValueError, TypeError, InvalidSignature):  # another issuer, key type or signature
        return False
    return True


class AppStore(Scheme):
    name = "app-store"
    uses_timestamp = False  # judged at signedDate, like Apple's library; retries span days
    option_names = frozenset({"bundle_id", "environment", "app_apple_id"})

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        bundle_id = self.options.get("bundle_id")
        if not isinstance(bundle_id, str) or not bundle_id or len(bundle_id) > 255:
            raise ConfigurationError("app-store: options.bundle_id is the app's bundle id")
        environment = self.options.get("environment")
        if environment is not None and environment not in ENVIRONMENTS:
            raise ConfigurationError(f"app-store: options.environment is one of {ENVIRONMENTS}")
        app_apple_id = self.options.get("app_apple_id")
        if app_apple_id is not None and (
            not isinstance(app_apple_id, int) or isinstance(app_apple_id, bool) or app_apple_id < 1
        ):
            raise ConfigurationError("app-store: options.app_apple_id is the app's Apple ID")
        self.bundle_id: str = bundle_id
        self.environment: str | None = environment
        self.app_apple_id: int | None = app_apple_id

    @property
    def requires_secrets(self) -> bool:
        return False  # Apple's root is embedded; pins replace it

    def check_secret(self, secret: str) -> None:
        found = _pem_certificates(secret)
        has_key = _PEM_PRIVATE_KEY.search(secret) is not None
        if len(found) not in (1, 3) or (has_key and len(found) != 3):
            raise ConfigurationError(
                "app-store: a pin is a PEM root certificate, or (development) the leaf, "
                "intermediate and root certificates and the leaf's private key"
            )

    def _roots(self, secrets: Sequence[str]) -> list[Any]:
        if not secrets:
            return [_certificate(APPLE_ROOT_CA_G3)]
        roots = []
        for secret in secrets:
            for der in _pem_certificates(secret):
                certificate = _certificate(der)
                if certificate.issuer == certificate.subject:
                    roots.append(certificate)
        return roots

    def _chain(self, header: Mapping[str, Any], roots: Sequence[Any]) -> list[Any]:
        """The x5c certificates, leaf first, chained to a trusted root (dates checked later)."""
        x5c = header.get("x5c")
        if not isinstance(x5c, list) or len(x5c) != 3:
            raise AuthenticationFailed("x5c is not a chain of three certificates")
        chain = []
        for entry in x5c:
            if not isinstance(entry, str) or not entry or len(entry) > MAX_CERTIFICATE_CHARS:
                raise AuthenticationFailed("an x5c entry is missing or too long")
            try:
                chain.append(_certificate(base64.b64decode(entry, validate=True)))
            except binascii.Error:
                raise AuthenticationFailed("an x5c entry is not base64") from None
        leaf, intermediate = chain[0], chain[1]
        # The chain's own root is not trusted for being there: the intermediate must be
        # issued by one of *our* roots (Apple's library compares against its trusted roots).
        if not any(_issued_by(intermediate, root) for root in roots):
            raise AuthenticationFailed("x5c does not chain to a trusted root")
        if not _is_ca(intermediate) or not _issued_by(leaf, intermediate):
            raise AuthenticationFailed("x5c's leaf is not issued by its intermediate CA")
        if not _has_extension(leaf, LEAF_OID) or not _has_extension(intermediate, INTERMEDIATE_OID):
            raise AuthenticationFailed("x5c's certificates lack Apple's App Store OIDs")
        return [leaf, intermediate, *roots]

    def _decode(self, signed: Any, what: str, roots: Sequence[Any]) -> dict[str, Any]:
        """One of Apple's JWS verified and its claims, valid at its own signedDate."""
        from cryptography.hazmat.primitives.asymmetric import ec

        jws = jose.parse_compact(signed, what, max_chars=MAX_JWS_CHARS, algorithms=_ALGORITHMS)
        chain = self._chain(jws.header, roots)
        key = chain[0].public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey) or not jose.verify_with(
            key, jose.ES256, jws
        ):
            raise SignatureMismatch(f"{what}'s signature did not verify")
        claims = jws.claims()
        signed_ms = claims.get("signedDate")
        if isinstance(signed_ms, bool) or not isinstance(signed_ms, int) or signed_ms < 0:
            raise AuthenticationFailed(f"{what}'s signedDate is missing")
        when = datetime.fromtimestamp(signed_ms / 1000, UTC)
        leaf, intermediate = chain[0], chain[1]
        root = next(r for r in chain[2:] if _issued_by(intermediate, r))
        for certificate in (leaf, intermediate, root):
            if not certificate.not_valid_before_utc <= when <= certificate.not_valid_after_utc:
                raise AuthenticationFailed(f"{what}'s certificates are not valid at signedDate")
        return claims

    def _check_app(self, found: Mapping[str, Any], what: str) -> None:
        if found.get("bundleId") != self.bundle_id:
            raise AuthenticationFailed(f"{what}'s bundleId is not options.bundle_id")
        if self.environment is not None and found.get("environment") != self.environment:
            raise AuthenticationFailed(f"{what}'s environment is not options.environment")
        if self.app_apple_id is not None and found.get("appAppleId") != self.app_apple_id:
            raise AuthenticationFailed(f"{what}'s appAppleId is not options.app_apple_id")

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        try:
            body = bodies.json_object(delivery.body)
        except InvalidPayload:
            raise base.fail("the body is not a JSON object with signedPayload") from None
        roots = self._roots(secrets)
        notification = self._decode(body.get("signedPayload"), "signedPayload", roots)
        # data (most types), summary (RENEWAL_EXTENSION summaries), externalPurchaseToken.
        app = next(
            (notification[k] for k in ("data", "summary", "externalPurchaseToken")
             if isinstance(notification.get(k), Mapping)),
            None,
        )  # fmt: skip
        if app is None:
            raise AuthenticationFailed("signedPayload names no app (data, summary)")
        self._check_app(app, "signedPayload")
        data = notification.get("data")
        if isinstance(data, dict):
            for signed_name, decoded_name in _NESTED:
                if data.get(signed_name) is None:
                    continue
                nested = self._decode(data[signed_name], signed_name, roots)
                # Both carry the environment; a transaction also its app's bundleId.
                if nested.get("environment") != app.get("environment") or (
                    signed_name == "signedTransactionInfo"
                    and nested.get("bundleId") != self.bundle_id
                ):
                    raise AuthenticationFailed(f"{signed_name} is another app's or environment's")
                data[decoded_name] = nested
        uuid = base.bounded_text(
            notification.get("notificationUUID"), "notificationUUID", base.MAX_ID_CHARS
        )
        return Verified(
            signed_id=uuid, timestamp=notification["signedDate"] // 1000, payload=notification
        )

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        kind = base.bounded_text(payload.get("notificationType"), "notificationType", 100)
        subtype = payload.get("subtype")
        if subtype is not None:
            kind = f"{kind}.{base.bounded_text(subtype, 'subtype', 100)}"
        uuid = base.bounded_text(verified.signed_id, "notificationUUID", base.MAX_ID_CHARS)
        return [Identity(uuid, kind)]

    def sign(
        self,
        secret: str,
        body: bytes,
        *,
        timestamp: int,
        event_id: str | None = None,
        event_type: str | None = None,
        url: str = "",
    ) -> Signed:
        """``body`` (a decoded notification) as Apple would send it, signed with a development
        pin; nested ``transactionInfo`` / ``renewalInfo`` objects are signed into their JWS."""
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        found = _pem_certificates(secret)
        key_block = _PEM_PRIVATE_KEY.search(secret)
        if len(found) != 3 or key_block is None:
            raise ConfigurationError(
                "app-store: sign with a development pin (leaf, intermediate, root, private key)"
            )
        private_key = load_pem_private_key(key_block[0].encode(), password=None)
        header = {"alg": jose.ES256, "x5c": [base64.b64encode(der).decode() for der in found]}

        def signed(claims: Mapping[str, Any]) -> str:
            encoded = ".".join(
                jose.b64url_encode(json.dumps(part, separators=(",", ":")).encode())
                for part in (header, claims)
            )
            signature = jose.sign_bytes(private_key, jose.ES256, encoded)
            return f"{encoded}.{jose.b64url_encode(signature)}"

        document = base.object_to_sign(body) or {}
        document.setdefault("signedDate", timestamp * 1000)
        data = document.get("data")
        if isinstance(data, dict):
            for signed_name, decoded_name in _NESTED:
                nested = data.pop(decoded_name, None)
                if isinstance(nested, dict):
                    nested.setdefault("signedDate", timestamp * 1000)
                    data[signed_name] = signed(nested)
        wrapped = json.dumps({"signedPayload": signed(document)}).encode()
        return Signed({"Content-Type": "application/json"}, wrapped, url)
