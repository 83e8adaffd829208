"""The worker's allocator (issue 16.4): preloaded by one re-exec where the system has one,
never required, never preloaded twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferstream.errors import ConfigError
from inferstream.serving.allocator import JEMALLOC_CONF, MARKER, choose, find_allocator


def test_auto_preloads_jemalloc_with_a_conf_that_keeps_its_pages(tmp_path: Path) -> None:
    library = tmp_path / "libjemalloc.so.2"
    library.write_bytes(b"")
    choice = choose("auto", {"PATH": "/bin"}, (str(tmp_path / "lib*.so.2"),))
    assert choice.library == str(library)
    assert choice.env == {"PATH": "/bin", MARKER: str(library), "LD_PRELOAD": str(library),
                          "MALLOC_CONF": JEMALLOC_CONF}


def test_a_set_malloc_conf_and_other_preloads_are_kept(tmp_path: Path) -> None:
    library = tmp_path / "libjemalloc.so.2"
    library.write_bytes(b"")
    choice = choose(str(library), {"LD_PRELOAD": "/x/libfoo.so", "MALLOC_CONF": "narenas:2"})
    assert choice.env is not None
    assert choice.env["LD_PRELOAD"] == f"{library}:/x/libfoo.so"
    assert choice.env["MALLOC_CONF"] == "narenas:2"


def test_nothing_changes_without_one_with_system_or_once_preloaded(tmp_path: Path) -> None:
    assert find_allocator((str(tmp_path / "*.so"),)) is None
    none = choose("auto", {}, (str(tmp_path / "*.so"),))
    assert (none.library, none.env) == (None, None)
    assert "apt-get install libjemalloc2" in none.why
    assert choose("system", {}).env is None
    assert choose("auto", {MARKER: "/l/libjemalloc.so.2"}).env is None  # the re-executed one
    assert choose("auto", {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}).env is None  # Docker


def test_a_missing_library_is_a_one_line_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not auto, system or a library file"):
        choose(str(tmp_path / "nope.so"), {})
