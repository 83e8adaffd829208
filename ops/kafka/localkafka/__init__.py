"""localkafka: the code behind ops/kafka/cluster, a local Apache Kafka (KRaft) cluster.

Standard library only (it runs before any virtualenv exists). Modules, bottom up:

* `common`: paths, constants, `ClusterError`, `log`;
* `jars`: Java discovery, the Maven-resolved classpath, JVM command lines, CDS archives;
* `state`: `cluster.json` (typed), the directory lock, node directories, wiping;
* `certs`, `security`: a secured cluster's certificates, users, passwords, listeners and
  client settings files (`start --security`);
* `processes`: broker pids, formatting, spawning, stopping;
* `probes`: port checks, the raw Kafka Metadata request, waiting until ready;
* `config`: a new cluster's layout (ports, id) and each node's `server.properties`;
* `commands`: the `cmd_*` subcommands; `cli`: the argparse `main`.
"""
