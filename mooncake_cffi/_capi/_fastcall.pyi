# The C extension built from fastcall.c (see there).

from collections.abc import Callable
from typing import Any

def run_one(handle: int, op: int, flags: int, key: object, /) -> int | tuple[int] | None: ...
def run_keys(
    handle: int, op: int, flags: int, keys: object, /
) -> list[int] | tuple[int] | None: ...

class Lookups:
    def __init__(
        self,
        native: object,
        breaker: object,
        live: object,
        health: object,
        rest: Callable[[Any, list[int] | tuple[int] | int | None, float], Any],
        *,
        one: bool = False,
    ) -> None: ...
    def __call__(self, keys: object, /) -> Any: ...
