"""The cluster's PKI: a CA, the API server's serving certificate, an admin client certificate, a front-proxy CA and
client certificate (for aggregated APIs), service account keys.

Everything lives in the state directory and is made once; later `up`s reuse it, so a KUBECONFIG someone exported
keeps its credentials (only the port may change). ECDSA P-256 keeps generation instant; the service account key is
RSA because every Kubernetes component has always accepted that one.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
ADMIN_USER = "reservoir-admin"
FRONT_PROXY_CLIENT = "front-proxy-client"
VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class PKI:
    """Paths of the files the components are started with."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def apiserver_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.directory / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.directory / "admin.key"

    @property
    def front_proxy_ca_cert(self) -> Path:
        return self.directory / "front-proxy-ca.crt"

    @property
    def front_proxy_client_cert(self) -> Path:
        return self.directory / "front-proxy-client.crt"

    @property
    def front_proxy_client_key(self) -> Path:
        return self.directory / "front-proxy-client.key"

    @property
    def service_account_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def service_account_public_key(self) -> Path:
        return self.directory / "sa.pub"

    def all_files(self) -> list[Path]:
        return [
            self.ca_cert,
            self.ca_key,
            self.apiserver_cert,
            self.apiserver_key,
            self.admin_cert,
            self.admin_key,
            self.front_proxy_ca_cert,
            self.front_proxy_client_cert,
            self.front_proxy_client_key,
            self.service_account_key,
            self.service_account_public_key,
        ]

    def exists(self) -> bool:
        return all(path.is_file() for path in self.all_files())


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _leaf(
    ca_cert: x509.Certificate,
    ca_key,
    subject: x509.Name,
    usage: list,
    sans: list[x509.GeneralName] | None = None,
):
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(subject, ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _certificate_authority(common_name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(name, name, key.public_key())
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def ensure_pki(directory: Path) -> PKI:
    """Create the CA, certificates and keys in ``directory`` unless they are all there already."""
    pki = PKI(directory)
    if pki.exists():
        return pki
    directory.mkdir(parents=True, exist_ok=True)

    ca_key, ca_cert = _certificate_authority("reservoir-devcluster-ca")
    # Requests the API server proxies to aggregated APIs are vouched for by a client certificate of a CA of its own.
    front_proxy_ca_key, front_proxy_ca_cert = _certificate_authority("reservoir-devcluster-front-proxy-ca")

    serving_names = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    serving_sans: list[x509.GeneralName] = [x509.DNSName(name) for name in serving_names]
    serving_sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", KUBERNETES_SERVICE_IP)]
    apiserver_key, apiserver_cert = _leaf(
        ca_cert,
        ca_key,
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        [ExtendedKeyUsageOID.SERVER_AUTH],
        serving_sans,
    )
    admin_key, admin_cert = _leaf(
        ca_cert,
        ca_key,
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, ADMIN_USER),
            ]
        ),
        [ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    front_proxy_client_key, front_proxy_client_cert = _leaf(
        front_proxy_ca_cert,
        front_proxy_ca_key,
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, FRONT_PROXY_CLIENT)]),
        [ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    service_account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    _write_private(pki.ca_key, _key_pem(ca_key))
    _write_private(pki.apiserver_key, _key_pem(apiserver_key))
    _write_private(pki.admin_key, _key_pem(admin_key))
    _write_private(pki.front_proxy_client_key, _key_pem(front_proxy_client_key))
    _write_private(pki.service_account_key, _key_pem(service_account_key))
    pki.front_proxy_ca_cert.write_bytes(_cert_pem(front_proxy_ca_cert))
    pki.front_proxy_client_cert.write_bytes(_cert_pem(front_proxy_client_cert))
    pki.service_account_public_key.write_bytes(
        service_account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    pki.apiserver_cert.write_bytes(_cert_pem(apiserver_cert))
    pki.admin_cert.write_bytes(_cert_pem(admin_cert))
    pki.ca_cert.write_bytes(_cert_pem(ca_cert))
    return pki


# -- serving pairs outside the control plane's own PKI (Kueue) --------------------------------------------------------
RENEW_BEFORE = datetime.timedelta(days=1)


def pair_is_valid(cert_path: Path, key_path: Path, issuer: Path | None = None) -> bool:
    """True when both files parse, the key is the certificate's, the certificate is not about to expire and, when
    ``issuer`` is given, it was issued by that CA."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if issuer is not None:
            cert.verify_directly_issued_by(x509.load_pem_x509_certificate(issuer.read_bytes()))
    except (OSError, ValueError, TypeError, InvalidSignature):
        return False
    if key.public_key() != cert.public_key():
        return False
    return cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > RENEW_BEFORE


def _write_pair_atomically(directory: Path, key, cert: x509.Certificate) -> None:
    """Write tls.key then tls.crt, each through a temporary file and a rename, so a reader never sees half a file."""
    for name, data, mode in (("tls.key", _key_pem(key), 0o600), ("tls.crt", _cert_pem(cert), 0o644)):
        temporary = directory / f".{name}.tmp"
        temporary.write_bytes(data)
        temporary.chmod(mode)
        temporary.replace(directory / name)


def ensure_serving_pair(pki: PKI, directory: Path, *, common_name: str, ip: str = "127.0.0.1") -> Path:
    """A serving certificate for ``ip`` signed by the cluster's CA, as ``tls.crt``/``tls.key`` in ``directory``
    (made when missing, unreadable, about to expire or issued by another CA). Returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    if pair_is_valid(directory / "tls.crt", directory / "tls.key", issuer=pki.ca_cert):
        return directory
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    key, cert = _leaf(
        ca_cert,
        ca_key,
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]),
        [ExtendedKeyUsageOID.SERVER_AUTH],
        [x509.IPAddress(ipaddress.ip_address(ip)), x509.DNSName("localhost")],
    )
    _write_pair_atomically(directory, key, cert)
    return directory


def ensure_shared_serving_pair(directory: Path, *, common_name: str) -> bool:
    """A serving pair ``tls.crt``/``tls.key`` for 127.0.0.1 in a directory several clusters share (Kueue's
    hard-coded metrics certificate path), signed by a throwaway CA: nothing verifies it, nothing scrapes that
    endpoint here. It is written only when missing or invalid, under a file lock, so a cluster starting never
    swaps the pair under another cluster's running Kueue. Returns True when it wrote the pair."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if pair_is_valid(directory / "tls.crt", directory / "tls.key"):
            return False
        ca_key, ca_cert = _certificate_authority(f"{common_name}-ca")
        key, cert = _leaf(
            ca_cert,
            ca_key,
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]),
            [ExtendedKeyUsageOID.SERVER_AUTH],
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
        )
        _write_pair_atomically(directory, key, cert)
        return True
