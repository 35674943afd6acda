"""The HTTP side of the admin API: :class:`AdminClient`, its errors and its URLs.

Every request has a timeout and ignores proxy settings; each answer is turned into the types
of :mod:`.model` and :mod:`.metrics`.

What the master (wheel 0.3.13.post1) answers, as observed:

* ``/health``: JSON ``{"status": "ok", "role": "leader", "service_ready": true, ...}``;
* ``/get_all_keys``: every key, one per line (raw bytes; a key holding a newline cannot be
  told apart from two keys);
* ``/query_key?key=K``: JSON ``{"success": true, "data": [replica, ...]}``, 404 with
  ``error_code`` -704 for a missing key;
* ``/batch_query_keys?keys=K1,K2``: JSON ``{"success": true, "data": {K: {"ok": ...,
  "error": ..., "values": [replica, ...], "disk_values": ...}}}``;
* ``/get_all_segments``: segment names, one per line; ``/get_segments_detail``: JSON with
  name, endpoint, protocol, status, capacity and allocated bytes per segment;
* ``/metrics``: Prometheus text; ``/metrics/summary``: one line of human-readable figures.

The master does **not** percent-decode query strings: a key is sent as its raw bytes.  Keys
with bytes the HTTP request line cannot carry (space, control characters, DEL) or with ``&``
cannot be queried at all (:meth:`AdminClient.can_query`); keys with ``,`` or that are not
valid UTF-8 are queried one by one instead of in a batch (the batch answer is JSON, which the
master fails to write for them: HTTP 503).
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .metrics import Metrics
from .model import KeyInfo, Segment, _batch_entry, _replicas, _segment

__all__ = ["DEFAULT_ADMIN_PORT", "AdminClient", "AdminError", "admin_url_for_master"]

#: Port of the master's admin HTTP server unless ``-metrics_port`` says otherwise.
DEFAULT_ADMIN_PORT = 9003
DEFAULT_TIMEOUT = 2.0
#: Seconds allowed for one read of a large listing (``/get_all_keys``) to make progress.
LISTING_TIMEOUT = 30.0
_READ_CHUNK = 1 << 20
#: Bytes of keys per ``/batch_query_keys`` request (the URL stays well below 64 KiB).
_BATCH_URL_BYTES = 16 * 1024

_UNSENDABLE = re.compile(rb"[\x00-\x20\x7f&]")


class AdminError(RuntimeError):
    """The admin API could not be reached, or answered something unexpected."""

    def __init__(self, message: str, url: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


def admin_url_for_master(master_addr: str, port: int = DEFAULT_ADMIN_PORT) -> str:
    """``http://HOST:port`` for a master at ``HOST:RPCPORT`` (its admin port's default)."""
    addr = master_addr.strip()
    if addr.startswith("["):
        host = addr[: addr.find("]") + 1]
    elif addr.count(":") == 1:
        host = addr.rsplit(":", 1)[0]
    else:
        host = addr
    return f"http://{host or '127.0.0.1'}:{port}"


class _RawPathConnection(http.client.HTTPConnection):
    """HTTPConnection that sends the request line as Latin-1, i.e. a key's bytes unchanged."""

    def _encode_request(self, request: str) -> bytes:
        return request.encode("latin-1")


def _key_bytes(key: str | bytes) -> bytes:
    if isinstance(key, bytes):
        return key
    return key.encode("utf-8", "surrogateescape")


