"""The sysinfo app: system-information samples in, the policy table and a data-access API out.

Plain modules (`intake`, `aggregates`, `workers`, `fleet`) hold the logic and know neither
Faust nor Kafka; the strategies and the entries they make are the policy's (`policy/`);
`app`, `web` and `faust_stop` (a workaround) are the only modules that import faust.
"""
