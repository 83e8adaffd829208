#!/usr/bin/env python3
"""Make the secrets of docker-compose.secure.yml, and Grafana's admin password of both
variants, into a git-ignored folder (default var/compose/; compose reads
INFERSTREAM_COMPOSE_SECRETS for another).

    ops/compose/make_secrets.py [--dir DIR] [--force]

What `ops/kafka/cluster start --security sasl_ssl` makes for a local cluster (localkafka's
`certs` and `security` do the work), for the brokers of docker-compose.yml:

* tls/: the CA (`ca.pem`; `ca.key` never leaves the folder) and the brokers' certificate
  CN=broker naming kafka-1, kafka-2, kafka-3 and localhost (`broker.p12`, their keystore);
* secrets/: a password per user (admin, controller, worker, sysinfo, stream, client) and the
  keystore's;
* clients/NAME.toml: each user's inferstream settings file, with the paths its container
  sees (/etc/inferstream/...); host/NAME.toml the same for the host (localhost:19092-19094);
* kafka/: what the brokers and the users service read: `kafka.env` (the keystore's password),
  `broker.properties` (the Kafka tools' mTLS settings, as User:broker), `jaas.conf`;
* grafana.env: Grafana's admin password (GF_SECURITY_ADMIN_PASSWORD).

The folder is owner-only; the files in it are readable by all (ca.key aside) because each
container runs as a user of its own (inferstream's 10001, Kafka's appuser 1000) and sees only
the files bound into it. A folder that holds secrets already is kept as it is unless --force
(new passwords would not match the SCRAM credentials the brokers hold until the users
service runs again, which `up` does).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ops" / "kafka"))

from localkafka.certs import make_ca, make_cert, make_keystore, tls_dir  # noqa: E402
from localkafka.security import (  # noqa: E402
    BROKER,
    USERS,
    make_passwords,
    password,
    secrets_dir,
    settings_text,
)

BROKERS = ("kafka-1", "kafka-2", "kafka-3")
#: The users of docker-compose.secure.yml: admin (a super user) and one per role.
COMPOSE_USERS = tuple(user for user in USERS if user != "nobody")
#: Where a role's container finds its settings, password and CA (the secure file binds them).
CONTAINER = Path("/etc/inferstream")
#: Where a broker's container finds its keystore, CA and the files of kafka/.
KAFKA_SECRETS = Path("/etc/kafka/secrets")
SERVERS = ",".join(f"{host}:9092" for host in BROKERS)
HOST_SERVERS = ",".join(f"localhost:{19092 + i}" for i in range(len(BROKERS)))
SAN = "subjectAltName=" + ",".join([*(f"DNS:{host}" for host in BROKERS),
                                    "DNS:localhost", "IP:127.0.0.1"])
MADE = ("tls", "secrets", "clients", "host", "kafka", "grafana.env")


def make(d: Path) -> None:
    """Every file the module's doc lists, into `d`."""
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    d.chmod(0o700)
    make_passwords(d, (*COMPOSE_USERS, "keystore", "grafana"))
    make_ca(d)
    make_cert(d, BROKER, SAN)
    make_keystore(d, BROKER, password(d, "keystore"))
    for folder, where, servers in (("clients", CONTAINER, SERVERS),
                                   ("host", d.resolve(), HOST_SERVERS)):
        (d / folder).mkdir(exist_ok=True)
        for user in COMPOSE_USERS:
            header = [f"# inferstream settings for User:{user} of docker-compose.secure.yml",
                      "# (written by ops/compose/make_secrets.py)"]
            (d / folder / f"{user}.toml").write_text(
                settings_text(header, where, "sasl_ssl", user, servers))
    write_kafka_files(d)
    (d / "grafana.env").write_text(f"GF_SECURITY_ADMIN_PASSWORD={password(d, 'grafana')}\n")
    readable(d)


def write_kafka_files(d: Path) -> None:
    store = password(d, "keystore")
    k = d / "kafka"
    k.mkdir(exist_ok=True)
    (k / "kafka.env").write_text(
        f"KAFKA_SSL_KEYSTORE_PASSWORD={store}\nKAFKA_SSL_KEY_PASSWORD={store}\n")
    (k / "broker.properties").write_text("\n".join([
        "# The Kafka tools as User:broker (mTLS), on a broker's BROKER listener (9094)",
        "security.protocol=SSL", "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={KAFKA_SECRETS / 'broker.p12'}",
        f"ssl.keystore.password={store}", f"ssl.key.password={store}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={KAFKA_SECRETS / 'ca.pem'}",
    ]) + "\n")  # fmt: skip
    # The brokers' SASL listeners take SCRAM users and log in as nobody themselves
    # (brokers speak mTLS to each other), so the section names no credential.
    (k / "jaas.conf").write_text(
        "KafkaServer {\n  org.apache.kafka.common.security.scram.ScramLoginModule required;\n};\n")


def readable(d: Path) -> None:
    """Every file readable by the containers' users, the CA's key by no one but the owner."""
    for path in d.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    (tls_dir(d) / "ca.key").chmod(0o600)
    (tls_dir(d) / f"{BROKER}.key").chmod(0o600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ops/compose/make_secrets.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=REPO / "var" / "compose",
                        help="the folder to make (default: var/compose/ of the repository)")
    parser.add_argument("--force", action="store_true",
                        help="make new secrets where the folder holds some already")
    args = parser.parse_args(argv)
    d: Path = args.dir
    if (secrets_dir(d) / "admin.password").exists() and not args.force:
        print(f"{d} holds secrets already: kept (--force makes new ones)", file=sys.stderr)
        return 0
    for name in MADE:
        if (d / name).is_dir():
            shutil.rmtree(d / name)
        else:
            (d / name).unlink(missing_ok=True)
    make(d)
    print(f"made the CA, certificates, passwords and settings files in {d}", file=sys.stderr)
    print(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
