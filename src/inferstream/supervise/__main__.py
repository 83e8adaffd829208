"""`python -m inferstream.supervise --role R ... -- COMMAND...`: what `supervise` becomes."""

from __future__ import annotations

import argparse
import logging
import sys

from inferstream import LOG_FORMAT
from inferstream.supervise.parent import Supervisor
from inferstream.supervise.policy import RestartPolicy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferstream.supervise")
    parser.add_argument("--role", required=True)
    parser.add_argument("--grace-s", type=float, required=True)
    parser.add_argument("--delay-s", type=float, required=True)
    parser.add_argument("--max-delay-s", type=float, required=True)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format=LOG_FORMAT, stream=sys.stderr)
    policy = RestartPolicy(args.delay_s, args.max_delay_s)
    return Supervisor(args.role, args.command, policy, args.grace_s).run()


if __name__ == "__main__":
    sys.exit(main())
