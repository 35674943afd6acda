"""L1 staging: values copied through a registered L1 area (:class:`Staging`).  It lives in the
core (:mod:`mooncake_cffi._core.staging`), which ``Client`` uses; this is where users find it."""

from ._core.staging import DEFAULT_ALIGN, DEFAULT_TIMEOUT, Staging

__all__ = ["DEFAULT_ALIGN", "DEFAULT_TIMEOUT", "Staging"]
