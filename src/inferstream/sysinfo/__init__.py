"""The sysinfo app: system-information samples in, the policy table and a data-access API out.

Plain modules (`intake`, `aggregates`, `workers`, `strategies`, `policy`, `fleet`) hold the
logic and know neither Faust nor Kafka; `app` and `web` are the only modules that import faust.
"""
