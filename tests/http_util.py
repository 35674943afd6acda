"""A GET on a local URL for tests (the master's admin API), never through a proxy."""

from __future__ import annotations

import urllib.error
import urllib.request

_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(HTTP status, body) of a GET on ``url``."""
    try:
        with _HTTP.open(url, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode(errors="replace")
