"""Byte sizes: reading them the way Mooncake does, or as a person types them, and printing them.

A pure module (standard library only), shared by the configuration, the local cluster, the
wheel adaptation and ``mcl2``.

* :func:`parse_size` reads the forms Mooncake's own setup understands (``"1 GB"``, ``"512MB"``,
  ``"1073741824"``; units K, M, G, T are powers of 1024).  Mooncake reads ``"64 MiB"`` as 0, so
  a value that goes to Mooncake is checked with it and refused in that form.
* :func:`parse_human_size` also takes the IEC spellings (``"64KiB"``, ``"512 MiB"``) and SI
  ``kB``; it is what ``mcl2``'s size options use.
* :func:`human_bytes` prints a size with binary units (``"1.5 MiB"``).
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_SEGMENT_BYTES",
    "UNITS",
    "check_setup_size",
    "human_bytes",
    "parse_human_size",
    "parse_size",
]

#: Bytes per unit letter (powers of 1024, as Mooncake reads them).
UNITS: dict[str, int] = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

_MOONCAKE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_HUMAN_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)(b?)\s*$", re.IGNORECASE)


def _whole(number: str, unit: str, given: str) -> int:
    if number.isdigit():  # exact, also beyond a float's 53 bits
        return int(number) * UNITS[unit.lower()]
    value = float(number) * UNITS[unit.lower()]
    if value != int(value):
        raise ValueError(f"invalid size {given!r}: not a whole number of bytes")
    return int(value)


def parse_size(size: str | int) -> int:
    """Bytes in a Mooncake size string, read the way Mooncake reads it (``"1 GB"`` = 2**30).

    Only the forms Mooncake understands are accepted: a number with an optional ``K``/``M``/
    ``G``/``T`` unit, optionally followed by ``B``, any case.  Mooncake reads ``"64 MiB"`` as 0,
    so it is rejected here with a ValueError that says so.
    """
    if isinstance(size, bool):
        raise ValueError(f"invalid size {size!r}")
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"invalid size {size!r}: negative")
        return size
    if not isinstance(size, str):
        raise ValueError(f"invalid size {size!r}: give a number of bytes or a string")
    match = _MOONCAKE_RE.match(size)
    if not match:
        raise ValueError(
            f"invalid size {size!r}: Mooncake understands forms like '1 GB', '512MB' or "
            "'1073741824' (units K, M, G, T are powers of 1024; 'MiB' is read as 0)"
        )
    return _whole(match.group(1), match.group(2), size)


def parse_human_size(size: str | int) -> int:
    """Bytes in a size as people type it: ``"64KiB"``, ``"1 GB"``, ``"512MiB"``, ``"4096"``.

    Every unit is a power of 1024 (``K``, ``KB``, ``KiB`` alike), as in :func:`parse_size`.
    A ValueError names the value otherwise.
    """
    if isinstance(size, (bool, int)) or not isinstance(size, str):
        return parse_size(size)
    match = _HUMAN_RE.match(size)
    if not match or (match.group(3) and not match.group(2)):
        raise ValueError(
            f"invalid size {size!r}: give a number of bytes with an optional unit, "
            "e.g. 4096, 64KiB, 512MB, 1 GiB (K, M, G, T are powers of 1024)"
        )
    return _whole(match.group(1), match.group(2), size)


def human_bytes(n: int | float | None) -> str:
    """``n`` bytes in binary units: ``"512 B"``, ``"1.5 MiB"``; ``"?"`` for None."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


#: Mooncake's setup takes a local buffer of 0 (none) or 1 KiB .. 1 TiB.
_LOCAL_BUFFER_RANGE = (1 << 10, 1 << 40)
#: The largest global_segment_size taken (8 EiB): Mooncake (0.3.13.post1) rounds a size near
#: 2**64 over to a segment it silently never mounts, and setup succeeds.
MAX_SEGMENT_BYTES = (1 << 63) - 1


def check_setup_size(key: str, value: str) -> None:
    """Raise ValueError naming ``key`` and ``value`` unless Mooncake's setup reads ``value``
    as the size it looks like (``global_segment_size``, ``local_buffer_size``).

    Mooncake reads ``"64 MiB"`` as 0 and refuses a local buffer outside 1 KiB .. 1 TiB with
    a bare INVALID_PARAMS; both are refused here, saying so, and so is a
    ``global_segment_size`` above :data:`MAX_SEGMENT_BYTES`, which Mooncake takes without
    mounting any segment.
    """
    try:
        n = parse_size(value)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None
    if key == "global_segment_size" and n > MAX_SEGMENT_BYTES:
        raise ValueError(
            f"global_segment_size {value!r} is {n} bytes, more than the limit of "
            f"{MAX_SEGMENT_BYTES} bytes (8 EiB): Mooncake would mount no segment at all"
        )
    if (
        key == "local_buffer_size"
        and n
        and not _LOCAL_BUFFER_RANGE[0] <= n <= _LOCAL_BUFFER_RANGE[1]
    ):
        raise ValueError(
            f"local_buffer_size {value!r} is {n} bytes: Mooncake takes 0 (no local buffer) or "
            "1 KiB to 1 TiB"
        )
