"""Submitted batches and their completions: ``client.batches`` (:class:`Batches`) and
:class:`Completion`.  They live in the core (:mod:`mooncake_cffi._core.batches`), which the
blocking driver shares; this is where users find them."""

from ._core.batches import Batches, Completion

__all__ = ["Batches", "Completion"]
