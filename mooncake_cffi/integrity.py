"""Verified values: the ``integrity`` config key and the counters behind it.

With ``"integrity": "crc32c"`` in a client's config, the shim stores every value with a
16-byte trailer after its bytes (magic ``MCI2``, the CRC32C of the key then the value, a
nonce unique to the write; version-1 trailers, ``MCI1`` with the value's CRC alone, still
verify) and checks it on every read; a value that does not verify is read again for
about 15 ms, then its read raises :class:`~mooncake_cffi.errors.IntegrityError`.  Sizes seen
through this package are the values' own.  See ``docs/guide/integrity.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["INTEGRITY_MODES", "TRAILER_SIZE", "check_integrity", "integrity_stats"]

#: Values of the ``integrity`` key: ``crc32c`` verifies, ``none`` (or no key) does not.
INTEGRITY_MODES: tuple[str, ...] = ("none", "crc32c")

#: Bytes a verifying client stores after each value.
TRAILER_SIZE = 16


def check_integrity(value: str) -> None:
    """Raise ValueError naming ``integrity`` and ``value`` unless it is a known mode."""
    if value in INTEGRITY_MODES or value == "":
        return
    raise ValueError(f"integrity {value!r} is not a known mode ({', '.join(INTEGRITY_MODES)})")


def integrity_stats(client: Any) -> dict[str, int | bool]:
    """Verification counters of ``client`` (a :class:`~mooncake_cffi.Client` or
    :class:`~mooncake_cffi.AsyncClient`): ``enabled``, and how many values were ``written``
    with a trailer, ``verified`` on reading, ``retried`` (re-reads of values that did not
    verify) and ``failed`` (reads answered with :class:`~mooncake_cffi.IntegrityError`)."""
    inner = getattr(client, "client", client)  # an AsyncClient holds a Client
    return inner.parts.native.integrity_stats()  # type: ignore[no-any-return]
