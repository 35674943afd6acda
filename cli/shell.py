"""``mcl2 shell``: a small REPL running mcl2's commands with one client kept open.

Each line is split like a shell would (``shlex``) and run as ``mcl2 LINE``, with the options
given to ``mcl2 ... shell`` as the defaults (``--json`` too: every line then prints JSON, one
document per line); the
Mooncake client is set up by the first command that needs one and kept until the shell ends
(the lines share the shell's :class:`~.session.Session`), so later commands skip the setup.
The shell's lines come from standard input, so no command inside it reads a value or keys
from there.  History is kept in the state directory (``shell_history``) when ``readline`` is
available.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

import click

from .app import CONTEXT_SETTINGS, cli
from .errors import EXIT_OK, EXIT_USAGE
from .options import output_options
from .output import json_lines, stdin_is_terminal, stdin_taken
from .settings import Settings, pass_settings

HISTORY_FILE = "shell_history"
HISTORY_LINES = 1000
PROMPT = "mcl2> "


def _setup_history(path: Path) -> Any:
    try:
        import readline
    except ImportError:  # pragma: no cover - Python built without readline
        return None
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(HISTORY_LINES)
    return readline


def _save_history(readline: Any, path: Path) -> None:
    if readline is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        readline.write_history_file(path)
    except OSError:
        pass


#: Why a command inside the shell cannot read standard input.
STDIN_IS_THE_SHELLS = (
    "inside mcl2 shell, standard input holds the shell's lines: give a FILE "
    "(`put KEY FILE`, `--keys-from FILE`), or run the command outside the shell"
)


def run_line(shell: Settings, argv: list[str]) -> int:
    """Run one line as ``mcl2 ARGV`` with the shell's options and session; its exit status."""
    line = dataclasses.replace(shell, keep_client=True)  # shares shell.session
    try:
        status = cli.main(args=argv, prog_name="mcl2", obj=line, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        status = 130
    except click.ClickException as exc:
        exc.show()
        status = exc.exit_code
    except click.exceptions.Exit as exc:
        status = exc.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        status = 130
    return status if isinstance(status, int) else EXIT_OK


@cli.command(context_settings=CONTEXT_SETTINGS)
@output_options(
    json_help="Print every line's results as JSON, one document per line (as if each line had "
    "--json)."
)
@pass_settings
def shell(settings: Settings) -> None:
    """Run mcl2 commands from a prompt, with one client kept open.

    \b
    mcl2> put k ./file
    mcl2> ls -l
    mcl2> info k
    mcl2> exit

    Each line is a command line without the 'mcl2' (quoted as in a shell).
    Options given before 'shell' apply to every line; connection options on
    a line do not change the client once it is set up; --json, -q and -v
    given before or after 'shell' apply to every line. 'exit', 'quit' or
    Ctrl-D leaves; 'help [COMMAND]' shows help. Values and --keys-from
    cannot come from stdin inside the shell (its lines come from there):
    give a FILE. The exit status is the last command's.
    """
    history_path = settings.resolved_state_dir / HISTORY_FILE
    readline = _setup_history(history_path)
    ctx = click.get_current_context()
    ctx.call_on_close(settings.close)
    prompt = PROMPT if stdin_is_terminal() else ""  # piped lines: clean output
    try:
        status = _loop(settings, prompt)
    finally:
        _save_history(readline, history_path)
    ctx.exit(status)


def _loop(settings: Settings, prompt: str) -> int:
    """Read and run lines until exit, quit or end of input; the last command's status."""
    status = EXIT_OK
    with stdin_taken(STDIN_IS_THE_SHELLS), json_lines():
        while True:
            try:
                text = input(prompt)
            except EOFError:
                click.echo("", err=True)
                return status
            except KeyboardInterrupt:
                click.echo("", err=True)
                continue
            try:
                argv = shlex.split(text)
            except ValueError as exc:
                click.echo(f"Error: {exc}", err=True)
                status = EXIT_USAGE
                continue
            if not argv:
                continue
            if argv[0] in ("exit", "quit"):
                return status
            if argv[0] == "shell":
                click.echo("Error: already in the shell", err=True)
                status = EXIT_USAGE
                continue
            if argv[0] == "help":
                argv = [*argv[1:], "--help"]
            status = run_line(settings, argv)
