"""``mcl2 completion [bash|zsh|fish]``: the script that completes mcl2's commands, options
and local-cluster roles in a shell (click's, as ``_MCL2_COMPLETE=bash_source mcl2`` prints)."""

from __future__ import annotations

import os

import click

from .app import CONTEXT_SETTINGS, cli
from .output import write_stdout

SHELLS = ("bash", "zsh", "fish")
#: The environment variable click's completion answers to (named after the program).
COMPLETE_VAR = "_MCL2_COMPLETE"


def _login_shell() -> str | None:
    name = os.path.basename(os.environ.get("SHELL", ""))
    return name if name in SHELLS else None


@cli.command(context_settings=CONTEXT_SETTINGS)
@click.argument("shell_name", metavar="[SHELL]", type=click.Choice(SHELLS), required=False)
def completion(shell_name: str | None) -> None:
    """Print the completion script for SHELL: bash, zsh or fish (default:
    the one $SHELL names).

    \b
    eval "$(mcl2 completion bash)"    add to ~/.bashrc
    eval "$(mcl2 completion zsh)"     add to ~/.zshrc
    mcl2 completion fish > ~/.config/fish/completions/mcl2.fish

    It completes commands, options, choices, file names and the roles of
    `mcl2 cluster restart|kill`. The script is click's: the variable
    _MCL2_COMPLETE=bash_source (zsh_source, fish_source) makes mcl2 print it.
    """
    from click.shell_completion import get_completion_class

    name = shell_name or _login_shell()
    if name is None:
        raise click.UsageError(
            f"cannot tell the shell from $SHELL ({os.environ.get('SHELL') or 'unset'}): "
            f"give one of {', '.join(SHELLS)}"
        )
    completer = get_completion_class(name)
    assert completer is not None  # every name in SHELLS is one of click's
    script = completer(cli, {}, "mcl2", COMPLETE_VAR).source()
    write_stdout(script.encode() + (b"" if script.endswith("\n") else b"\n"))
