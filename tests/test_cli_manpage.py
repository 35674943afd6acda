"""mcl2's help, its man page (every command and option in it, and it renders), ``python -m``
and shell completion."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from cli_helpers import (
    ENV_VARS,
    MAN_PAGE,
    MCL2,
    clean_env,
    command_for,
    command_paths,
    process_env,
)
from click.testing import CliRunner
from mooncake_cffi.cli import cli
from mooncake_cffi.cli.errors import EXIT_OK, EXIT_USAGE

from mooncake_cffi.cluster import LocalCluster

# -- help and the man page ------------------------------------------------------------------------


def _man_section(name: str) -> str:
    """The text of the man page's section ``.SH NAME`` or ``.SS NAME``."""
    man = MAN_PAGE.read_text()
    start = re.search(rf"^\.S[HS] {re.escape(name)}\n", man, re.M)
    assert start is not None, f"no section {name} in {MAN_PAGE}"
    end = re.search(r"^\.S[HS] ", man[start.end() :], re.M)
    return man[start.end() : start.end() + end.start()] if end else man[start.end() :]


def _plain(troff: str) -> str:
    """A man page line without macros, quotes and font escapes: ``put KEY [FILE|-]``."""
    text = re.sub(r"^\.[A-Z]+ ?", "", troff)
    text = re.sub(r"\\f[BIRP]", "", text).replace("\\-", "-").replace("\\&", "")
    return " ".join(text.replace('"', " ").split())


def man_command_headings() -> list[str]:
    """The first line of every entry of COMMANDS, as plain text."""
    return [_plain(entry.splitlines()[0]) for entry in _man_section("COMMANDS").split(".TP\n")[1:]]


def man_command_options() -> dict[str, set[str]]:
    """Every option of the man page's "Command options", with the commands its entry names
    (``.RB ( put ", " get )`` lines)."""
    found: dict[str, set[str]] = {}
    for entry in _man_section("Command options").split(".TP\n")[1:]:
        lines = entry.splitlines()
        flags = re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b", lines[0].replace("\\-", "-"))
        commands: set[str] = set()
        for line in lines[1:]:
            listed = re.fullmatch(r"\.RB \( (.+) \)", line)  # .RB ( put ", " "cluster up" )
            if listed:
                commands |= {part.strip(' "') for part in listed.group(1).split('", "')}
        for flag in flags:
            found.setdefault(flag, set()).update(commands)
    return found


def shared_flags() -> set[str]:
    from mooncake_cffi.cli import options

    specs = [*options.CONNECTION, options.STATE_DIR, options.ADMIN, *options.OUTPUT, options.JSON]
    flags = {flag for spec in specs for flag in spec.flags if flag.startswith("-")}
    return flags | {"-h", "--help"}


def test_every_command_has_help_and_an_entry_in_the_man_page() -> None:
    headings = man_command_headings()
    runner = CliRunner()
    paths = list(command_paths(cli))
    assert ("put",) in paths and ("cluster", "restart") in paths and ("completion",) in paths
    for path in paths:
        result = runner.invoke(cli, [*path, "--help"], env=clean_env())
        assert result.exit_code == EXIT_OK, (path, result.output)
        assert "Usage: " in result.stdout
        command = command_for(path)
        assert command.help, f"{' '.join(path)} has no help text"
        if isinstance(command, click.Group):
            continue  # a group's commands have the entries
        name = " ".join(path)
        assert any(h == name or h.startswith(f"{name} ") for h in headings), (
            f"{name} has no entry under COMMANDS in {MAN_PAGE}"
        )


def test_every_option_is_in_the_man_page_with_its_commands() -> None:
    """Shared options anywhere; a command's own options in "Command options", in an entry
    that names the command; and no entry names a command that lacks the option."""
    man = MAN_PAGE.read_text().replace("\\-", "-")
    documented = man_command_options()
    shared = shared_flags()
    for path in [(), *command_paths(cli)]:
        command = command_for(path)
        name = " ".join(path)
        for param in command.params:
            if not isinstance(param, click.Option) or param.hidden:
                continue
            for opt in param.opts + param.secondary_opts:
                assert opt in man, f"{opt} ({name or 'mcl2'}) is not in the man page"
                if path and opt not in shared:
                    assert name in documented.get(opt, set()), (
                        f"{opt} of `mcl2 {name}` is not under Command options with ({name})"
                    )
            if param.envvar:
                assert param.envvar in man
    for flag, commands in documented.items():
        for name in commands:
            command = command_for(tuple(name.split()))
            flags = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
            assert flag in flags, f"the man page gives {flag} to `mcl2 {name}`, which has none"
    for name in ENV_VARS:
        assert name in man
    for code in ("0", "1", "2", "3", "130", "141"):
        assert f".B {code}\n" in MAN_PAGE.read_text()


def test_the_man_page_refers_only_to_pages_that_exist() -> None:
    shipped = {path.name for path in MAN_PAGE.parent.iterdir()}
    for name, section in re.findall(r"^\.BR ([\w.-]+) \((\d)\)", MAN_PAGE.read_text(), re.M):
        assert f"{name}.{section}" in shipped, f"{name}({section}) is not shipped"


def test_the_man_page_renders(tmp_path: Path) -> None:
    groff = "/usr/bin/groff"
    if not Path(groff).exists():
        pytest.skip("groff is not installed")
    result = subprocess.run(
        [groff, "-man", "-ww", "-z", str(MAN_PAGE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert result.stderr == ""


# -- python -m, shell completion ----------------------------------------------------------------


def test_python_dash_m_runs_mcl2() -> None:
    run = [sys.executable, "-m", "mooncake_cffi.cli"]
    version = subprocess.run([*run, "--version"], capture_output=True, timeout=60, check=False)
    assert version.returncode == EXIT_OK, version.stderr
    assert version.stdout.startswith(b"mcl2 (mooncake-cffi) ")
    usage = subprocess.run([*run, "no-such-command"], capture_output=True, timeout=60, check=False)
    assert usage.returncode == EXIT_USAGE
    assert b"Usage: mcl2 " in usage.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_script_for_each_shell(shell: str) -> None:
    result = CliRunner().invoke(cli, ["completion", shell], env=clean_env())
    assert result.exit_code == EXIT_OK, result.output
    assert "_MCL2_COMPLETE" in result.stdout
    login = CliRunner().invoke(cli, ["completion"], env={**clean_env(), "SHELL": f"/bin/{shell}"})
    assert login.stdout == result.stdout
    unknown = CliRunner().invoke(cli, ["completion"], env={**clean_env(), "SHELL": "/bin/tcsh"})
    assert unknown.exit_code == EXIT_USAGE and "give one of bash, zsh, fish" in unknown.stderr


@pytest.mark.skipif(not MCL2.exists(), reason="the mcl2 console script is not installed")
def test_the_console_script_completes_commands_and_cluster_roles(cluster: LocalCluster) -> None:
    def complete(words: str) -> list[str]:
        env = process_env(
            _MCL2_COMPLETE="bash_complete",
            COMP_WORDS=words,
            COMP_CWORD=str(len(words.split()) - 1),
            MCL2_STATE_DIR=str(cluster.state_dir),
        )
        done = subprocess.run([str(MCL2)], env=env, capture_output=True, timeout=60, check=False)
        assert done.returncode == EXIT_OK, done.stderr
        return done.stdout.decode().splitlines()

    assert "plain,cluster" in complete("mcl2 clu")
    assert "plain,restart" in complete("mcl2 cluster re")
    assert complete("mcl2 cluster restart stor") == ["plain,storage"]
