"""Fetching items over http from a tiny server on 127.0.0.1: ok, 404, timeout, caps, redirects."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from inferstream.models import ItemError, fetch_item

BODY = b"\x89PNG pretend image bytes " * 40


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        routes = {
            "/ok": self._ok,
            "/slow": self._slow,
            "/chunked": self._chunked,
            "/to-ok": lambda: self._redirect("/ok"),
            "/to-ftp": lambda: self._redirect("ftp://127.0.0.1/secret"),
        }
        routes.get(self.path, lambda: self.send_error(404))()

    def _ok(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def _slow(self) -> None:
        # far past the client's 0.2 s timeout, so a stalled client still times out first;
        # nothing waits for this thread (ThreadingHTTPServer's are daemons)
        time.sleep(5.0)
        try:
            self._ok()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting, as the test wants

    def _chunked(self) -> None:
        # No Content-Length: only counting the bytes read can enforce the cap.
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(BODY)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep test output clean


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # polls for its shutdown every 10 ms, not 500: the module's teardown waits for it
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def reason(url: str, http_timeout_s: float = 10.0, max_bytes: int = 1 << 20) -> str:
    with pytest.raises(ItemError) as info:
        fetch_item(url, http_timeout_s=http_timeout_s, max_bytes=max_bytes)
    return info.value.reason


def test_ok(base_url: str) -> None:
    assert fetch_item(f"{base_url}/ok") == BODY


def test_404(base_url: str) -> None:
    assert reason(f"{base_url}/missing") == f"http 404 from {base_url}/missing"


def test_timeout(base_url: str) -> None:
    assert reason(f"{base_url}/slow", http_timeout_s=0.2) == (
        f"timeout after 0.2s fetching {base_url}/slow"
    )


def test_size_cap_from_content_length(base_url: str) -> None:
    assert reason(f"{base_url}/ok", max_bytes=100).startswith("too large")


def test_size_cap_without_content_length(base_url: str) -> None:
    assert reason(f"{base_url}/chunked", max_bytes=100).startswith("too large")
    assert fetch_item(f"{base_url}/chunked") == BODY


def test_redirects(base_url: str) -> None:
    assert fetch_item(f"{base_url}/to-ok") == BODY
    assert reason(f"{base_url}/to-ftp").startswith("redirect to a non-http URL refused")


def test_connection_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port once the socket is closed.
    assert reason(f"http://127.0.0.1:{port}/x").startswith(
        f"cannot fetch http://127.0.0.1:{port}/x"
    )
