"""A new cluster's layout (node ids, ports, cluster id) and each node's server.properties."""

from __future__ import annotations

import base64
import random
import time
import uuid
from pathlib import Path

from .common import CONTROLLER_OFFSET, DEFAULT_PORT, INTERNAL_OFFSET, ClusterError, log
from .jars import kafka_version
from .probes import port_free
from .security import listener_fields, secure, security_properties
from .state import AnyNode, ClusterState, NodeState, is_broker, node_dir

# --------------------------------------------------------------------------------------------
# A new cluster
# --------------------------------------------------------------------------------------------


def new_cluster_id() -> str:
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def pick_auto_port(nbrokers: int) -> int:
    """A random base whose client, controller and inter-broker ports are free, below Linux's
    ephemeral range (32768+), where outgoing connections could take them meanwhile."""
    rnd = random.Random()
    for _ in range(200):
        base = rnd.randrange(20000, 32600 - INTERNAL_OFFSET - nbrokers)
        ports = [base + off + i for off in (0, CONTROLLER_OFFSET, INTERNAL_OFFSET)
                 for i in range(nbrokers)]  # fmt: skip
        if all(port_free(p) for p in ports):
            return base
    raise ClusterError("found no free port range for --port auto")


def new_state(
    d: Path,
    brokers: int | None,
    port: str | None,
    controller_port: str | None,
    settings: dict[str, str],
    security: str | None = None,
) -> ClusterState:
    """The state of a cluster about to be created from `start`'s options. Several brokers
    get a dedicated KRaft controller, id N+1 on controller port CBASE+N, as a production
    cluster has its own controller quorum: where every broker was a controller too, killing
    two of three took the metadata quorum with them, so the survivor could neither shrink
    the ISR nor refuse an acks=all write up front (it appended it and timed out, and the
    write showed up once the others came back). A secured cluster's brokers also get an
    inter-broker port, BASE+200+i."""
    nb = brokers or 1
    if nb < 1:
        raise ClusterError("--brokers must be >= 1")
    base = pick_auto_port(nb + 1) if port == "auto" else int(port or DEFAULT_PORT)
    cbase = int(controller_port) if controller_port else base + CONTROLLER_OFFSET
    nodes: list[NodeState] = [
        {"id": i + 1, "port": base + i, "controller_port": cbase + i, "formatted": False}
        for i in range(nb)
    ]
    st: ClusterState = {
        "kafka_version": kafka_version(),
        "cluster_id": new_cluster_id(),
        "dir": str(d),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "nodes": nodes,
        "settings": settings,
    }
    secure(st, security or "plaintext")
    if nb > 1:
        st["controller"] = {"id": nb + 1, "controller_port": cbase + nb, "formatted": False}
    ports = [n["port"] for n in nodes] + [n["controller_port"] for n in nodes]
    for p in ports + ([cbase + nb] if nb > 1 else []):
        if not 1024 <= p <= 65535:
            raise ClusterError(f"port {p} out of range 1024..65535")
    return st


def check_existing(
    d: Path,
    st: ClusterState,
    brokers: int | None,
    port: str | None,
    settings: dict[str, str],
    security: str | None = None,
) -> None:
    """`start` on an existing cluster: the options given must match it."""
    had = st.get("security", "plaintext")
    if security is not None and security != had:
        raise ClusterError(
            f"{d} holds a {had} cluster, not {security}; "
            f"use another --dir or `cluster clean --dir {d}` first"
        )
    if brokers is not None and brokers != len(st["nodes"]):
        raise ClusterError(
            f"{d} holds a {len(st['nodes'])}-broker cluster, not {brokers}; "
            f"use another --dir or `cluster clean --dir {d}` first"
        )
    if port is not None and port != "auto" and int(port) != st["nodes"][0]["port"]:
        raise ClusterError(
            f"{d} holds a cluster on port {st['nodes'][0]['port']}, not {port}; "
            f"use another --dir or `cluster clean --dir {d}` first"
        )
    if settings and settings != st.get("settings", {}):
        raise ClusterError(
            f"{d} holds a cluster with settings {st.get('settings', {})}, not {settings}; "
            f"use another --dir or `cluster clean --dir {d}` first"
        )
    if st.get("kafka_version") != kafka_version():
        log(f"note: {d} was created with Kafka {st.get('kafka_version')}, now {kafka_version()}")


# --------------------------------------------------------------------------------------------
# server.properties
# --------------------------------------------------------------------------------------------

