"""Types shared by the public signatures: keys, buffers, the ``timeout=`` sentinel.

* :data:`DEFAULT` is what a method's ``timeout=`` is when not given: the client's
  ``op_timeout`` applies.  It is the only member of :class:`Default`, so a type checker
  knows ``timeout: Timeout`` is seconds, None (no deadline) or "the default".
* :data:`Key` is a key: ``str`` (UTF-8 on the wire) or ``bytes``.
* ``Buffer`` (for type checkers only) is any object with the buffer protocol: ``bytes``,
  ``bytearray``, ``memoryview``, numpy arrays, ``mmap``...
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Buffer as Buffer  # the buffer protocol (PEP 688)

    from ..retry import RetryPolicy

__all__ = ["ClientOptions", "DEFAULT", "Default", "Key", "Timeout"]


class Default(enum.Enum):
    """The type of :data:`DEFAULT`."""

    DEFAULT = "default"

    def __repr__(self) -> str:
        return "DEFAULT"


#: ``timeout=`` not given: the client's ``op_timeout`` applies.
DEFAULT: Final = Default.DEFAULT

#: A key: ``str`` (sent as UTF-8) or ``bytes``.
Key = str | bytes

#: A call's ``timeout=``: seconds, None for no deadline, or :data:`DEFAULT`.
Timeout = float | None | Literal[Default.DEFAULT]


class ClientOptions(TypedDict, total=False):
    """The keyword options of :class:`mooncake_cffi.Client` (see there), for the classes
    that create a client from them (:class:`mooncake_cffi.AsyncClient`)."""

    l1: Buffer | None
    register_l1: bool | None
    l1_block_size: int
    queue_capacity: int
    queue_timeout: float | None
    tile_bytes: int
    tile_keys: int
    coalesce_keys: int
    replicate_config: Any
    connect_timeout: float | None
    op_timeout: float | None
    retry: RetryPolicy | None
