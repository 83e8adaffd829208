"""Each role's arguments as the integration tests start it, which docker-compose.yml runs too.

The test helpers build their argv from `ROLE_ARGS`; tests/unit/ops/test_compose.py checks that
every compose service's command is `ROLE_ARGS[role]` plus only the role's `DEPLOYMENT_FLAGS`.
"""

from __future__ import annotations

#: `inferstream <args>` of each role, before the flags that differ by deployment.
ROLE_ARGS: dict[str, tuple[str, ...]] = {
    "topics": ("topics", "create"),
    "controller": ("controller",),
    "worker": ("worker",),
    "sysinfo": ("sysinfo", "--session-timeout-s", "6"),
}

#: Flags (each with one value) that belong to where a process runs: what it listens on and is
#: called, the model and device its machine serves, the threads its cores afford.
DEPLOYMENT_FLAGS: dict[str, frozenset[str]] = {
    "topics": frozenset(),
    "controller": frozenset({"--metrics-port", "--metrics-addr"}),
    "worker": frozenset({"--model", "--device", "--worker-id", "--decode-threads",
                         "--metrics-port", "--metrics-addr"}),
    "sysinfo": frozenset({"--port", "--bind", "--advertised-host"}),
}


def deployment_settings(role: str, command: list[str]) -> dict[str, str]:
    """The deployment flags of `command`, which must be `ROLE_ARGS[role]` and only those."""
    head = list(ROLE_ARGS[role])
    if command[:len(head)] != head:
        raise ValueError(f"{command} does not start with the tests' {head}")
    rest = command[len(head):]
    flags, values = rest[::2], rest[1::2]
    if len(flags) != len(values) or not set(flags) <= DEPLOYMENT_FLAGS[role]:
        raise ValueError(f"{command}: after {head}, only flag/value pairs of "
                         f"{sorted(DEPLOYMENT_FLAGS[role])} may differ from the tests")
    return dict(zip(flags, values, strict=True))
