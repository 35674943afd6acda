"""Moving values between mcl2 and Mooncake: directly, or staged through registered L1 memory.

Values go to ``Client.batch_put`` / ``batch_get``.  With RDMA (or when ``--l1-size`` is
given), Mooncake needs the buffers to lie in memory registered with it: the client then
registers one anonymous mapping of ``--l1-size`` bytes (default 256 MiB, or the largest value
to put), and copies every batch through it (the library's L1 staging area: batches larger
than the area go in rounds; a single value larger than a slot is refused with a message
naming ``--l1-size``).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import Any

from mooncake_cffi.errors import InvalidArgumentError

from .errors import CliError

#: Staging area registered as L1 when RDMA needs one and --l1-size is not given.
DEFAULT_L1_BYTES = 256 << 20


def allocate_l1(size: int) -> mmap.mmap:
    """A writable anonymous mapping of ``size`` bytes, populated up front (not lazily, as
    memory to register with Mooncake should be)."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    return mmap.mmap(-1, size, flags=flags)


class Transfer:
    """Put and get batches of values with one client.

    With L1 registered (``--l1-size``, or rdma), the client itself copies the values through
    a staging area in that region (:attr:`mooncake_cffi.Client.staging`); a value too large
    for it is refused with a message naming ``--l1-size``.
    """

    def __init__(self, client: Any, l1: mmap.mmap | None = None) -> None:
        self.client = client
        self.l1 = l1

    @property
    def staged(self) -> bool:
        return self.l1 is not None

    def put(self, keys: Sequence[bytes], values: Sequence[bytes], overwrite: bool) -> list[int]:
        """Per-key status: 0 stored, 1 existed and kept (without ``overwrite``), < 0 error."""
        try:
            if overwrite:
                return list(self.client.batch_upsert(list(keys), list(values)))
            return list(self.client.batch_put(list(keys), list(values), skip_existing=True))
        except InvalidArgumentError as exc:
            raise self._too_large(exc) from None

    def get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of the keys, None for a missing key."""
        try:
            return list(self.client.batch_get(list(keys)))
        except InvalidArgumentError as exc:
            raise self._too_large(exc) from None

    def _too_large(self, exc: InvalidArgumentError) -> Exception:
        if self.staged and "staging slot" in str(exc):
            return CliError(f"{exc.message}: give a larger --l1-size")
        return exc
