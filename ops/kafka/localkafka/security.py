"""`start --security`: a cluster's users, secrets, listeners and client settings files.

plaintext (the default) is one PLAINTEXT listener per broker, as ever. sasl_ssl and ssl put
clients on a secured listener (SCRAM-SHA-512 over TLS, or mTLS with the principal taken from
the certificate's CN) and brokers and controllers on mTLS listeners of their own (User:broker,
a super user), so no port of the cluster lets anyone in without a credential. The
`StandardAuthorizer` allows nothing without an ACL, except to the super users admin and broker.
"""

from __future__ import annotations

import secrets
import ssl
from collections.abc import Iterable
from pathlib import Path

from .certs import make_ca, make_cert, make_keystore, tls_dir
from .common import INTERNAL_OFFSET, ClusterError, log
from .state import ClusterState, NodeState

MODES = ("plaintext", "sasl_ssl", "ssl")
#: The users a secured cluster is made with: admin is a super user, `nobody` gets no ACL
#: ever, the others are for inferstream's roles (their ACLs are `inferstream acls`'s work).
USERS = ("admin", "worker", "controller", "sysinfo", "stream", "client", "nobody")
BROKER = "broker"
MECHANISM = "SCRAM-SHA-512"


def security_of(st: ClusterState) -> str:
    return st.get("security", "plaintext")


