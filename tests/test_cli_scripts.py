"""The shell scripts in scripts/ print colour only on a terminal, and never with NO_COLOR.

Every escape sequence a script prints comes from one guarded line (``bold`` and ``plain`` set
only when the stream is a terminal and ``NO_COLOR`` is unset or empty); the test runs that
line with the stream a pipe and a pseudo-terminal.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parent.parent / "scripts").glob("*.sh"))
GUARD = re.compile(r'^if \[ -t ([12]) \] && \[ -z "\$\{NO_COLOR:-\}" \]; then .*$', re.M)


def coloured() -> list[Path]:
    return [path for path in SCRIPTS if "\\033[" in path.read_text()]


def escapes(guard: str, fd: int, terminal: bool, no_color: str | None) -> str:
    """What the guard sets ``$bold$plain`` to, with stream ``fd`` a terminal or a pipe (the
    answer comes back on the other of stdout and stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    if no_color is not None:
        env["NO_COLOR"] = no_color
    answer = 3 - fd
    script = f'{guard}\nprintf %s "$bold$plain" >&{answer}'
    # ``tested`` becomes the script's stream ``fd``; ``main`` is the other end (kept open).
    main, tested = pty.openpty() if terminal else os.pipe()
    try:
        done = subprocess.run(
            ["bash", "-c", script],
            env=env,
            stdout=tested if fd == 1 else subprocess.PIPE,
            stderr=tested if fd == 2 else subprocess.PIPE,
            timeout=30,
            check=True,
        )
    finally:
        os.close(main)
        os.close(tested)
    return (done.stderr if answer == 2 else done.stdout).decode()


def test_some_script_prints_colour() -> None:
    assert coloured(), "no script in scripts/ prints an escape sequence: drop this test"


@pytest.mark.parametrize("path", coloured(), ids=lambda p: p.name)
def test_colour_only_on_a_terminal_and_never_with_no_color(path: Path) -> None:
    text = path.read_text()
    guards = GUARD.findall(text)
    assert len(guards) == 1, f"{path.name}: no single NO_COLOR / terminal guard"
    guard = GUARD.search(text).group(0)  # type: ignore[union-attr]
    outside = [line for line in text.splitlines() if "\\033[" in line and line != guard]
    assert outside == [], f"{path.name} prints escapes outside its guard: {outside}"
    fd = int(guards[0])
    assert escapes(guard, fd, terminal=True, no_color=None) == "\033[1m\033[0m"
    assert escapes(guard, fd, terminal=True, no_color="") == "\033[1m\033[0m"
    assert escapes(guard, fd, terminal=True, no_color="1") == ""
    assert escapes(guard, fd, terminal=False, no_color=None) == ""
