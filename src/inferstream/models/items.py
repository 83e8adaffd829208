"""Fetching an item's bytes: local paths, file:// and http(s):// URIs, or inline data."""

from __future__ import annotations

import http.client
import os
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import IO

from inferstream.models.errors import ItemError

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Largest item accepted; bigger ones are refused before they are read in full."""

_CHUNK_BYTES = 256 * 1024
_HTTP_SCHEMES = ("http", "https")


def fetch_item(
    name: str,
    data: bytes | None = None,
    *,
    http_timeout_s: float = 10.0,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> bytes:
    """Return the bytes of one item; raise ItemError with a short reason when that fails.

    Inline `data` wins over `name`. `http_timeout_s` bounds the whole download, not each read.
    """
    if data is not None:
        if len(data) > max_bytes:
            raise ItemError(f"too large: {len(data)} bytes > {max_bytes}")
        return data
    scheme = urllib.parse.urlsplit(name).scheme.lower() if "://" in name else ""
    if scheme in _HTTP_SCHEMES:
        return _fetch_http(name, http_timeout_s, max_bytes)
    if scheme == "file":
        return _read_file(_file_uri_path(name), max_bytes)
    if scheme:
        raise ItemError(f"unsupported URI scheme: {scheme}")
    return _read_file(name, max_bytes)


def _file_uri_path(uri: str) -> str:
    path = file_uri_path(uri)
    if path is None:
        raise ItemError(f"file URI on another host: {uri}")
    return path


def file_uri_path(uri: str) -> str | None:
    """The local path of `file://` URI `uri` (None: of another host); its %XX escapes are
    the name's bytes, so a name that is not UTF-8 (`item_name`) opens as the file it is."""
    parts = urllib.parse.urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        return None
    return os.fsdecode(urllib.parse.unquote_to_bytes(parts.path))


def item_name(path: str) -> str:
    """How a job names the file at `path`: the path itself, or where it is not UTF-8 (a
    name written in Latin-1, read back with surrogates) a `file://` URI escaping its bytes,
    which Avro's strings can hold (the path failed the whole job: "surrogates not
    allowed")."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "file://" + urllib.parse.quote(os.fsencode(path))
    return path


def _read_file(path: str, max_bytes: int) -> bytes:
    try:
        # stat first: opening a FIFO or a device could block the decode thread for ever.
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise ItemError(f"is a directory: {path}")
        if not stat.S_ISREG(info.st_mode):
            raise ItemError(f"not a regular file: {path}")
        if info.st_size > max_bytes:
            raise ItemError(f"too large: {path} is over {max_bytes} bytes")
        with open(path, "rb") as f:
            return _read_capped(f, max_bytes, path)
    except FileNotFoundError:
        raise ItemError(f"missing file: {path}") from None
    except PermissionError:
        raise ItemError(f"permission denied: {path}") from None
    except OSError as exc:
        raise ItemError(f"cannot read {path}: {exc.strerror or exc}") from None


def _read_capped(f: IO[bytes], max_bytes: int, what: str, deadline: float | None = None) -> bytes:
    # Read in chunks so that a lying size (a growing file, a chunked response) still hits the cap.
    chunks: list[bytes] = []
    total = 0
    while chunk := f.read(_CHUNK_BYTES):
        total += len(chunk)
        if total > max_bytes:
            raise ItemError(f"too large: {what} is over {max_bytes} bytes")
        if deadline is not None and time.monotonic() > deadline:
            raise ItemError(f"timeout reading {what}")
        chunks.append(chunk)
    return b"".join(chunks)


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects only to http(s): urllib alone would also follow one to ftp://."""

    max_redirections = 5

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in _HTTP_SCHEMES:
            fp.close()  # the redirect response is ours to close once we refuse to follow it
            raise ItemError(f"redirect to a non-http URL refused: {newurl}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_HttpOnlyRedirects)


def _fetch_http(url: str, timeout_s: float, max_bytes: int) -> bytes:
    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(url, headers={"User-Agent": "inferstream"})  # noqa: S310 - scheme checked by the caller
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > max_bytes:
                raise ItemError(f"too large: {url} is {length} bytes > {max_bytes}")
            body: bytes = _read_capped(response, max_bytes, url, deadline)
            return body
    except urllib.error.HTTPError as exc:
        exc.close()
        raise ItemError(f"http {exc.code} from {url}") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise ItemError(f"timeout after {timeout_s:g}s fetching {url}") from None
        raise ItemError(f"cannot fetch {url}: {exc.reason}") from None
    except TimeoutError:
        raise ItemError(f"timeout after {timeout_s:g}s fetching {url}") from None
    except (http.client.HTTPException, OSError) as exc:
        raise ItemError(f"cannot fetch {url}: {type(exc).__name__}") from None