def is_secured(st: ClusterState) -> bool:
    return security_of(st) != "plaintext"


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ClusterError(f"--security must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def secure(st: ClusterState, mode: str) -> None:
    """Marks a new cluster's state as secured by `mode` (plaintext: left as it is), each
    broker getting its inter-broker port."""
    if check_mode(mode) == "plaintext":
        return
    st["security"] = mode
    for n in st["nodes"]:
        n["internal_port"] = n["port"] + INTERNAL_OFFSET


def secrets_dir(d: Path) -> Path:
    return d / "secrets"


def password(d: Path, name: str) -> str:
    return (secrets_dir(d) / f"{name}.password").read_text().strip()


def make_secrets(d: Path, st: ClusterState) -> None:
    """A new secured cluster's passwords (owner-only files) and certificates."""
    if not is_secured(st):
        return
    make_passwords(d, (*USERS, "keystore"))
    make_ca(d)
    make_cert(d, BROKER)
    make_keystore(d, BROKER, password(d, "keystore"))
    if security_of(st) == "ssl":
        for user in USERS:
            make_cert(d, user)
    log(f"made the CA, certificates and passwords of a {security_of(st)} cluster in {d}")


def make_passwords(d: Path, names: Iterable[str]) -> None:
    """A password drawn for each of `names` (16 random bytes, hex) in `d`'s owner-only
    secrets folder, one `NAME.password` file each."""
    s = secrets_dir(d)
    s.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in names:
        f = s / f"{name}.password"
        f.touch(mode=0o600)
        f.write_text(secrets.token_hex(16) + "\n")


def scram_args(d: Path, st: ClusterState) -> list[str]:
    """kafka-storage format's arguments that create the SCRAM users (KRaft keeps them in the
    bootstrap metadata, so only a node that is a controller needs them)."""
    if security_of(st) != "sasl_ssl":
        return []
    args = []
    for user in USERS:
        args += ["--add-scram", f"{MECHANISM}=[name={user},password={password(d, user)}]"]
    return args


def listener_fields(st: ClusterState, n: NodeState, controller: bool) -> dict[str, str]:
    """A broker's listeners, advertised listeners, protocol map and inter-broker listener."""
    port = n["port"]
    ctl = f",CONTROLLER://127.0.0.1:{n['controller_port']}" if controller else ""
    if not is_secured(st):
        return {"listeners": f"PLAINTEXT://127.0.0.1:{port}{ctl}",
                "advertised": f"PLAINTEXT://127.0.0.1:{port}",
                "protocols": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter": "PLAINTEXT"}  # fmt: skip
    client = "SASL_SSL" if security_of(st) == "sasl_ssl" else "SSL"
    internal = f"BROKER://127.0.0.1:{n['internal_port']}"
    return {"listeners": f"CLIENT://127.0.0.1:{port},{internal}{ctl}",
            "advertised": f"CLIENT://127.0.0.1:{port},{internal}",
            "protocols": f"CLIENT:{client},BROKER:SSL,CONTROLLER:SSL",
            "inter": "BROKER"}  # fmt: skip


def security_properties(d: Path, st: ClusterState) -> str:
    """The server.properties lines of a secured cluster (every node the same), or ""."""
    if not is_secured(st):
        return ""
    t = tls_dir(d)
    store = password(d, "keystore")
    lines = [
        "", f"# Security ({security_of(st)}): `cluster start --security`",
        "ssl.keystore.type=PKCS12", f"ssl.keystore.location={t / 'broker.p12'}",
        f"ssl.keystore.password={store}", f"ssl.key.password={store}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={t / 'ca.pem'}",
        # Brokers and controllers know each other by their certificate (CN=broker).
        "listener.name.broker.ssl.client.auth=required",
        "listener.name.controller.ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([^,]+)$/$1/,DEFAULT",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=false", f"super.users=User:admin;User:{BROKER}",
    ]  # fmt: skip
    if security_of(st) == "ssl":
        lines.append("listener.name.client.ssl.client.auth=required")
    else:
        lines += [f"sasl.enabled.mechanisms={MECHANISM}",
                  f"listener.name.client.{MECHANISM.lower()}.sasl.jaas.config="
                  "org.apache.kafka.common.security.scram.ScramLoginModule required;"]  # fmt: skip
    return "\n".join(lines) + "\n"


def probe_context(d: Path, st: ClusterState) -> ssl.SSLContext | None:
    """How the readiness probe speaks to a secured broker's inter-broker listener (as the
    broker, mTLS), or None for plaintext."""
    if not is_secured(st):
        return None
    t = tls_dir(d)
    ctx = ssl.create_default_context(cafile=str(t / "ca.pem"))
    ctx.load_cert_chain(str(t / f"{BROKER}.pem"), str(t / f"{BROKER}.key"))
    return ctx


def probe_port(st: ClusterState, n: NodeState) -> int:
    return n["internal_port"] if is_secured(st) and "internal_port" in n else n["port"]


def settings_dir(d: Path) -> Path:
    return d / "clients"


def write_client_settings(d: Path, st: ClusterState, servers: str) -> list[tuple[str, Path]]:
    """Each user's inferstream settings file (TOML, owner-only: it names the password's file)."""
    if not is_secured(st):
        return []
    out = settings_dir(d)
    out.mkdir(mode=0o700, exist_ok=True)
    written = []
    for user in USERS:
        f = out / f"{user}.toml"
        f.touch(mode=0o600)
        f.write_text(client_settings(d, st, user, servers))
        written.append((user, f))
    return written


def client_settings(d: Path, st: ClusterState, user: str, servers: str) -> str:
    return settings_text(
        [f"# inferstream settings for User:{user} on the {security_of(st)} cluster in {d}",
         "# (written by ops/kafka/cluster start; INFERSTREAM_CONFIG=this-file inferstream ...)"],
        d, security_of(st), user, servers)


def settings_text(header: list[str], d: Path, mode: str, user: str, servers: str) -> str:
    """`user`'s inferstream settings file for a `mode` cluster, naming its password's file
    and certificates where `d`'s secrets and tls folders are (as the client sees them)."""
    t = tls_dir(d)
    lines = [*header, f'bootstrap_servers = "{servers}"']
    if mode == "sasl_ssl":
        secret = secrets_dir(d) / f"{user}.password"
        lines += ['security_protocol = "SASL_SSL"', f'sasl_mechanism = "{MECHANISM}"',
                  f'sasl_username = "{user}"', f'sasl_password_file = "{secret}"']  # fmt: skip
    else:
        lines += ['security_protocol = "SSL"', f'ssl_certfile = "{t / (user + ".pem")}"',
                  f'ssl_keyfile = "{t / (user + ".key")}"']  # fmt: skip
    lines.append(f'ssl_cafile = "{t / "ca.pem"}"')
    return "\n".join(lines) + "\n"
