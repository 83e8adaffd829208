"""A real Prometheus for tests: the `prometheus` binary (Debian's) on a free loopback port.

    with PrometheusServer([("inferstream-worker", "127.0.0.1:9100")], tmp_path,
                          rule_files=[REPO / "ops/prometheus/rules.yml"]) as prometheus:
        prometheus.wait_for_targets_up()
        prometheus.wait_for('inferstream_items_processed_total{pool="gpu"}')

It scrapes and evaluates rules every second; config, storage and its log live in the caller's
directory. Queries go through the HTTP API with urllib.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

Sample = dict[str, Any]
"""One entry of a query's `result`: {"metric": {labels}, "value": [time, "text"]}."""


class PrometheusError(Exception):
    """The test Prometheus server did not start or refused a request."""


def free_loopback_port() -> int:
    """A TCP port nothing listens on at the moment of asking."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrometheusServer:
    """Runs `binary` scraping `targets` ((job name, host:port) pairs); owns the process.

    `start` returns once /-/ready answers; `stop` (or leaving the `with`) ends the process.
    """

    def __init__(
        self,
        targets: Sequence[tuple[str, str]],
        directory: Path,
        *,
        rule_files: Sequence[Path] = (),
        binary: str = "prometheus",
        interval_s: float = 1.0,
        start_timeout_s: float = 30.0,
    ) -> None:
        self.targets = list(targets)
        self.directory = directory
        self.rule_files = [path.resolve() for path in rule_files]
        self.binary = binary
        self.interval_s = interval_s
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "prometheus.log"

    def config(self) -> dict[str, Any]:
        """The generated prometheus.yml (JSON is YAML), one scrape job per job name."""
        jobs: dict[str, list[str]] = {}
        for job, address in self.targets:
            jobs.setdefault(job, []).append(address)
        interval = f"{int(self.interval_s * 1000)}ms"
        return {
            "global": {"scrape_interval": interval, "scrape_timeout": interval,
                       "evaluation_interval": interval},
            "rule_files": [str(path) for path in self.rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": addresses}]}
                               for job, addresses in jobs.items()],
        }

    def start(self) -> None:
        # Prometheus reads rule_files as globs: a wrong path would load nothing, silently.
        missing = [str(path) for path in self.rule_files if not path.is_file()]
        if missing:
            raise PrometheusError(f"no rule file {', '.join(missing)}")
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "prometheus.yml"
        config.write_text(json.dumps(self.config(), indent=2))
        self.port = free_loopback_port()
        self._log = self.log_path.open("wb")
        try:
            self._process = subprocess.Popen(
                [self.binary, f"--config.file={config}",
                 f"--storage.tsdb.path={self.directory / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            self._close_log()
            raise PrometheusError(f"cannot run {self.binary}: {exc}") from exc
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s); safe to call twice."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._close_log()

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def query(self, expr: str) -> list[Sample]:
        """Evaluate `expr` now; the instant vector's samples (empty when nothing matches)."""
        data = self._api("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr!r} is a {data['resultType']}, not an instant vector")
        return cast(list[Sample], data["result"])

    def query_range(self, expr: str, start: float, end: float, step_s: float = 1.0
                    ) -> list[dict[str, Any]]:
        """Evaluate `expr` at every `step_s` from `start` to `end` (Unix times); the range
        vector's series, each {"metric": {labels}, "values": [[time, "text"], ...]}."""
        data = self._api("/api/v1/query_range?" + urllib.parse.urlencode(
            {"query": expr, "start": start, "end": end, "step": step_s}))
        if data["resultType"] != "matrix":
            raise PrometheusError(f"{expr!r} is a {data['resultType']}, not a range vector")
        return cast(list[dict[str, Any]], data["result"])

    def active_targets(self) -> list[dict[str, Any]]:
        targets = self._api("/api/v1/targets?state=active")["activeTargets"]
        return cast(list[dict[str, Any]], targets)

    def rule_groups(self) -> list[dict[str, Any]]:
        """The loaded rule groups, each with its rules' names, health and state."""
        return cast(list[dict[str, Any]], self._api("/api/v1/rules")["groups"])

    def wait_for_targets_up(self, timeout_s: float = 30.0) -> None:
        """Return once every configured target has been scraped successfully."""
        def all_up() -> bool:
            targets = self.active_targets()
            return len(targets) == len(self.targets) and all(
                target["health"] == "up" for target in targets)
        self._poll(all_up, timeout_s, lambda: f"targets not all up: {self._target_health()}")

    def wait_for(self, expr: str, timeout_s: float = 30.0) -> list[Sample]:
        """Poll `expr` until it returns samples; those samples."""
        found: list[Sample] = []

        def matched() -> bool:
            found[:] = self.query(expr)
            return bool(found)
        self._poll(matched, timeout_s, lambda: f"{expr!r} returned nothing")
        return found

    def _poll(self, done: Callable[[], bool], timeout_s: float, why: Callable[[], str]) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            self._check_running()
            if time.monotonic() > deadline:
                raise PrometheusError(f"after {timeout_s:g} s {why()}")
            time.sleep(self.interval_s / 4)

    def _target_health(self) -> list[tuple[str, str, str]]:
        return [(target["labels"].get("job", "?"), target["scrapeUrl"],
                 target["lastError"] or target["health"]) for target in self.active_targets()]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            self._check_running()
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5):  # noqa: S310 - http URL built here
                    return
            except urllib.error.HTTPError as exc:
                exc.close()  # 503 while the TSDB opens
            except OSError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise PrometheusError(
                    f"not ready after {self.start_timeout_s:g} s; log:\n{self._log_tail()}")
            time.sleep(0.1)

    def _api(self, path: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as reply:  # noqa: S310 - http URL built here
                answer = json.load(reply)
        except urllib.error.HTTPError as exc:
            with exc:
                body = exc.read().decode(errors="replace")
            raise PrometheusError(f"GET {path}: {exc.code} {body}") from exc
        except OSError as exc:
            raise PrometheusError(f"GET {path}: {exc}") from exc
        if answer.get("status") != "success":
            raise PrometheusError(f"GET {path}: {answer}")
        return cast(dict[str, Any], answer["data"])

    def _check_running(self) -> None:
        if self._process is None:
            raise PrometheusError("not started")
        code = self._process.poll()
        if code is not None:
            raise PrometheusError(f"{self.binary} exited with {code}; log:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        if self._log is not None:
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
