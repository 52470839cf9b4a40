"""Certificates and keys of the embedded cluster, made with the ``cryptography`` library.

Layout follows the Kubernetes PKI guide (https://kubernetes.io/docs/setup/best-practices/certificates/):
one cluster CA signs the kube-apiserver serving certificate and the client certificates of the
components; client identity is the certificate's CN (user) and O (groups), as described in
https://kubernetes.io/docs/reference/access-authn-authz/authentication/#x509-client-certificates.
Service-account tokens are signed with a separate key pair
(https://kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin/).

All keys are ECDSA P-256: as secure as RSA-3072 for this purpose and generated in milliseconds.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """PEM paths of one certificate and its private key."""

    cert: Path
    key: Path


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def create_ca(directory: Path, common_name: str = "netarena-k8s-ca") -> KeyPair:
    """Create a self-signed CA as ``ca.crt`` / ``ca.key`` in ``directory``.

    Returns:
        The written :class:`KeyPair`.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pair = KeyPair(directory / "ca.crt", directory / "ca.key")
    _write_private(pair.key, _key_pem(key))
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def _load_ca(ca: KeyPair) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{ca.key} is not an EC private key")
    return cert, key


def issue(
    ca: KeyPair,
    directory: Path,
    stem: str,
    common_name: str,
    groups: tuple[str, ...] = (),
    *,
    server_names: tuple[str, ...] = (),
    server_ips: tuple[str, ...] = (),
) -> KeyPair:
    """Issue a leaf certificate signed by ``ca`` and write ``<stem>.crt`` / ``<stem>.key``.

    Args:
        common_name: the Kubernetes user name for client certificates.
        groups: Kubernetes groups (certificate O attributes).
        server_names / server_ips: subject alternative names; when any is given the certificate
            is a serving certificate (server + client auth), otherwise client auth only.
    """
    ca_cert, ca_key = _load_ca(ca)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    serving = bool(server_names or server_ips)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if serving:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, groups))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if serving:
        alt: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
        alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    _write_private(pair.key, _key_pem(key))
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def create_service_account_key(directory: Path) -> tuple[Path, Path]:
    """Write the service-account signing key ``sa.key`` and its public key ``sa.pub``.

    kube-apiserver signs tokens with the private key (``--service-account-signing-key-file``)
    and verifies them with the public one (``--service-account-key-file``).
    """
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = directory / "sa.key", directory / "sa.pub"
    _write_private(private, _key_pem(key))
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public
