"""Run Apicurio Registry 3 on loopback from Maven Central, for development and tests.

`registry build` fetches the server (the `all` tar.gz of io.apicurio:apicurio-registry-app,
Apicurio's own Quarkus fast-jar build) once with Maven into a cache keyed by pom.xml;
`registry start --port P --dir D [--users FILE]` runs it there with in-memory storage (H2,
Apicurio's default: lost at stop), HTTP basic auth for the users of FILE (NAME=PASSWORD
lines), and waits until the Confluent-compatible API at /apis/ccompat/v7 answers;
`registry stop --dir D` stops it. Standard library only; Java 21+ (JAVA_HOME, `java` on PATH,
or the newest JDK under /usr/lib/jvm).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
MIN_JAVA = 21  # Apicurio 3.3's classes are Java 21's (class file version 65)
API = "/apis/ccompat/v7"


class RegistryError(Exception):
    """A failure `registry` reports in one line and exit 1."""


def apicurio_version() -> str:
    found = re.search(r"<apicurio\.version>([^<]+)</apicurio\.version>", POM.read_text())
    if not found:
        raise RegistryError(f"no <apicurio.version> in {POM}")
    return found.group(1).strip()


def app_dir() -> Path:
    """Where the server is unpacked: under INFERSTREAM_KAFKA_CACHE (the local Kafka's cache
    root) or ~/.cache/inferstream, keyed by pom.xml's digest."""
    root = os.environ.get("INFERSTREAM_KAFKA_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "inferstream")
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
    return Path(root).expanduser() / f"apicurio-{apicurio_version()}-{digest}" / "app"


def ensure_app() -> Path:
    """The unpacked server, fetched with Maven the first time only (no mvn once cached)."""
    app = app_dir()
    if (app / ".complete").is_file():
        return app
    app.parent.mkdir(parents=True, exist_ok=True)
    with open(app.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes may build at once
        if not (app / ".complete").is_file():
            _fetch(app)
    return app


def _fetch(app: Path) -> None:
    mvn = shutil.which("mvn")
    if not mvn:
        raise RegistryError("mvn (Apache Maven) not found on PATH: it is needed once, to "
                            f"fetch Apicurio Registry {apicurio_version()} into {app}")
    tmp = app.parent / f"app.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    command = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM),
               "dependency:unpack@registry", f"-Dregistry.dir={tmp}"]
    print(f"registry: fetching Apicurio Registry {apicurio_version()} into {app} ...",
          file=sys.stderr)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (tmp / "quarkus-run.jar").is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
        shutil.rmtree(tmp, ignore_errors=True)
        raise RegistryError(f"Maven could not fetch the registry ({' '.join(command)}):\n{tail}")
    shutil.rmtree(app, ignore_errors=True)
    tmp.rename(app)
    (app / ".complete").touch()


def java_major(java: str) -> int:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60,
                             check=False)
    except OSError:
        return 0
    found = re.search(r'version "(\d+)', out.stderr + out.stdout)
    return int(found.group(1)) if found else 0


def find_java() -> str:
    """A Java 21+: JAVA_HOME's, `java` on PATH, else the newest JDK under /usr/lib/jvm."""
    home = os.environ.get("JAVA_HOME")
    candidates = [str(Path(home) / "bin" / "java")] if home else []
    candidates += [found] if (found := shutil.which("java")) else []
    candidates += [str(p) for p in Path("/usr/lib/jvm").glob("*/bin/java")]
    best = max(candidates, key=java_major, default="")
    if not best or java_major(best) < MIN_JAVA:
        raise RegistryError(f"Apicurio Registry needs Java {MIN_JAVA}+: none found (JAVA_HOME, "
                            f"PATH, /usr/lib/jvm); tried {', '.join(candidates) or 'nothing'}")
    return best


def read_users(path: Path) -> dict[str, str]:
    """NAME=PASSWORD lines (blank lines and # comments skipped)."""
    users = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, password = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9._-]+", name.strip()) or not password:
            raise RegistryError(f"{path}:{number}: not NAME=PASSWORD")
        users[name.strip()] = password
    return users