_BROKER_ROLES = """\
# Generated by ops/kafka/cluster; rewritten on every start of this node.
process.roles={roles}
node.id={node_id}
controller.quorum.voters={voters}
listeners={listeners}
advertised.listeners={advertised}
listener.security.protocol.map={protocols}
inter.broker.listener.name={inter}
controller.listener.names=CONTROLLER
log.dirs={log_dirs}
"""

_CONTROLLER_ROLE = """\
# Generated by ops/kafka/cluster; rewritten on every start of this node.
# The cluster's dedicated KRaft controller: brokers killed and restarted do not take the
# metadata quorum with them, so the dead ones are fenced and the ISRs shrink as in production.
process.roles=controller
node.id={node_id}
controller.quorum.voters={voters}
listeners=CONTROLLER://127.0.0.1:{controller_port}
listener.security.protocol.map=CONTROLLER:{controller_protocol}
controller.listener.names=CONTROLLER
log.dirs={log_dirs}
"""

# What every node shares; the controller reads the topic defaults and the broker session
# timeout (it creates topics and fences brokers), each broker the rest.
_SERVER_PROPERTIES = """

# Durability: with 3 brokers one may die without losing acknowledged writes or transactions.
default.replication.factor={rf}
min.insync.replicas={isr}
offsets.topic.replication.factor={rf}
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={isr}
share.coordinator.state.topic.replication.factor={rf}
share.coordinator.state.topic.min.isr={isr}
unclean.leader.election.enable=false
num.partitions=1
# inferstream creates its topics itself (with their partition counts and configs).
auto.create.topics.enable=false

# Dev/test only: no 3 s wait before the first rebalance of a new group, and allow session
# timeouts down to 1 s so tests can notice dead consumers quickly (Kafka defaults: 3000, 6000).
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000

# Dev/test only: a broker that dies is fenced after 5 s, not 9 s, and one restarted after a
# stop or kill may register again sooner (the controller refuses a new incarnation while the
# old one's session lasts). Heartbeats every 1 s, so only 5 missed ones fence a live broker.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=5000

# Jobs may carry images inline, so allow records/batches up to 16 MiB (default 1 MiB).
# Producers need max.request.size and consumers fetch.max.bytes/max.partition.fetch.bytes to match.
message.max.bytes=16777216
replica.fetch.max.bytes=16777216

# Dev/test only: fewer internal partitions (default 50 each) so the first group or transaction
# on a fresh cluster does not wait for 50 x RF replicas to be created on two cores.
offsets.topic.num.partitions=10
transaction.state.log.num.partitions=10

# Few threads: two cores are shared by up to several brokers and the tests.
num.network.threads=2
num.io.threads=2
background.threads=2
num.replica.fetchers=1
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
"""


def server_properties(d: Path, st: ClusterState, n: AnyNode) -> str:
    nn = len(st["nodes"])
    voters = [st["controller"]] if "controller" in st else st["nodes"]
    fields = {
        "node_id": n["id"],
        "voters": ",".join(f"{m['id']}@127.0.0.1:{m['controller_port']}" for m in voters),
        "controller_port": n["controller_port"],
        "log_dirs": node_dir(d, n["id"]) / "data",
    }
    if not is_broker(n):
        protocol = "SSL" if "security" in st else "PLAINTEXT"
        roles = _CONTROLLER_ROLE.format(controller_protocol=protocol, **fields)
    elif "controller" in st:
        roles = _BROKER_ROLES.format(roles="broker", **listener_fields(st, n, False), **fields)
    else:
        roles = _BROKER_ROLES.format(
            roles="broker,controller", **listener_fields(st, n, True), **fields)  # fmt: skip
    shared = _SERVER_PROPERTIES.format(rf=3 if nn >= 3 else nn, isr=2 if nn >= 3 else 1)
    settings = st.get("settings", {})
    extra = "".join(f"{k}={v}\n" for k, v in settings.items())
    secured = security_properties(d, st)
    return roles + shared + secured + (f"\n# cluster start --set\n{extra}" if extra else "")


def write_config(d: Path, st: ClusterState, n: AnyNode) -> Path:
    nd = node_dir(d, n["id"])
    (nd / "data").mkdir(parents=True, exist_ok=True)
    props = nd / "server.properties"
    if "security" in st:  # it holds the keystore's password
        props.touch(mode=0o600)
        props.chmod(0o600)
    props.write_text(server_properties(d, st, n))
    return props
