"""`inferstream top`: a live terminal view of the workers and pools the sysinfo app sees.

`--once` prints the table once, `--once --json` the snapshot for scripts; both fail with one
line when the app is unreachable. The live view (curses) keeps retrying and shows why.
`--jobs` adds the running jobs with their priorities and weights, read from Kafka.
"""

from __future__ import annotations

import argparse
import curses
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inferstream.client.admin import print_json
from inferstream.config import Config, seconds_arg
from inferstream.errors import ConfigError, InferstreamError

if TYPE_CHECKING:
    from inferstream.client.client import JobStatus
    from inferstream.client.overview import Line, Snapshot, Style
    from inferstream.client.sysinfo_api import SysInfoClient

#: The running jobs, as `top --jobs` reads them each refresh (None: not asked for).
Jobs = Callable[[], "list[JobStatus]"] | None
#: How far back `top --jobs` looks for jobs that are still running.
JOBS_SINCE_S = 86_400.0

_QUIT_KEYS = (ord("q"), ord("Q"))
#: How often the live view looks at the keyboard while it waits for the next refresh.
_KEY_POLL_MS = 100


def top_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interval", type=seconds_arg, default=1.0, metavar="SECONDS",
                        help="seconds between refreshes (default: 1)")
    parser.add_argument("--once", action="store_true",
                        help="print the table once and exit (default: off)")
    parser.add_argument("--json", action="store_true",
                        help="print one snapshot as JSON and exit (implies --once; default: off)")
    parser.add_argument("--jobs", action="store_true",
                        help="also show the running jobs, highest priority first, with their "
                        "weights (reads the job-events topic: needs Kafka; default: off)")


def top(args: argparse.Namespace, config: Config) -> int:
    from inferstream.client.sysinfo_api import SysInfoClient

    if args.interval <= 0:
        raise ConfigError(f"--interval must be > 0, got {args.interval:g}")
    client = SysInfoClient.from_config(config, timeout_s=max(2.0, args.interval))
    jobs = _job_reader(config) if args.jobs else None
    if args.once or args.json:
        return _print_once(client, as_json=args.json, jobs=jobs)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise InferstreamError("inferstream top needs a terminal; use --once or --json")
    return _live(client, args.interval, jobs)


def _job_reader(config: Config) -> Callable[[], list[JobStatus]]:
    """Reads the running jobs; the cluster and the topics they are read from checked first,
    as `status` checks them: a TLS file that cannot be read, a broker that does not answer,
    or a topic this principal may not describe, is one line (exit 2), not librdkafka's log
    and a traceback."""
    from inferstream.client.client import Client
    from inferstream.client.listing import recent_jobs
    from inferstream.kafka.preflight import Needs, preflight

    preflight(config, Needs(topics=config.topics("jobs", "job-events"), role="client"))
    client = Client(config)  # its codec, as `status` reads the events
    return lambda: recent_jobs(config, client.codec, since_s=JOBS_SINCE_S,
                               clients=client.clients)


def _print_once(client: SysInfoClient, *, as_json: bool, jobs: Jobs = None) -> int:
    from inferstream.client.overview import Snapshot, fetch_snapshot, plain_text, render
    from inferstream.schemas.records import now_ms, plain_record

    snapshot = fetch_snapshot(client)
    running = None if jobs is None else [j for j in jobs() if not j.finished]
    if as_json:
        extra = {} if running is None else {"jobs": [j.as_dict() for j in running]}
        print_json({**plain_record(Snapshot, snapshot), **extra})
    else:
        print(plain_text(render(snapshot, url=client.base_url, now_ms=now_ms(), jobs=running)))
    return 0


def _live(client: SysInfoClient, interval_s: float, jobs: Jobs = None) -> int:
    """Run the curses view until `q`, Ctrl-C or SIGTERM; curses.wrapper restores the terminal."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        curses.wrapper(_screen_loop, client, interval_s, jobs)
    except KeyboardInterrupt:
        pass
    return 0


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _screen_loop(screen: Any, client: SysInfoClient, interval_s: float, jobs: Jobs) -> None:
    from inferstream.client.errors import SysInfoError
    from inferstream.client.overview import fetch_snapshot, render
    from inferstream.schemas.records import now_ms

    _hide_cursor()
    styles = _styles()
    screen.timeout(_KEY_POLL_MS)
    last: Snapshot | None = None
    running: list[JobStatus] | None = None
    while True:
        try:
            last, error = fetch_snapshot(client), None
            running = None if jobs is None else jobs()
        except (SysInfoError, InferstreamError) as exc:
            error = str(exc)
        width = screen.getmaxyx()[1]
        _draw(screen, render(last, url=client.base_url, now_ms=now_ms(), error=error,
                             width=width, jobs=running), styles)
        if _quit_within(screen, interval_s):
            return


def _quit_within(screen: Any, seconds: float) -> bool:
    """Read keys for `seconds`: True on a quit key; False when the time is up or on resize."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        key = screen.getch()
        if key in _QUIT_KEYS:
            return True
        if key == curses.KEY_RESIZE:
            return False
    return False


def _draw(screen: Any, lines: list[Line], styles: dict[Style, int]) -> None:
    screen.erase()
    height, width = screen.getmaxyx()
    for y, line in enumerate(lines[:height]):
        try:
            screen.addnstr(y, 0, line.text, max(0, width - 1), styles[line.style])
        except curses.error:
            pass  # a line cut by a window shrunk between getmaxyx and addnstr
    screen.refresh()


def _hide_cursor() -> None:
    try:
        curses.curs_set(0)
    except curses.error:
        pass  # a terminal that cannot hide it


def _styles() -> dict[Style, int]:
    """curses attributes per line style; colours only where the terminal has them."""
    from inferstream.client.overview import Style

    error = curses.A_BOLD
    if curses.has_colors():
        curses.use_default_colors()
        curses.init_pair(1, curses.COLOR_RED, -1)
        error |= curses.color_pair(1)
    return {Style.TITLE: curses.A_BOLD, Style.ERROR: error, Style.HEADING: curses.A_REVERSE,
            Style.ROW: curses.A_NORMAL, Style.UNHEALTHY: curses.A_DIM,
            Style.TOTAL: curses.A_BOLD}
