"""A finished batch as the shim posts it (``struct mcs_completion``), for Python:
:class:`Completion`, what :meth:`mooncake_cffi.Client.drain` returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Completion"]


@dataclass(frozen=True)
class Completion:
    """A finished batch, as returned by :meth:`Client.drain`.

    ``results`` holds one value per key (see the method that submitted it); ``status``
    is 0 or the first per-key error (a missing key is reported only in its result);
    ``message`` explains a non-zero status.  ``values`` holds the bytes read by a
    ``get_buffer`` batch (None for a key it did not read), else None.  ``ran`` is
    False when the batch as a whole did not run (``status`` then says why).
    """

    id: int
    op: str
    status: int
    results: list[int]
    n_failed: int
    message: str
    values: list[bytes | None] | None = None
    user_data: Any = None
    ran: bool = True

    @property
    def ok(self) -> bool:
        """True when the batch ran and no key failed."""
        return self.status == 0