def settings(port: int, management_port: int, users: dict[str, str]) -> str:
    """The registry's config/application.properties (read from its working folder, above
    the properties Apicurio was built with)."""
    lines = ["quarkus.http.host=127.0.0.1", f"quarkus.http.port={port}",
             "quarkus.management.host=127.0.0.1", f"quarkus.management.port={management_port}",
             "quarkus.log.console.json=false", "quarkus.http.access-log.enabled=false"]
    if users:
        # Quarkus' embedded users, as Apicurio's own basic-auth example does, with no OIDC.
        lines += ["quarkus.oidc.tenant-enabled=false", "quarkus.http.auth.basic=true",
                  "quarkus.security.users.embedded.plain-text=true"]
        for name, password in users.items():
            lines += [f"quarkus.security.users.embedded.users.{name}={password}",
                      f"quarkus.security.users.embedded.roles.{name}=sr-admin"]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def answering(url: str) -> bool:
    """Whether the registry's API answers (401 counts: it is up and asks for a login)."""
    try:
        with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - our own loopback http URL
            return True
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code == 401
    except (urllib.error.URLError, OSError):
        return False


def start(port: int, folder: Path, users_file: Path | None, timeout_s: float) -> str:
    """Start the registry in `folder`; its API's URL once it answers."""
    app, java = ensure_app(), find_java()
    folder.mkdir(parents=True, exist_ok=True)
    if _running(folder) is not None:
        raise RegistryError(f"a registry already runs in {folder} (registry stop --dir)")
    config = folder / "config"
    config.mkdir(exist_ok=True)
    properties = config / "application.properties"
    properties.touch()
    properties.chmod(0o600)  # it holds the users' passwords
    properties.write_text(settings(port, free_port(), read_users(users_file)
                                   if users_file else {}))
    with open(folder / "registry.log", "wb") as log:
        # A class-data archive the first run writes and later runs map (JDK 19+), and the
        # client compiler only: a test's registry serves a few hundred requests.
        child = subprocess.Popen([java, "-Xmx512m", "-XX:TieredStopAtLevel=1",
                                  "-XX:+AutoCreateSharedArchive",
                                  f"-XX:SharedArchiveFile={app / 'registry.jsa'}",
                                  "-jar", str(app / "quarkus-run.jar")],
                                 cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    (folder / "registry.pid").write_text(str(child.pid))
    url = f"http://127.0.0.1:{port}{API}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RegistryError(f"the registry exited with {child.returncode}: see "
                                f"{folder / 'registry.log'}")
        if answering(url + "/subjects"):
            return url
        time.sleep(0.5)
    stop(folder)
    raise RegistryError(f"the registry did not answer at {url} in {timeout_s:.0f} s: see "
                        f"{folder / 'registry.log'}")


def _running(folder: Path) -> int | None:
    try:
        pid = int((folder / "registry.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def stop(folder: Path, timeout_s: float = 20) -> None:
    """Stop the registry of `folder` (SIGTERM, then SIGKILL); nothing if none runs."""
    pid = _running(folder)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _running(folder) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        if _running(folder) is not None:
            os.kill(pid, signal.SIGKILL)
    (folder / "registry.pid").unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="registry", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="fetch the server into the cache; print its folder")
    begin = sub.add_parser("start", help="start a registry; print its API's URL")
    begin.add_argument("--port", type=int, default=8080)
    begin.add_argument("--dir", type=Path, required=True, help="its folder (config, log)")
    begin.add_argument("--users", type=Path, help="NAME=PASSWORD lines: basic auth on")
    begin.add_argument("--timeout", type=float, default=120, help="seconds to wait for it")
    end = sub.add_parser("stop", help="stop the registry of --dir")
    end.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(ensure_app())
        elif args.command == "start":
            print(start(args.port, args.dir, args.users, args.timeout))
        else:
            stop(args.dir)
    except RegistryError as exc:
        print(f"registry: {exc}", file=sys.stderr)
        return 1
    return 0
