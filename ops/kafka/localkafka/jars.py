"""Java discovery, the Kafka jars (resolved once with Maven into a cache), JVM command lines
and the class-data-sharing (AppCDS) archives that make JVM starts faster."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

from .common import (
    DEFAULT_JVM_OPTS,
    LOG4J_CONFIG,
    MIN_JAVA,
    POM,
    TOOL_JVM_OPTS,
    ClusterError,
    log,
)

# --------------------------------------------------------------------------------------------
# Java
# --------------------------------------------------------------------------------------------


def java_bin() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ClusterError(
            f"java not found on PATH (and JAVA_HOME unset): Java {MIN_JAVA}+ is needed"
        )
    return found


_JAVA_VERSION: dict[str, str] = {}


def check_java(java: str) -> str:
    """Fails unless `java` is Java 17+; returns its full `java -version` text."""
    if java in _JAVA_VERSION:
        return _JAVA_VERSION[java]
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise ClusterError(f"cannot run {java}: {e}") from e
    text = out.stderr + out.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        raise ClusterError(f"cannot tell the version of {java}:\n{text.strip()}")
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_x"
        major = int(m.group(2))
    if major < MIN_JAVA:
        raise ClusterError(
            f"{java} is Java {major}; Kafka needs Java {MIN_JAVA} or newer (set JAVA_HOME)"
        )
    _JAVA_VERSION[java] = text
    return text


# --------------------------------------------------------------------------------------------
# The jars
# --------------------------------------------------------------------------------------------


def kafka_version() -> str:
    m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    if not m:
        raise ClusterError(f"no <kafka.version> in {POM}")
    return m.group(1).strip()


def cache_root() -> Path:
    if os.environ.get("INFERSTREAM_KAFKA_CACHE"):
        return Path(os.environ["INFERSTREAM_KAFKA_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "inferstream"


def lib_dir() -> Path:
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
    return cache_root() / f"kafka-{kafka_version()}-{digest}" / "lib"


def ensure_jars() -> Path:
    """Resolve the broker's jars with Maven once; later calls reuse the cache (no mvn at all)."""
    lib = lib_dir()
    marker = lib / ".complete"
    if marker.is_file():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    with open(lib.parent / ".lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)  # several clusters may start at once on a cold cache
        if not marker.is_file():
            _resolve_jars(lib)
        return lib


def _resolve_jars(lib: Path) -> None:
    """Runs Maven into a temporary directory, then moves it to `lib` and marks it complete."""
    mvn = shutil.which("mvn")
    if not mvn:
        raise ClusterError(
            f"mvn (Apache Maven) not found on PATH: it is needed once, to fetch "
            f"Kafka {kafka_version()} from Maven Central into {lib}"
        )
    tmp = lib.parent / f"lib.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    base_cmd = [
        mvn,
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={tmp}",
    ]
    v = kafka_version()
    attempts = _maven_attempts(base_cmd, v)
    log(f"resolving Kafka {v} jars with Maven into {lib} ...")
    out = _run_maven(attempts)
    if out.returncode != 0:
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", out.stdout + out.stderr)
        tail = "\n".join(text.strip().splitlines()[-40:])
        shutil.rmtree(tmp, ignore_errors=True)
        raise ClusterError(f"Maven could not resolve Kafka {v} ({' '.join(base_cmd)}):\n{tail}")
    jars = sorted(p.name for p in tmp.glob("*.jar"))
    if not any(j.startswith(f"kafka_2.13-{v}") for j in jars):
        raise ClusterError(f"Maven succeeded but kafka_2.13-{v}.jar is not in {tmp}")
    shutil.rmtree(lib, ignore_errors=True)
    tmp.rename(lib)
    (lib / ".complete").write_text("\n".join(jars) + "\n")


