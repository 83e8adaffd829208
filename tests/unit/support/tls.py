"""Certificates for the tests of the HTTP surfaces and the schema registry, made by `openssl`
in a folder: a CA, a server certificate it signed for 127.0.0.1 and localhost, a client
certificate it signed for another name, and a second CA nobody trusts."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Certificates:
    """PEM files: `ca` signed `cert` (key `key`) and `client` (key `client_key`, for the
    name client.invalid: a client certificate, or a server's for another host);
    `other_ca` signed nothing here."""

    ca: Path
    cert: Path
    key: Path
    other_ca: Path
    other_key: Path
    client: Path
    client_key: Path


def openssl(folder: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=folder, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def make_certificates(folder: Path) -> Certificates:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    for name in ("ca", "other"):
        openssl(folder, "req", "-x509", *_EC, "-keyout", f"{name}.key", "-out",
                f"{name}.pem", "-days", "2", "-subj", f"/CN=inferstream test {name}")
    for name, names in (("server", "IP:127.0.0.1,DNS:localhost"),
                        ("client", "DNS:client.invalid")):
        openssl(folder, "req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                f"/CN=inferstream test {name}")
        (folder / f"{name}.ext").write_text(f"subjectAltName={names}\n")
        openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey",
                "ca.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile",
                f"{name}.ext")
    return Certificates(folder / "ca.pem", folder / "server.pem", folder / "server.key",
                        folder / "other.pem", folder / "other.key", folder / "client.pem",
                        folder / "client.key")


def fetch(url: str, token: str | None = None, cafile: Path | None = None
          ) -> tuple[int, str, dict[str, str]]:
    """GET `url` with `token` as a bearer token, trusting `cafile`: status, body, headers."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - a test's loopback URL
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:  # noqa: S310
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode(), dict(exc.headers)
