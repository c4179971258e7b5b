"""A throw-away certificate authority for TLS tests (``cryptography``), and the server side."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    """PEM files: a test CA, a server certificate for 127.0.0.1 / localhost it signed, and a
    client certificate it signed (for servers that require one)."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    client_cert_file: Path
    client_key_file: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_pki(directory: Path) -> Pki:
    """A CA and a server certificate for 127.0.0.1 / localhost signed by it."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("loadwatcher test CA"))
        .issuer_name(_name("loadwatcher test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
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
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pki = Pki(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / "client.pem",
        directory / "client.key",
    )
    pki.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
    _issue(ca, ca_key, "127.0.0.1", server, sans, pki.cert_file, pki.key_file)
    client = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
    _issue(
        ca, ca_key, "loadwatcher test client", client, [], pki.client_cert_file, pki.client_key_file
    )
    return pki


def _issue(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common: str,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName],
    cert_file: Path,
    key_file: Path,
) -> None:
    """Write a certificate (and its key) for ``usage`` signed by the CA."""
    now = dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert_file.write_bytes(
        builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    )
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def server_context(pki: Pki, *, require_client_cert: bool = False) -> ssl.SSLContext:
    """What a fake server listens with: the PKI's certificate, which clients verify by its CA;
    with ``require_client_cert`` clients must show a certificate the same CA signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.cert_file, pki.key_file)
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca_file)
    return context
