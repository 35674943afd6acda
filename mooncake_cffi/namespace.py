"""Key-prefix views of a client: one namespace per model, tenant or weights version.

``Namespace(client, "llama3-70b/fp16/v2/")`` offers the client's key methods with the prefix
put in front of every key on the way in; keys handed back (:meth:`Namespace.local_key`) have
it stripped.  Values, per-key results and errors are the client's own.  A namespace is only a
naming convention on the client side: any client that knows the prefix reads and writes the
same keys, and nothing stops a client from writing outside it.  Mooncake's ``tenant_id`` setup
key is a different mechanism; docs/guide/python.md ("Namespaces") compares the two.

``lookup_prefix`` counts the leading keys of a sequence that are stored, with the client's own
:meth:`Client.lookup_prefix`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ._core.types import DEFAULT, Key, Timeout
from .errors import InvalidArgumentError
from .status import MCS_E_INVALID_ARG

if TYPE_CHECKING:
    from .replica import ReplicateConfig

__all__ = ["KeyMethods", "Namespace"]


class KeyMethods(Protocol):
    """What a namespace calls on its client: the key methods of :class:`mooncake_cffi.Client`
    (which satisfies this protocol; so can any object with the same methods)."""

    def put(
        self,
        key: Key,
        value: Any,
        *,
        replicate_config: ReplicateConfig | None = ...,
        timeout: Timeout = ...,
    ) -> None: ...
    def put_if_absent(
        self,
        key: Key,
        value: Any,
        *,
        replicate_config: ReplicateConfig | None = ...,
        timeout: Timeout = ...,
    ) -> bool: ...
    def upsert(
        self,
        key: Key,
        value: Any,
        *,
        replicate_config: ReplicateConfig | None = ...,
        timeout: Timeout = ...,
    ) -> None: ...
    def get(self, key: Key, *, timeout: Timeout = ...) -> bytes | None: ...
    def exists(self, key: Key, *, timeout: Timeout = ...) -> bool: ...
    def remove(self, key: Key, force: bool = ..., *, timeout: Timeout = ...) -> bool: ...
    def size(self, key: Key, *, timeout: Timeout = ...) -> int | None: ...
    def batch_put(
        self,
        keys: Sequence[Key],
        values: Sequence[Any],
        *,
        skip_existing: bool = ...,
        replicate_config: ReplicateConfig | None = ...,
        timeout: Timeout = ...,
    ) -> list[int]: ...
    def batch_upsert(
        self,
        keys: Sequence[Key],
        values: Sequence[Any],
        *,
        replicate_config: ReplicateConfig | None = ...,
        timeout: Timeout = ...,
    ) -> list[int]: ...
    def batch_get(self, keys: Sequence[Key], *, timeout: Timeout = ...) -> list[bytes | None]: ...
    def batch_exists(self, keys: Sequence[Key], *, timeout: Timeout = ...) -> list[bool]: ...
    def batch_size(self, keys: Sequence[Key], *, timeout: Timeout = ...) -> list[int | None]: ...
    def batch_remove(
        self, keys: Sequence[Key], force: bool = ..., *, timeout: Timeout = ...
    ) -> list[int]: ...
    def put_from(
        self,
        keys: Sequence[Key],
        buffers: Sequence[Any],
        sizes: Sequence[int] | None = ...,
        *,
        upsert: bool = ...,
        skip_existing: bool = ...,
        replicate_config: ReplicateConfig | None = ...,
        timeout: Timeout = ...,
        first_writer_check: bool = ...,
    ) -> list[int]: ...
    def get_into(
        self,
        keys: Sequence[Key],
        buffers: Sequence[Any],
        sizes: Sequence[int] | None = ...,
        *,
        timeout: Timeout = ...,
    ) -> list[int]: ...
    def lookup_prefix(self, keys: Sequence[Key], *, timeout: Timeout = ...) -> int: ...


def _as_key_list(keys: Any) -> list[Any]:
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"keys must be a sequence of keys, not a single {type(keys).__name__}")
    return list(keys)


def _check_prefix(prefix: Any) -> tuple[Key, bytes]:
    """The prefix as given (str or bytes) and as UTF-8 bytes, or an error naming the problem."""
    if isinstance(prefix, str):
        try:
            raw = prefix.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                MCS_E_INVALID_ARG, f"namespace prefix {prefix!r} is not valid UTF-8 ({exc.reason})"
            ) from None
        given: Key = prefix
    elif isinstance(prefix, (bytes, bytearray, memoryview)):
        raw = bytes(prefix)
        given = raw
    else:
        raise TypeError(f"namespace prefix must be str or bytes, not {type(prefix).__name__}")
    if not raw:
        raise InvalidArgumentError(MCS_E_INVALID_ARG, "namespace prefix is empty")
    if b"\0" in raw:
        raise InvalidArgumentError(
            MCS_E_INVALID_ARG, f"namespace prefix {prefix!r} contains a NUL byte"
        )
    return given, raw


class Namespace:
    """The keys of ``client`` that start with ``prefix``, addressed without it.

    Args:
        client: a :class:`mooncake_cffi.Client`, or any object with its key methods
            (:class:`KeyMethods`).
        prefix: non-empty ``str`` or ``bytes`` without NUL, e.g. ``"llama3-70b/fp16/v2/"``.

    Every key method of the client is offered with the same arguments (``timeout=`` among
    them) and results; keys are prefixed on the way in.  A ``str`` key under a ``str`` prefix
    becomes a ``str`` key; any other combination a ``bytes`` key (UTF-8).  An empty key is
    refused here (the prefix alone would otherwise be a valid key).  Thread-safe as the
    client is: a namespace holds no state of its own.  It does not own the client: closing
    the client ends every namespace over it.
    """

    __slots__ = ("client", "_prefix", "_raw")

    def __init__(self, client: KeyMethods, prefix: Key) -> None:
        self.client = client
        self._prefix, self._raw = _check_prefix(prefix)

    # ---------------------------------------------------------------- keys

    @property
    def prefix(self) -> Key:
        """The prefix, as given (``str`` or ``bytes``)."""
        return self._prefix

    def key(self, key: Key, index: int = 0) -> Key:
        """The client-side key of ``key``: the prefix followed by ``key``."""
        if isinstance(key, str):
            if not key:
                raise InvalidArgumentError(MCS_E_INVALID_ARG, f"key #{index} is empty")
            if isinstance(self._prefix, str):
                return self._prefix + key
            return self._raw + key.encode("utf-8")
        if isinstance(key, (bytes, bytearray, memoryview)):
            kb = bytes(key)
            if not kb:
                raise InvalidArgumentError(MCS_E_INVALID_ARG, f"key #{index} is empty")
            return self._raw + kb
        raise TypeError(f"key #{index} must be str or bytes, not {type(key).__name__}")

    def keys(self, keys: Sequence[Key]) -> list[Key]:
        """The client-side keys of a sequence of keys (see :meth:`key`)."""
        return [self.key(k, i) for i, k in enumerate(_as_key_list(keys))]

    def local_key(self, full_key: Key) -> Key:
        """``full_key`` without the prefix; ``ValueError`` if it lies outside this namespace."""
        if isinstance(full_key, str):
            if isinstance(self._prefix, str) and full_key.startswith(self._prefix):
                return full_key[len(self._prefix) :]
            raw = full_key.encode("utf-8")
            if raw.startswith(self._raw):
                return raw[len(self._raw) :].decode("utf-8", "surrogateescape")
        elif isinstance(full_key, (bytes, bytearray, memoryview)):
            raw = bytes(full_key)
            if raw.startswith(self._raw):
                return raw[len(self._raw) :]
        else:
            raise TypeError(f"key must be str or bytes, not {type(full_key).__name__}")
        raise ValueError(f"key {full_key!r} is not in namespace {self._prefix!r}")

    def contains(self, full_key: Key) -> bool:
        """True if the client-side key ``full_key`` lies inside this namespace."""
        try:
            self.local_key(full_key)
        except ValueError:
            return False
        return True

    def namespace(self, prefix: Key) -> Namespace:
        """A namespace nested inside this one (the prefixes are joined)."""
        _, raw = _check_prefix(prefix)
        if isinstance(self._prefix, str) and isinstance(prefix, str):
            return Namespace(self.client, self._prefix + prefix)
        return Namespace(self.client, self._raw + raw)

    # ---------------------------------------------------------- single key

    def put(self, key: Key, value: Any, **options: Any) -> None:
        """:meth:`Client.put` inside the namespace (first writer wins)."""
        self.client.put(self.key(key), value, **options)

    def put_if_absent(self, key: Key, value: Any, **options: Any) -> bool:
        """:meth:`Client.put_if_absent`: True if written, False if the key existed."""
        return self.client.put_if_absent(self.key(key), value, **options)

    def upsert(self, key: Key, value: Any, **options: Any) -> None:
        """:meth:`Client.upsert`: store, replacing an existing value."""
        self.client.upsert(self.key(key), value, **options)

    def get(self, key: Key, *, timeout: Timeout = DEFAULT) -> bytes | None:
        """:meth:`Client.get`: the value, or None if missing."""
        return self.client.get(self.key(key), timeout=timeout)

    def exists(self, key: Key, *, timeout: Timeout = DEFAULT) -> bool:
        """:meth:`Client.exists` (renews the key's read lease)."""
        return self.client.exists(self.key(key), timeout=timeout)

    def remove(self, key: Key, force: bool = False, *, timeout: Timeout = DEFAULT) -> bool:
        """:meth:`Client.remove`: True if removed, False if absent."""
        return self.client.remove(self.key(key), force=force, timeout=timeout)

    def size(self, key: Key, *, timeout: Timeout = DEFAULT) -> int | None:
        """:meth:`Client.size`: the value's size in bytes, or None if missing."""
        return self.client.size(self.key(key), timeout=timeout)

    # --------------------------------------------------------------- batch

    def batch_put(self, keys: Sequence[Key], values: Sequence[Any], **options: Any) -> list[int]:
        """:meth:`Client.batch_put`: per-key status, in the order of ``keys``."""
        return self.client.batch_put(self.keys(keys), values, **options)

    def batch_upsert(self, keys: Sequence[Key], values: Sequence[Any], **options: Any) -> list[int]:
        """:meth:`Client.batch_upsert`: per-key status, in the order of ``keys``."""
        return self.client.batch_upsert(self.keys(keys), values, **options)

    def batch_get(self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT) -> list[bytes | None]:
        """:meth:`Client.batch_get`: values (None where missing)."""
        return self.client.batch_get(self.keys(keys), timeout=timeout)

    def batch_exists(self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT) -> list[bool]:
        """:meth:`Client.batch_exists`: whether each key exists."""
        return self.client.batch_exists(self.keys(keys), timeout=timeout)

    def batch_size(self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT) -> list[int | None]:
        """:meth:`Client.batch_size`: each value's size in bytes (None where missing)."""
        return self.client.batch_size(self.keys(keys), timeout=timeout)

    def batch_remove(
        self, keys: Sequence[Key], force: bool = False, *, timeout: Timeout = DEFAULT
    ) -> list[int]:
        """:meth:`Client.batch_remove`: per-key status (0 removed, -704 absent, ...)."""
        return self.client.batch_remove(self.keys(keys), force=force, timeout=timeout)

    # ----------------------------------------------------------- zero-copy

    def put_from(
        self,
        keys: Sequence[Key],
        buffers: Sequence[Any],
        sizes: Sequence[int] | None = None,
        **options: Any,
    ) -> list[int]:
        """:meth:`Client.put_from`: store from buffers without copying; per-key status."""
        return self.client.put_from(self.keys(keys), buffers, sizes, **options)

    def get_into(
        self,
        keys: Sequence[Key],
        buffers: Sequence[Any],
        sizes: Sequence[int] | None = None,
        *,
        timeout: Timeout = DEFAULT,
    ) -> list[int]:
        """:meth:`Client.get_into`: read into buffers; bytes read or a negative code per key."""
        return self.client.get_into(self.keys(keys), buffers, sizes, timeout=timeout)

    # -------------------------------------------------------------- lookup

    def lookup_prefix(self, keys: Sequence[Key], *, timeout: Timeout = DEFAULT) -> int:
        """How many leading ``keys`` are stored (the index of the first missing one), as
        :meth:`Client.lookup_prefix` counts them."""
        full = self.keys(keys)
        return self.client.lookup_prefix(full, timeout=timeout) if full else 0

    def __repr__(self) -> str:
        return f"<mooncake_cffi.Namespace {self._prefix!r} of {self.client!r}>"
