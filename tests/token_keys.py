"""Keys and certificate chains for the token senders' tests, minted here (never a real sender's):
RSA and P-256 JSON Web Keys (Google, Plaid), and App Store chains (a root, an intermediate and a
leaf carrying Apple's OIDs, or deliberately lacking something)."""

from __future__ import annotations

import datetime
import functools
import json
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from webhook_inbox.ingest.schemes import jose
from webhook_inbox.ingest.schemes.app_store import INTERMEDIATE_OID, LEAF_OID


@functools.cache
def rsa_key(kid: str = "test-rsa-1") -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@functools.cache
def ec_key(kid: str = "test-ec-1") -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_jwk_text(kid: str, kind: str = "rsa") -> str:
    key = rsa_key(kid) if kind == "rsa" else ec_key(kid)
    return json.dumps(jose.private_jwk(key, kid))


def public_jwk(kid: str, kind: str = "rsa") -> dict[str, object]:
    return jose.public_jwk(jose.parse_jwk_text(private_jwk_text(kid, kind), kid))


def pem_private(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


@dataclass(frozen=True)
class Chain:
    """An App Store signing chain: the certificates and the leaf's private key."""

    root: x509.Certificate
    intermediate: x509.Certificate
    leaf: x509.Certificate
    leaf_key: ec.EllipticCurvePrivateKey

    def root_der(self) -> bytes:
        return self.root.public_bytes(serialization.Encoding.DER)

    def pin(self, *, with_key: bool = True) -> str:
        """A development pin (leaf, intermediate, root, key), or the root alone."""
        if not with_key:
            return pem(self.root)
        parts = [pem(self.leaf), pem(self.intermediate), pem(self.root), pem_private(self.leaf_key)]
        return "".join(parts)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _marker(oid: str) -> x509.UnrecognizedExtension:
    return x509.UnrecognizedExtension(x509.ObjectIdentifier(oid), b"\x05\x00")


@functools.cache
def chain(
    label: str = "test",
    *,
    leaf_oid: bool = True,
    intermediate_oid: bool = True,
    intermediate_ca: bool = True,
    leaf_days: tuple[int, int] = (-30, 365),
    years: int = 1,
) -> Chain:
    """A root CA, an intermediate CA and a leaf as Apple issues them (P-256 throughout)."""
    now = datetime.datetime.now(datetime.UTC)
    root_key = ec.generate_private_key(ec.SECP384R1())
    intermediate_key = ec.generate_private_key(ec.SECP256R1())
    leaf_key = ec.generate_private_key(ec.SECP256R1())

    def builder(
        subject: str, issuer: str, key: object, start: int, end: int
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(_name(subject))
            .issuer_name(_name(issuer))
            .public_key(key)  # type: ignore[arg-type]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now + datetime.timedelta(days=start))
            .not_valid_after(now + datetime.timedelta(days=end))
        )

    root_name, intermediate_name = f"{label} root CA", f"{label} intermediate CA"
    # Key identifiers and CA key usage: OpenSSL's X509_STRICT (Apple's library sets it) wants them.
    ca_usage = x509.KeyUsage(
        digital_signature=False, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    ski = x509.SubjectKeyIdentifier.from_public_key
    aki = x509.AuthorityKeyIdentifier.from_issuer_public_key
    root = (
        builder(root_name, root_name, root_key.public_key(), -365, 365 * years * 20)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(ca_usage, critical=True)
        .add_extension(ski(root_key.public_key()), critical=False)
        .sign(root_key, hashes.SHA384())
    )
    intermediate = (
        builder(intermediate_name, root_name, intermediate_key.public_key(), -365, 3650 * years)
        .add_extension(x509.BasicConstraints(ca=intermediate_ca, path_length=0), critical=True)
        .add_extension(ca_usage, critical=True)
        .add_extension(ski(intermediate_key.public_key()), critical=False)
        .add_extension(aki(root_key.public_key()), critical=False)
    )
    if intermediate_oid:
        intermediate = intermediate.add_extension(_marker(INTERMEDIATE_OID), critical=False)
    intermediate_cert = intermediate.sign(root_key, hashes.SHA384())
    leaf = builder(f"{label} signing", intermediate_name, leaf_key.public_key(), *leaf_days)
    leaf = leaf.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    leaf = leaf.add_extension(aki(intermediate_key.public_key()), critical=False)
    if leaf_oid:
        leaf = leaf.add_extension(_marker(LEAF_OID), critical=False)
    leaf_cert = leaf.sign(intermediate_key, hashes.SHA256())
    return Chain(root, intermediate_cert, leaf_cert, leaf_key)
