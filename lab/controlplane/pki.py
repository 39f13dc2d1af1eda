"""The control plane's own certificate authority and the certificates signed by it.

ECDSA P-256 throughout: each key takes microseconds where RSA 2048 takes a large part of a second
on two cores, and the API server accepts it for serving, clients and service-account tokens (ES256).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lab.controlplane.layout import HOST, SERVICE_IP, Layout

VALIDITY = datetime.timedelta(days=2)
ADMIN_USER = "k8scifar-admin"
ADMIN_GROUP = "system:masters"  # bound to cluster-admin by the API server's bootstrap policy
APISERVER_NAMES = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files `create` writes."""

    folder: Path

    def cert(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    @property
    def service_account_public(self) -> Path:
        return self.folder / "sa.pub"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    return x509.Name([*parts, x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _builder(
    subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _leaf(
    pki: Pki, name: str, subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
) -> None:
    ca_key = serialization.load_pem_private_key(pki.key("ca").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca = x509.load_pem_x509_certificate(pki.cert("ca").read_bytes())
    key = _key()
    builder = _builder(subject, ca.subject, key.public_key()).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    pki.cert(name).write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    _write_key(pki.key(name), key)


def serving_cert(pki: Pki, name: str, ips: list[str], dns: list[str]) -> None:
    """A server certificate for `ips` and `dns` names, signed by the control plane's CA."""
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    sans += [x509.DNSName(d) for d in dns]
    _leaf(pki, name, _name(name), ExtendedKeyUsageOID.SERVER_AUTH, sans)


def create(layout: Layout) -> Pki:
    """The CA, the API server's serving certificate, the admin's client certificate and the
    service-account signing key, as PEM files in the layout's pki folder."""
    pki = Pki(layout.pki)
    pki.folder.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    subject = _name(f"k8scifar-controlplane-{layout.name}")
    ca = (
        _builder(subject, subject, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    pki.cert("ca").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.key("ca"), ca_key)
    serving_cert(pki, "apiserver", [HOST, SERVICE_IP], APISERVER_NAMES)
    _leaf(pki, "admin", _name(ADMIN_USER, ADMIN_GROUP), ExtendedKeyUsageOID.CLIENT_AUTH, [])
    sa_key = _key()
    _write_key(pki.key("sa"), sa_key)
    pki.service_account_public.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
