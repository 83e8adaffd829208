"""Start-up checks of a TLS handshake that a broker answered and one side refused: the line
names the certificate setting to change (ssl_cafile, ssl_certfile), not the bootstrap servers
as for a broker that does not answer."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import KafkaError

from inferstream.config import Config
from inferstream.kafka import preflight as checks
from tests.unit.kafka.test_preflight import CERTIFICATE

#: librdkafka's log lines of TLS handshakes that failed on a local `--security ssl` cluster:
#: ssl_cafile another CA; no client certificate; an expired one.
UNVERIFIED_BROKER = (
    "FAIL [rdkafka#consumer-1] [thrd:ssl://127.0.0.1:9093/bootstrap]: ssl://127.0.0.1:9093/"
    "bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: "
    "broker certificate could not be verified, verify that ssl.ca.location is correctly "
    "configured or root CA certificates are installed (install ca-certificates package) "
    "(after 5ms in state SSL_HANDSHAKE)")
NO_CERTIFICATE = (
    "FAIL [rdkafka#consumer-1] [thrd:ssl://127.0.0.1:9093/bootstrap]: ssl://127.0.0.1:9093/"
    "bootstrap: Receive failed: error:0A000412:SSL routines::ssl/tls alert bad certificate: "
    "SSL alert number 42 (after 9ms in state SSL_HANDSHAKE)")
EXPIRED_CERTIFICATE = (
    "FAIL [rdkafka#consumer-1] [thrd:ssl://127.0.0.1:9093/bootstrap]: ssl://127.0.0.1:9093/"
    "bootstrap: Receive failed: error:0A000416:SSL routines::ssl/tls alert certificate "
    "unknown: SSL alert number 46 (after 8ms in state SSL_HANDSHAKE)")


def _unreachable_line(config: Config, log_line: str) -> str:
    """The start-up check's line for a connection whose librdkafka log said `log_line`."""
    captured = checks._CapturedLog()
    captured.logger.error("%s", log_line)
    return checks._cannot_reach(config, KafkaError(KafkaError._TRANSPORT), captured.reason())


def test_a_broker_certificate_not_verified_names_ssl_cafile_not_the_servers() -> None:
    config = Config(bootstrap_servers="127.0.0.1:9093", security_protocol="SSL",
                    ssl_cafile="/etc/other-ca.pem")
    line = _unreachable_line(config, UNVERIFIED_BROKER)
    assert line.startswith("the Kafka brokers' certificate at 127.0.0.1:9093 could not be "
                           "verified against ssl_cafile (/etc/other-ca.pem) (SSL handshake "
                           "failed: ")
    assert line.endswith(": set ssl_cafile to the CA that signed the brokers' certificates, "
                         "and name the brokers as their certificates do")
    assert "--bootstrap-servers" not in line


def test_a_client_certificate_the_brokers_refuse_is_named_with_its_principal(
        tmp_path: Path) -> None:
    pem = tmp_path / "worker.pem"
    pem.write_text(CERTIFICATE)
    config = Config(bootstrap_servers="127.0.0.1:9093", security_protocol="SSL",
                    ssl_certfile=str(pem), ssl_keyfile=str(tmp_path / "worker.key"))
    line = _unreachable_line(config, EXPIRED_CERTIFICATE)
    assert line == (
        f"the Kafka cluster at 127.0.0.1:9093 did not accept the client certificate of "
        f"User:worker, ssl_certfile {pem} (Receive failed: error:0A000416:SSL routines::"
        "ssl/tls alert certificate unknown: SSL alert number 46): give one that a CA the "
        "brokers trust signed and that has not expired")
    bare = Config(bootstrap_servers="127.0.0.1:9093", security_protocol="SSL")
    assert _unreachable_line(bare, NO_CERTIFICATE) == (
        "the Kafka cluster at 127.0.0.1:9093 asks for a client certificate (Receive failed: "
        "error:0A000412:SSL routines::ssl/tls alert bad certificate: SSL alert number 42): "
        "set ssl_certfile and ssl_keyfile")
