"""`inferstream acls --principal TYPE:NAME`: the ACLs each role needs (see `client.acls`),
printed as kafka-acls.sh arguments or JSON, and with `--apply` created through the admin API
with the connection settings given (an admin's). Exit codes: 0 done, 2 an error (a bad
principal, a stream without its topics, a binding the cluster refused)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from inferstream.client.acls import (
    ROLES,
    Binding,
    check_principal,
    default_roles,
    role_bindings,
)
from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.errors import AuthorizationError, KafkaSetupError
from inferstream.kafka.refusals import principal as principal_of

APPLY_TIMEOUT_S = 15.0


def acls_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--principal", required=True, metavar="TYPE:NAME",
                        help="whom the bindings allow, e.g. User:worker")
    parser.add_argument("--role", action="append", choices=ROLES, dest="roles",
                        help="only this role's bindings (repeatable; default: worker, "
                        "controller, sysinfo, client, and stream where --input-topic and "
                        "--output-topic are set; admin, for topics create, only when named)")
    parser.add_argument("--pools", nargs="+", metavar="POOL",
                        help="pools whose task topics and groups to include (default: --pool)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON array of the bindings (default: kafka-acls.sh "
                        "arguments)")
    parser.add_argument("--apply", action="store_true",
                        help="create the bindings on the cluster (the connection settings "
                        "must be an admin's), then print them (default: only print them)")


def acls(args: argparse.Namespace, config: Config) -> int:
    principal = check_principal(args.principal)
    roles = tuple(dict.fromkeys(args.roles)) if args.roles else default_roles(config)
    bindings = role_bindings(config, roles, tuple(args.pools or (config.pool,)))
    if args.apply:
        apply_bindings(config, principal, bindings)
    if args.json:
        print(json.dumps([b.as_json(principal) for b in bindings], indent=2))
    else:
        print_bindings(principal, bindings)
    return 0


def print_bindings(principal: str, bindings: list[Binding]) -> None:
    """One line per binding, under a `# role` line per role."""
    role = None
    for binding in bindings:
        if binding.role != role:
            role = binding.role
            print(f"# {role}")
        print(binding.acls_args(principal))


def apply_bindings(config: Config, principal: str, bindings: list[Binding],
                   clients: KafkaClients = REAL_CLIENTS) -> None:
    """Create each binding once (a binding that exists already is no error); KafkaSetupError
    naming the first the cluster refused. The start-up checks come first: a wrong password or
    no broker was "cannot create ACL ...: Failed while waiting for controller" after 15 s."""
    from confluent_kafka import KafkaError, KafkaException

    from inferstream.kafka.preflight import Needs, preflight
    from inferstream.kafka.topics import admin_client

    preflight(config, Needs(), clients)
    unique = {kafka_binding(b, principal): b for b in bindings}
    admin = admin_client(config, clients)
    futures = admin.create_acls(list(unique), request_timeout=APPLY_TIMEOUT_S)
    for acl, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                raise not_an_admin(config) from exc  # the broker's text is a Java dump
            raise KafkaSetupError(f"cannot create ACL {unique[acl].acls_args(principal)}: "
                                  f"{exc.args[0].str()}") from exc
    print(f"created {len(unique)} ACL bindings for {principal}", file=sys.stderr)


def not_an_admin(config: Config) -> AuthorizationError:
    """The error for settings whose principal may not create ACLs (Alter on the cluster)."""
    who = principal_of(config) or "this principal"
    return AuthorizationError(
        f"{who} may not create ACLs at {config.bootstrap_servers} (Alter on the cluster): "
        "run `inferstream acls ... --apply` with an admin's settings (a super user's)")


def kafka_binding(binding: Binding, principal: str) -> Any:
    """The binding as confluent-kafka's AclBinding (ALLOW, any host)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    resource = ResourceType.BROKER if binding.resource == "cluster" else ResourceType[
        binding.resource.upper().replace("-", "_")]
    return AclBinding(resource, binding.name, ResourcePatternType[binding.pattern.upper()],
                      principal, "*", AclOperation[binding.operation.upper().replace("-", "_")],
                      AclPermissionType.ALLOW)
