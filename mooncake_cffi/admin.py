"""A client of ``mooncake_master``'s admin HTTP API (its ``-metrics_port``, default 9003).

:class:`AdminClient` is the one place that speaks to that port: ``mcl2``'s ``ls``, ``info``,
``segments``, ``metrics`` and ``doctor``, :class:`~mooncake_cffi.cluster.LocalCluster` and the
tests use it.  Every request has a timeout and ignores proxy settings.

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
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_ADMIN_PORT",
    "AdminClient",
    "AdminError",
    "KeyInfo",
    "Metrics",
    "Replica",
    "Segment",
    "admin_url_for_master",
    "parse_prometheus",
]

#: Port of the master's admin HTTP server unless ``-metrics_port`` says otherwise.
DEFAULT_ADMIN_PORT = 9003
DEFAULT_TIMEOUT = 2.0
#: Seconds allowed for one read of a large listing (``/get_all_keys``) to make progress.
LISTING_TIMEOUT = 30.0
_READ_CHUNK = 1 << 20
#: Bytes of keys per ``/batch_query_keys`` request (the URL stays well below 64 KiB).
_BATCH_URL_BYTES = 16 * 1024

_UNSENDABLE = re.compile(rb"[\x00-\x20\x7f&]")

Samples = dict[str, list[tuple[dict[str, str], float]]]


class AdminError(RuntimeError):
    """The admin API could not be reached, or answered something unexpected."""

    def __init__(self, message: str, url: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


@dataclass(frozen=True)
class Replica:
    """One copy of a key: where it lives (``endpoint``, ``segment``) and how big it is."""

    kind: str  #: "memory", "disk", "local_disk" or "nof"
    endpoint: str | None  #: transport endpoint of the segment holding it (host:port)
    size: int | None
    protocol: str | None = None
    segment: str | None = None  #: the segment's name, when the endpoint matched one
    address: int | None = None  #: buffer address inside the segment (memory replicas)
    path: str | None = None  #: file path (disk replicas)


@dataclass(frozen=True)
class KeyInfo:
    """What the master says about one key."""

    key: bytes
    replicas: tuple[Replica, ...]

    @property
    def size(self) -> int | None:
        """The value's size in bytes (every replica holds the whole value)."""
        for replica in self.replicas:
            if replica.size is not None:
                return replica.size
        return None


@dataclass(frozen=True)
class Segment:
    """A storage segment mounted in the master."""

    name: str
    endpoint: str | None
    protocol: str | None
    status: str | None
    capacity_bytes: int | None
    used_bytes: int | None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def parse_prometheus(text: str) -> Samples:
    """Samples of a Prometheus text exposition, by metric name: ``[(labels, value), ...]``."""
    samples: Samples = {}
    line_re = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
    label_re = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = line_re.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = dict(label_re.findall(match.group(2) or ""))
        samples.setdefault(match.group(1), []).append((labels, value))
    return samples


class Metrics:
    """The master's ``/metrics``, parsed, with the figures a human reads first."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = parse_prometheus(text)

    def value(self, name: str) -> float | None:
        """The unlabelled sample of ``name``, or None if the master did not report it."""
        for labels, value in self.samples.get(name, []):
            if not labels:
                return value
        return None

    def count(self, *names: str) -> int | None:
        """Sum of the unlabelled samples of ``names`` (None if none of them is present)."""
        values = [v for v in (self.value(n) for n in names) if v is not None]
        return int(sum(values)) if values else None

    def failures(self) -> int:
        """All failed requests and failed batch items the master counted."""
        total = 0.0
        for name in self.samples:
            if name.endswith(("_failures_total", "_failed_items_total")):
                total += sum(v for labels, v in self.samples[name] if not labels)
        return int(total)

    def summary(self) -> dict[str, Any]:
        """Keys, memory, clients, request counts and errors, as plain data."""
        return {
            "keys": self.count("master_key_count"),
            "memory": {
                "used_bytes": self.count("master_allocated_bytes"),
                "capacity_bytes": self.count("master_total_capacity_bytes"),
            },
            "segments": len(self.samples.get("segment_total_capacity_bytes", [])),
            "clients": self.count("master_active_clients"),
            "requests": {
                "put": self.count(
                    "master_put_start_requests_total", "master_batch_put_start_items_total"
                ),
                "get": self.count(
                    "master_get_replica_list_requests_total",
                    "master_batch_get_replica_list_items_total",
                ),
                "exists": self.count(
                    "master_exist_key_requests_total", "master_batch_exist_key_items_total"
                ),
                "remove": self.count("master_remove_requests_total"),
            },
            "failures": self.failures(),
            "evictions": self.count("master_successful_evictions_total"),
        }


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

    def _encode_request(self, request: str) -> bytes:  # type: ignore[override]
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
        out = []
        for item in items:
            if not isinstance(item, dict):
                continue
            known = {
                "segment_name",
                "te_endpoint",
                "protocol",
                "status",
                "allocator_capacity_bytes",
                "size_bytes",
                "allocator_used_bytes",
            }
            capacity = item.get("allocator_capacity_bytes", item.get("size_bytes"))
            out.append(
                Segment(
                    name=str(item.get("segment_name", "?")),
                    endpoint=item.get("te_endpoint"),
                    protocol=item.get("protocol"),
                    status=item.get("status"),
                    capacity_bytes=_int_or_none(capacity),
                    used_bytes=_int_or_none(item.get("allocator_used_bytes")),
                    extra={k: v for k, v in item.items() if k not in known},
                )
            )
        return out

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
            replicas: list[Replica] = []
            for kind, name in (
                ("memory", "values"),
                ("disk", "disk_values"),
                ("local_disk", "local_disk_values"),
                ("nof", "nof_values"),
            ):
                replicas.extend(_replicas(kind, entry.get(name)))
            out[kb] = KeyInfo(kb, tuple(replicas))
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


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _replicas(kind: str, values: Any) -> Iterator[Replica]:
    if not isinstance(values, list):
        return
    for v in values:
        if not isinstance(v, dict):
            continue
        yield Replica(
            kind=kind,
            endpoint=v.get("transport_endpoint_") or v.get("endpoint"),
            size=_int_or_none(v.get("size_", v.get("size"))),
            protocol=v.get("protocol_") or v.get("protocol"),
            address=_int_or_none(v.get("buffer_address_")),
            path=v.get("file_path_") or v.get("path"),
        )
