"""What a :class:`~mooncake_cffi.Client` is made of, declared for the faces built on one.

The drop-in (:mod:`mooncake_cffi.store`), :class:`~mooncake_cffi.AsyncClient` and the
integrity counters drive a client's layers directly rather than through its public
methods (a drop-in call makes one shim call, with no argument checks a second time).
They reach them through ``client.parts``, a :class:`ClientParts`, and through nothing
private of the client's: what a face may use of a client is this, and only this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._capi.native import NativeClient
    from .batches import Batches
    from .blocking import BlockingCalls
    from .values import Values

__all__ = ["ClientParts"]


@dataclass(frozen=True)
class ClientParts:
    """A client's layers, from the C boundary up."""

    #: The C boundary's client: the shim handle, its lanes, pending batches and orphans.
    native: NativeClient
    #: Background batches: submit, drain, wait, withdraw (``client.batches``).
    batches: Batches
    #: The blocking driver: runs steps and plans with the client's deadline and retries.
    calls: BlockingCalls
    #: Bytes values in and out, straight or through L1 staging.
    values: Values