class AdminClient:
    """Requests to one master's admin HTTP server (``http://HOST:PORT``).

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:9003`` (``http://`` may be left
            out; a trailing ``/`` is ignored).
        timeout: seconds to wait for a connection and for each read.

    Every method raises :class:`AdminError` when the server cannot be reached or answers
    something that is not what the master sends; the message names the URL.
    """

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        text = url.strip()
        bad = next((c for c in text if c.isspace() or ord(c) < 32 or ord(c) == 127), None)
        if bad is not None:
            what = "white space" if bad.isspace() else "a control character"
            raise ValueError(
                f"admin URL {url!r} contains {what} ({bad!r}): it must look like http://HOST:PORT"
            )
        if "://" not in text:
            text = "http://" + text
        parsed = urllib.parse.urlsplit(text)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"admin URL {url!r} must look like http://HOST:PORT")
        try:
            port = parsed.port or DEFAULT_ADMIN_PORT
        except ValueError:
            raise ValueError(f"admin URL {url!r} has an invalid port") from None
        if timeout <= 0:
            raise ValueError("timeout must be more than 0 seconds")
        self.host = parsed.hostname
        self.port = port
        self.base_path = parsed.path.rstrip("/")
        self.timeout = float(timeout)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{self.port}{self.base_path}"

    def __repr__(self) -> str:
        return f"<AdminClient {self.url}>"

    # -- transport ---------------------------------------------------------------------------

    def _open(self, path: bytes, timeout: float | None = None) -> http.client.HTTPResponse:
        where = self.url + path.decode("latin-1")
        conn = _RawPathConnection(self.host, self.port, timeout=timeout or self.timeout)
        try:
            conn.request(
                "GET",
                (self.base_path.encode() + path).decode("latin-1"),
                headers={"Connection": "close"},
            )
            return conn.getresponse()
        except TimeoutError:
            conn.close()
            raise AdminError(
                f"admin API {self.url}: no answer within {timeout or self.timeout:g} s", where
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise AdminError(f"admin API {self.url}: {reason}", where) from None

    def _get(self, path: bytes, timeout: float | None = None) -> tuple[int, bytes]:
        """(HTTP status, body) of one GET."""
        response = self._open(path, timeout)
        try:
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise AdminError(
                f"admin API {self.url}: reading {path.decode('latin-1')} failed: {exc}",
                self.url + path.decode("latin-1"),
            ) from None
        finally:
            response.close()

    def _get_ok(self, path: bytes, timeout: float | None = None) -> bytes:
        status, body = self._get(path, timeout)
        if status != 200:
            shown = path.decode("latin-1")
            if status == 404 and not body.lstrip().startswith(b"{"):
                raise AdminError(
                    f"admin API {self.url} does not serve {shown} (HTTP 404): is this the "
                    "master's -metrics_port, from a master that has this endpoint?",
                    self.url + shown,
                    status,
                )
            raise AdminError(
                f"admin API {self.url}{shown} answered HTTP {status}: "
                f"{body[:200].decode(errors='replace').strip()}",
                self.url + shown,
                status,
            )
        return body

    def _get_json(self, path: bytes) -> Any:
        body = self._get_ok(path)
        try:
            return json.loads(body)
        except ValueError:
            raise AdminError(
                f"admin API {self.url}{path.decode('latin-1')} did not answer JSON: "
                f"{body[:200].decode(errors='replace')!r}",
                self.url + path.decode("latin-1"),
            ) from None

    # -- health and metrics ------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``/health``: ``status``, ``role``, ``service_ready``... (a non-200 answer included)."""
        status, body = self._get(b"/health")
        try:
            data = json.loads(body)
        except ValueError:
            data = {"status": body.decode(errors="replace").strip()}
        if not isinstance(data, dict):
            data = {"status": data}
        data.setdefault("http_status", status)
        return data

    def metrics_text(self) -> str:
        """``/metrics``: the Prometheus text exposition."""
        return self._get_ok(b"/metrics").decode(errors="replace")

    def metrics(self) -> Metrics:
        """``/metrics``, parsed."""
        return Metrics(self.metrics_text())

    def summary_text(self) -> str:
        """``/metrics/summary``: the master's one-line human summary."""
        return self._get_ok(b"/metrics/summary").decode(errors="replace").strip()

    # -- segments ----------------------------------------------------------------------------

    def segment_names(self) -> list[str]:
        """``/get_all_segments``: names of the mounted segments."""
        body = self._get_ok(b"/get_all_segments").decode(errors="replace")
        return [line.strip() for line in body.splitlines() if line.strip()]

    def segments(self) -> list[Segment]:
        """``/get_segments_detail``: every mounted segment with its capacity and use."""
        data = self._get_json(b"/get_segments_detail")
        items = data.get("segments") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise AdminError(f"admin API {self.url}/get_segments_detail: no 'segments' list")
        return [_segment(item) for item in items if isinstance(item, dict)]

    # -- keys --------------------------------------------------------------------------------

    def iter_keys(self, prefix: str | bytes = b"") -> Iterator[bytes]:
        """Keys starting with ``prefix``, as raw bytes, in the master's (unsorted) order.

        The listing is read in chunks and filtered as it arrives.
        """
        want = _key_bytes(prefix)
        response = self._open(b"/get_all_keys", timeout=max(self.timeout, LISTING_TIMEOUT))
        try:
            if response.status != 200:
                body = response.read(200)
                raise AdminError(
                    f"admin API {self.url}/get_all_keys answered HTTP {response.status}: "
                    f"{body.decode(errors='replace').strip()}",
                    self.url + "/get_all_keys",
                    response.status,
                )
            rest = b""
            while True:
                try:
                    chunk = response.read(_READ_CHUNK)
                except (OSError, http.client.HTTPException) as exc:
                    raise AdminError(
                        f"admin API {self.url}/get_all_keys: reading the listing failed: {exc}"
                    ) from None
                if not chunk:
                    break
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    if line and line.startswith(want):
                        yield line
            if rest and rest.startswith(want):
                yield rest
        finally:
            response.close()

    def keys(self, prefix: str | bytes = b"") -> list[bytes]:
        """Keys starting with ``prefix``, sorted bytewise."""
        return sorted(self.iter_keys(prefix))

    @staticmethod
    def can_query(key: str | bytes) -> bool:
        """False for keys the master's HTTP API cannot carry (space, control bytes, ``&``)."""
        kb = _key_bytes(key)
        return bool(kb) and _UNSENDABLE.search(kb) is None

    def query_key(self, key: str | bytes) -> KeyInfo | None:
        """``/query_key``: where the key's replicas are, or None if the key does not exist."""
        kb = _key_bytes(key)
        self._check_queryable(kb)
        status, body = self._get(b"/query_key?key=" + kb)
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise AdminError(
                f"admin API {self.url}/query_key answered HTTP {status}: "
                f"{body[:200].decode(errors='replace')!r}",
                status=status,
            )
        if not data.get("success"):
            if data.get("error_code") == -704 or data.get("error_message") == "OBJECT_NOT_FOUND":
                return None
            raise AdminError(
                f"admin API {self.url}/query_key for {kb!r}: "
                f"{data.get('error_message') or data.get('error') or data}",
                status=status,
            )
        values = data.get("data")
        return KeyInfo(kb, tuple(_replicas("memory", values)))

    def query(self, keys: Iterable[str | bytes]) -> dict[bytes, KeyInfo | None]:
        """Where each key's replicas are (None: missing), batched through ``/batch_query_keys``.

        Raises ValueError naming a key that :meth:`can_query` refuses, before any request.
        """
        wanted = [_key_bytes(k) for k in keys]
        for kb in wanted:
            self._check_queryable(kb)
        out: dict[bytes, KeyInfo | None] = {}
        batch: list[bytes] = []
        size = 0
        for kb in wanted:
            if b"," in kb or not _is_utf8(kb):  # the batch answer (JSON) cannot hold it
                out[kb] = self.query_key(kb)
                continue
            if batch and size + len(kb) + 1 > _BATCH_URL_BYTES:
                out.update(self._batch_query(batch))
                batch, size = [], 0
            batch.append(kb)
            size += len(kb) + 1
        if batch:
            out.update(self._batch_query(batch))
        return {kb: out[kb] for kb in wanted}

    def _batch_query(self, keys: Sequence[bytes]) -> dict[bytes, KeyInfo | None]:
        data = self._get_json(b"/batch_query_keys?keys=" + b",".join(keys))
        entries = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entries, dict):
            raise AdminError(f"admin API {self.url}/batch_query_keys: no 'data' object")
        out: dict[bytes, KeyInfo | None] = {}
        for kb in keys:
            entry = entries.get(kb.decode("utf-8", "surrogateescape"))
            if entry is None:  # JSON could not carry the key's bytes: ask for it alone
                out[kb] = self.query_key(kb)
                continue
            if not entry.get("ok"):
                if entry.get("error") in (None, "OBJECT_NOT_FOUND"):
                    out[kb] = None
                    continue
                raise AdminError(f"admin API {self.url}: key {kb!r}: {entry.get('error')}")
            out[kb] = _batch_entry(kb, entry)
        return out

    def _check_queryable(self, kb: bytes) -> None:
        if not self.can_query(kb):
            raise ValueError(
                f"key {kb!r} cannot be sent to the master's admin API: it does not decode "
                "%-escapes, so keys with spaces, control characters or '&' cannot be queried"
            )


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
