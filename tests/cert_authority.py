"""A certificate authority and RSA leaf certificates minted in the tests (never a real sender's),
and pins of them as the providers registry keeps them (ingest/schemes/certificates.py)."""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from webhook_inbox.ingest.schemes.certificates import pin_text

SNS_CERT_URL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-test0001.pem"
PAYPAL_CERT_URL = "https://api.paypal.com/v1/notifications/certs/CERT-test-0001"
TOPIC = "arn:aws:sns:us-east-1:123456789012:orders"


@dataclass(frozen=True)
class Leaf:
    certificate_pem: str
    private_key_pem: str

    def pin(self, url: str, *, with_key: bool = True) -> str:
        return pin_text(url, self.certificate_pem, self.private_key_pem if with_key else None)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@functools.cache
def authority() -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("webhook-inbox test CA"))
        .issuer_name(_name("webhook-inbox test CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        # What Python 3.13's strict verification (VERIFY_X509_STRICT) asks of a CA.
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def authority_pem() -> bytes:
    return authority()[1].public_bytes(serialization.Encoding.PEM)


@functools.cache
def leaf(
    common_name: str = "sns.amazonaws.com",
    *,
    days_valid: int = 30,
    starts_in_days: int = -1,
    kind: str = "rsa",
    dns_name: str | None = None,
) -> Leaf:
    """A leaf certificate from :func:`authority`: RSA unless ``kind`` is ``ec`` (a wrong key)."""
    ca_key, ca_cert = authority()
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if kind == "rsa"
        else ec.generate_private_key(ec.SECP256R1())
    )
    start = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=starts_in_days)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=days_valid))
        # Python 3.13's strict verification wants the issuer's key named in the leaf.
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if dns_name:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(dns_name)]), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    return Leaf(
        cert.public_bytes(serialization.Encoding.PEM).decode(),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    )
