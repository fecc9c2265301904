"""Certificates and kubeconfigs for the local control plane: a CA, the API server's serving
certificate, an admin client certificate (system:masters) and the service-account signing keys.

Everything is generated fresh for each control plane and lives in its work directory; nothing
here is meant for a real cluster.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _cert(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: tuple[x509.Certificate, rsa.RSAPrivateKey] | None,
    *,
    ca: bool = False,
    server_names: list[str] | None = None,
    client: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    issuer_name = issuer[0].subject if issuer else subject
    signing_key = issuer[1] if issuer else key
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    if server_names:
        import ipaddress

        sans: list[x509.GeneralName] = []
        for name in server_names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    if client:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(signing_key, hashes.SHA256())


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


@dataclass(frozen=True)
class Pki:
    """Paths of the generated certificates and keys."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def write_pki(directory: Path) -> Pki:
    """Generate a CA, a serving certificate, an admin client certificate and SA signing keys."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_cert = _cert(_name("recall-dev-ca"), ca_key, None, ca=True)
    serving_key = _key()
    serving = _cert(
        _name("kube-apiserver"),
        serving_key,
        (ca_cert, ca_key),
        server_names=[
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "10.0.0.1",
        ],
    )
    admin_key = _key()
    admin = _cert(
        _name("recall-admin", "system:masters"), admin_key, (ca_cert, ca_key), client=True
    )
    sa_key = _key()

    pki = Pki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    pki.ca_cert.write_bytes(_pem_cert(ca_cert))
    pki.serving_cert.write_bytes(_pem_cert(serving))
    pki.serving_key.write_bytes(_pem_key(serving_key))
    pki.admin_cert.write_bytes(_pem_cert(admin))
    pki.admin_key.write_bytes(_pem_key(admin_key))
    pki.sa_key.write_bytes(_pem_key(sa_key))
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for p in (pki.serving_key, pki.admin_key, pki.sa_key):
        p.chmod(0o600)
    return pki


def kubeconfig_dict(
    server: str,
    ca: Path,
    *,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
    user: str = "recall-admin",
    context: str = "recall-dev",
    namespace: str = "default",
) -> dict[str, object]:
    """A kubeconfig with one cluster, one user (client certificate or bearer token) and context.

    The certificates are referenced by path, not embedded: the Python client writes embedded
    certificates to temporary files it removes only at a normal exit, so every process killed
    by a test or a benchmark would leave three files behind."""
    credentials: dict[str, str] = {}
    if cert and key:
        credentials = {"client-certificate": str(cert), "client-key": str(key)}
    if token:
        credentials = {"token": token}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [
            {"name": context, "context": {"cluster": context, "user": user, "namespace": namespace}}
        ],
        "current-context": context,
    }
