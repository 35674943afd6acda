"""Per-key outcomes of mcl2's key commands (``put``, ``get``, ``rm``): :class:`KeyReport`
collects each key's JSON record and its problem lines (at most :data:`MAX_KEY_LINES` printed),
then prints them and leaves with exit status 1 (a failure) or 3 (a missing key).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from .errors import EXIT_ERROR, EXIT_NOT_FOUND
from .keys import split_usable
from .settings import Settings

#: Per-key problem lines printed before "... and N more" (--json lists them all).
MAX_KEY_LINES = 50


class KeyReport:
    """Per-key outcomes of a command: the JSON record of each key, and capped problem lines."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.records: dict[str, dict[str, Any]] = {}
        self.lines: list[str] = []
        self.extra_lines = 0
        self.failed = 0
        self.missing = 0

    def add(self, key: str, status: str, **fields: Any) -> None:
        self.records[key] = {"status": status, **fields}

    def problem(self, line: str) -> None:
        if len(self.lines) < MAX_KEY_LINES:
            self.lines.append(line)
        else:
            self.extra_lines += 1

    def usable(self, keys: Sequence[str]) -> list[str]:
        """The keys that can be sent; each other one is recorded as an error, with why."""
        usable, refused = split_usable(keys)
        for key, why in refused.items():
            self.refuse(key, why)
        return usable

    def refuse(self, key: str, why: str) -> None:
        """A key not sent to Mooncake (``why``): an error record and a problem line."""
        self.failed += 1
        self.add(key, "error", error=why)
        self.problem(f"{key!r}: {why}")

    def error(self, key: str, code: int, doing: str, detail: str = "") -> None:
        from mooncake_cffi import error_name

        name = error_name(code)
        self.failed += 1
        self.add(key, "error", error=name, code=code)
        self.problem(f"{key}: {doing} failed: {name} ({code}){detail}")

    def flush_problems(self) -> None:
        for line in self.lines:
            click.echo(line, err=True)
        if self.extra_lines:
            click.echo(f"... and {self.extra_lines} more (--json lists every key)", err=True)
        self.lines.clear()
        self.extra_lines = 0

    def finish(self) -> None:
        """Print the JSON (if asked for) and the problem lines; leave with the right status."""
        self.flush_problems()
        if self.settings.json:
            self.settings.emit_json(self.records)
        if self.failed:
            click.get_current_context().exit(EXIT_ERROR)
        if self.missing:
            click.get_current_context().exit(EXIT_NOT_FOUND)
