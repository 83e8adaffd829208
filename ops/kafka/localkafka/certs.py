"""A secured cluster's certificates, made with openssl into its `tls/` folder.

One CA per cluster (`ca.pem`, the brokers' truststore and the clients' `ssl_cafile`), a
certificate for the brokers (CN=broker, their PKCS12 keystore `broker.p12` and, as PEM, what
the readiness probe shows on the inter-broker listener) and, for mTLS, one per user
(CN=NAME). Every certificate names localhost and 127.0.0.1, so clients check the host as
they would in production.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .common import ClusterError

DAYS = "3650"
SAN = "subjectAltName=DNS:localhost,IP:127.0.0.1"


def tls_dir(d: Path) -> Path:
    return d / "tls"


def make_ca(d: Path) -> None:
    """The cluster's CA (`ca.key` stays in the folder, `ca.pem` is for everyone)."""
    t = tls_dir(d)
    t.mkdir(mode=0o700, parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", DAYS,
             "-subj", "/CN=inferstream local cluster CA", "-keyout", str(t / "ca.key"),
             "-out", str(t / "ca.pem"), "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip


def make_cert(d: Path, name: str, san: str = SAN) -> tuple[Path, Path]:
    """A key (unencrypted PEM, owner-only) and a certificate for CN=name signed by the CA,
    usable by a server and a client alike, for the hosts `san` names; returns (certificate,
    key)."""
    t = tls_dir(d)
    key, csr, cert = t / f"{name}.key", t / f"{name}.csr", t / f"{name}.pem"
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
             "-keyout", str(key), "-out", str(csr))  # fmt: skip
    key.chmod(0o600)
    ext = t / f"{name}.ext"
    ext.write_text(f"{san}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(t / "ca.pem"), "-CAkey",
             str(t / "ca.key"), "-CAcreateserial", "-days", DAYS, "-sha256", "-extfile",
             str(ext), "-out", str(cert))  # fmt: skip
    csr.unlink()
    ext.unlink()
    return cert, key


def make_keystore(d: Path, name: str, password: str) -> Path:
    """`NAME.p12`: name's key and certificate (with the CA) as the JVM reads them."""
    t = tls_dir(d)
    p12 = t / f"{name}.p12"
    _openssl("pkcs12", "-export", "-name", name, "-in", str(t / f"{name}.pem"), "-inkey",
             str(t / f"{name}.key"), "-certfile", str(t / "ca.pem"), "-out", str(p12),
             "-passout", f"pass:{password}")  # fmt: skip
    p12.chmod(0o600)
    return p12


def _openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise ClusterError("--security needs openssl on PATH to make the cluster's certificates")
    p = subprocess.run([exe, *args], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise ClusterError(f"openssl {args[0]} failed: {p.stderr.strip()}")
