"""A principal the cluster refuses for want of an ACL: one line naming what it may not use,
who it is, and the `inferstream acls` command that grants its role's ACLs."""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from pathlib import Path

from inferstream.config import Config, StreamConfig
from inferstream.kafka.errors import AuthorizationError

#: The DER of the commonName attribute's OID (2.5.4.3), then a string's tag and length.
_CN = re.compile(rb"\x06\x03\x55\x04\x03[\x0c\x13\x14\x16](?P<size>[\x01-\x7f])", re.DOTALL)
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----(?P<body>.+?)-----END CERTIFICATE-----",
                  re.DOTALL)


def principal(config: Config) -> str | None:
    """`User:NAME` as the cluster most likely knows this client: its SASL user name, else its
    certificate's CN (the usual `ssl.principal.mapping.rules`); None where neither is known."""
    if config.sasl_username:
        return f"User:{config.sasl_username}"
    if config.ssl_certfile:
        name = certificate_cn(config.ssl_certfile)
        return f"User:{name}" if name else None
    return None


def certificate_cn(path: str) -> str | None:
    """The subject's CN of the first certificate in a PEM file; None where it cannot be read."""
    try:
        found = _PEM.search(Path(path).read_text())
        der = base64.b64decode("".join(found.group("body").split())) if found else b""
    except (OSError, UnicodeDecodeError, binascii.Error):
        return None
    names = list(_CN.finditer(der))
    if not names:
        return None
    last = names[-1]  # the issuer's CN comes first, the subject's after it
    end = last.end() + last.group("size")[0]
    return der[last.end():end].decode("utf-8", "replace") or None


def grant_command(config: Config, role: str | None) -> str:
    """The `inferstream acls ... --apply` line an admin runs to grant `role`'s ACLs."""
    words = ["inferstream acls --principal", principal(config) or "User:NAME",
             "--role", role or "ROLE"]
    if config.topic_prefix != Config.topic_prefix:
        words += ["--topic-prefix", repr(config.topic_prefix)]
    if role == "stream":  # its pool is its group's: its topics and group say its ACLs
        words += _stream_settings(config.stream)
    elif config.pool != Config.pool:
        words += ["--pool", config.pool]
    return " ".join([*words, "--apply"])


def _stream_settings(stream: StreamConfig) -> list[str]:
    """The stream's settings that its ACLs depend on (`inferstream acls` refuses the stream
    role without its topics)."""
    words = ["--input-topic", stream.input_topic, "--output-topic", stream.output_topic]
    if stream.group:
        words += ["--group", stream.group]
    if stream.on_error != StreamConfig.on_error:
        words += ["--on-error", stream.on_error]
    if stream.dead_letter_topic:
        words += ["--dead-letter-topic", stream.dead_letter_topic]
    return [shlex.quote(word) for word in words]


def not_authorized(config: Config, role: str | None, what: str) -> AuthorizationError:
    """The error for a principal that may not `what` ("describe topic x", "join group g")."""
    who = principal(config) or "this principal"
    return AuthorizationError(
        f"{who} may not {what} at {config.bootstrap_servers}: no ACL allows it; an admin "
        f"grants {'the ' + role if role else 'its role'}'s ACLs with "
        f"`{grant_command(config, role)}`")