def _maven_attempts(base_cmd: list[str], v: str) -> list[list[str]]:
    """Offline first when the local repository already holds the Kafka jar, then online."""
    m2 = Path.home() / ".m2" / "repository" / "org" / "apache" / "kafka" / "kafka_2.13" / v
    attempts = []
    if (m2 / f"kafka_2.13-{v}.jar").is_file():
        attempts.append([base_cmd[0], "-o", *base_cmd[1:]])  # local repo has it: no network
    attempts.append(base_cmd)
    return attempts


def _run_maven(attempts: list[list[str]]) -> subprocess.CompletedProcess[str]:
    """Runs the attempts in turn until one succeeds; returns the last one's result."""
    for cmd in attempts[:-1]:
        out = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if out.returncode == 0:
            return out
    return subprocess.run(attempts[-1], capture_output=True, text=True, stdin=subprocess.DEVNULL)


def classpath() -> str:
    return str(ensure_jars() / "*")


# --------------------------------------------------------------------------------------------
# JVM command lines and class-data sharing
# --------------------------------------------------------------------------------------------


def cds_archive(java: str, kind: str) -> Path:
    """Class-data-sharing archive of the classes a broker/tool JVM loads (AppCDS, JDK 13+).

    Mapping it skips loading and verifying ~5000 classes from the jars: about 0.5-1 s less per
    JVM start on two busy cores. It is written once, by the first JVM of that kind that exits
    cleanly (-XX:ArchiveClassesAtExit), and keyed by the jars and the exact JVM."""
    key = hashlib.sha256(f"{os.path.realpath(java)}\n{check_java(java)}".encode()).hexdigest()[:12]
    return ensure_jars().parent / "cds" / f"{kind}-{key}.jsa"


def cds_enabled() -> bool:
    return os.environ.get("INFERSTREAM_KAFKA_CDS", "1") not in ("0", "no", "false", "")


def java_cmd(
    java: str, main: str, *args: str, kind: str = "broker", cds_tmp: Path | None = None
) -> list[str]:
    """kind: "broker" (DEFAULT_JVM_OPTS or $INFERSTREAM_KAFKA_JVM_OPTS) or "tool"
    (TOOL_JVM_OPTS or $INFERSTREAM_KAFKA_TOOL_JVM_OPTS).
    With cds_tmp, this JVM writes its CDS archive there at exit (see promote_cds)."""
    if kind == "tool":
        opts = os.environ.get("INFERSTREAM_KAFKA_TOOL_JVM_OPTS")
        jvm = opts.split() if opts else list(TOOL_JVM_OPTS)
    else:
        opts = os.environ.get("INFERSTREAM_KAFKA_JVM_OPTS")
        jvm = opts.split() if opts else list(DEFAULT_JVM_OPTS)
    if cds_enabled():
        archive = cds_archive(java, kind)
        if archive.is_file():
            jvm.append(f"-XX:SharedArchiveFile={archive}")
        elif cds_tmp is not None:
            cds_tmp.parent.mkdir(parents=True, exist_ok=True)
            jvm += [f"-XX:ArchiveClassesAtExit={cds_tmp}", "-Xlog:cds*=off"]  # dump chatter
    return [
        java,
        *jvm,
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        "-cp",
        classpath(),
        main,
        *args,
    ]


def cds_tmp_path(java: str, kind: str) -> Path | None:
    if not cds_enabled() or cds_archive(java, kind).is_file():
        return None
    a = cds_archive(java, kind)
    return a.with_name(f"{a.name}.tmp-{os.getpid()}-{random.randrange(1 << 30)}")


def promote_cds(java: str, kind: str, tmp: Path | None, clean_exit: bool) -> None:
    """Moves an archive written at JVM exit into place, if the JVM exited cleanly."""
    if tmp is None or not tmp.exists():
        return
    final = cds_archive(java, kind)
    if clean_exit and tmp.stat().st_size > 0 and not final.exists():
        os.replace(tmp, final)
    else:
        with contextlib.suppress(OSError):
            tmp.unlink()
