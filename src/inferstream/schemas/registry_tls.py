"""TLS to an https schema registry: the CA its certificate is checked against and the client
certificate of a registry that asks for one (mTLS), from settings of the registry's own
(`schema_registry_cafile`, `schema_registry_certfile`, `schema_registry_keyfile`), as
Confluent's clients keep `schema.registry.ssl.*` apart from the brokers' `ssl.*`.

A file that does not load is a ConfigError naming its setting; a handshake that one side
refused is one line naming the registry's URL and the setting to change (`refusal`).
"""

from __future__ import annotations

import re
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from inferstream.config.core import REGISTRY_TLS_FILES
from inferstream.config.fields import check_readable
from inferstream.errors import ConfigError

if TYPE_CHECKING:
    from inferstream.config import Config

CA_SETTING = "schema_registry_cafile (INFERSTREAM_SCHEMA_REGISTRY_CAFILE)"
CERT_SETTINGS = ("schema_registry_certfile and schema_registry_keyfile "
                 "(INFERSTREAM_SCHEMA_REGISTRY_CERTFILE, INFERSTREAM_SCHEMA_REGISTRY_KEYFILE)")
#: The TLS alerts of a server that refused this client's certificate (none given, expired,
#: signed by a CA it does not trust), as Python's ssl names them.
_CERTIFICATE_REFUSED = re.compile(
    r"ALERT_(BAD_CERTIFICATE|CERTIFICATE_\w+|UNKNOWN_CA|UNSUPPORTED_CERTIFICATE|ACCESS_DENIED)")
#: OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
_NAME_MISMATCH = (62, 64)


@dataclass(frozen=True)
class RegistryTls:
    """The registry's CA (None: the system's CAs) and this client's certificate and key."""

    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    @classmethod
    def of(cls, config: Config) -> RegistryTls:
        return cls(config.schema_registry_cafile, config.schema_registry_certfile,
                   config.schema_registry_keyfile)

    def context(self) -> ssl.SSLContext:
        """The client's TLS context; ConfigError in one line naming the setting of a file
        that cannot be read or does not load."""
        for name, path in zip(REGISTRY_TLS_FILES, (self.cafile, self.certfile, self.keyfile),
                              strict=True):
            check_readable(name, path)
        try:
            context = ssl.create_default_context(cafile=self.cafile)
        except ssl.SSLError as exc:
            raise ConfigError(f"schema_registry_cafile {self.cafile}: it holds no PEM CA "
                              f"certificate ({_why(exc)})") from exc
        if self.certfile is not None:
            try:  # an encrypted key would make OpenSSL ask for its password on the terminal
                context.load_cert_chain(self.certfile, self.keyfile, password=self._encrypted)
            except ssl.SSLError as exc:
                raise ConfigError(
                    f"schema_registry_certfile {self.certfile} and schema_registry_keyfile "
                    f"{self.keyfile} do not load as a certificate and its key ({_why(exc)})"
                ) from exc
        return context

    def _encrypted(self) -> NoReturn:
        raise ConfigError(f"schema_registry_keyfile {self.keyfile} is encrypted: give the key "
                          "unencrypted (openssl pkey -in KEY -out PLAIN), readable by this "
                          "user alone")

    def refusal(self, url: str, reason: object) -> str | None:
        """The line for a TLS handshake with the registry at `url` that failed for
        `reason`: its certificate not verified, or this client's refused; None for any other
        failure."""
        if isinstance(reason, ssl.SSLCertVerificationError):
            return self._unverified(url, reason)
        if isinstance(reason, ssl.SSLError) and _CERTIFICATE_REFUSED.search(str(reason.reason)):
            if self.certfile is None:
                return (f"the schema registry at {url} asks for a client certificate "
                        f"({reason.reason}): set {CERT_SETTINGS}")
            return (f"the schema registry at {url} did not accept the client certificate of "
                    f"schema_registry_certfile {self.certfile} ({reason.reason}): give one "
                    "that a CA the registry trusts signed and that has not expired")
        ended = _ended(reason)
        if ended is None:
            return None
        # TLS 1.3: a server that refuses a client's certificate may close the connection
        # before its alert is read; TLS 1.2: it may fail the handshake without saying why
        return f"the schema registry at {url} {ended}: " + (
            f"if it asks for a client certificate, set {CERT_SETTINGS}" if self.certfile is None
            else f"if it did not accept the client certificate of schema_registry_certfile "
                 f"{self.certfile}, give one that a CA the registry trusts signed and that "
                 "has not expired")

    def _unverified(self, url: str, reason: ssl.SSLCertVerificationError) -> str:
        why = reason.verify_message or reason.reason or str(reason)
        if reason.verify_code in _NAME_MISMATCH:
            host = urllib.parse.urlsplit(url).hostname
            return (f"the schema registry's certificate at {url} is not valid for {host} "
                    f"({why}): name the registry in schema_registry_url as its certificate "
                    "does")
        ca = self.cafile or "none: the system's CAs; ssl_cafile is for the brokers only"
        return (f"the schema registry's certificate at {url} could not be verified against "
                f"schema_registry_cafile ({ca}) ({why}): set {CA_SETTING} to the CA that "
                "signed it")


def _ended(reason: object) -> str | None:
    """What the registry did where it ended a TLS connection without saying why."""
    if isinstance(reason, ssl.SSLEOFError | ConnectionResetError | BrokenPipeError):
        return f"ended the TLS connection without an answer ({_why(reason)})"
    if isinstance(reason, ssl.SSLError) and reason.reason == "SSLV3_ALERT_HANDSHAKE_FAILURE":
        return f"refused the TLS handshake ({reason.reason})"
    return None


def _why(exc: OSError) -> str:
    """OpenSSL's reason, without the line of CPython's source that raised it."""
    reason = getattr(exc, "reason", None)
    return str(reason or re.sub(r" \(_ssl\.c:\d+\)$", "", str(exc)))
