"""Property-based tests of mcl2's argument handling (hypothesis + CliRunner).

Whatever the arguments, mcl2 ends with one of its documented exit codes (0, 1, 2,
3) and never with an unexpected Python exception (keys that are not UTF-8 included).
The cluster address points at a closed loopback port, so a command that gets past
argument checking fails fast (exit 1) instead of moving data; ``cluster up`` is left
out (it starts processes).
"""

from __future__ import annotations

import socket

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mooncake_cffi.cli import cli


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


PORT = _closed_port()

commands = st.sampled_from(
    [
        ["put"],
        ["get"],
        ["exists"],
        ["rm"],
        ["stat"],
        ["cluster", "status"],
        ["cluster", "down"],
        ["cluster"],
        [],
        ["nope"],
        ["ls"],
        ["info"],
        ["segments"],
        ["metrics"],
        ["doctor"],
        ["bench"],
    ]
)
tokens = st.sampled_from(
    [
        "--json",
        "-q",
        "-v",
        "-vv",
        "--force",
        "--strict",
        "--missing-ok",
        "--overwrite",
        "-o",
        "-d",
        "--dir",
        "--prefix",
        "--keys-from",
        "-",
        "--config",
        "{}",
        "[]",
        "{bad",
        "--master",
        "nohost",
        "host:99999",
        ":",
        "--protocol",
        "rdma",
        "udp",
        "--connect-timeout",
        "0",
        "-1",
        "abc",
        "--l1-size",
        "1 GB",
        "-5",
        "--hostname",
        "h:1",
        "--segment-size",
        "K=V",
        "=",
        "a=",
        "=b",
        "..",
        "a/b",
        "",
        "\0",
        "ключ",
        "-h",
        "caf\udce9",
        "--raw",
        "-l",
        "--limit",
        "--ops",
        "put,get",
        "--keys",
        "--size",
        "4KiB",
        "--batch",
        "-c",
        "--admin",
        "ftp://x",
        "--replicas",
        "2",
        "--cluster-id",
        "etcd://127.0.0.1:1",
    ]
) | st.text(max_size=12)


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(commands, st.lists(tokens, max_size=6), st.binary(max_size=64))
def test_any_arguments_end_in_a_documented_exit_code(tmp_path_factory, command, args, stdin):
    state = tmp_path_factory.mktemp("state")
    env = {
        "MCL2_MASTER": f"127.0.0.1:{PORT}",
        "MCL2_METADATA_SERVER": f"http://127.0.0.1:{PORT}/metadata",
        "MCL2_STATE_DIR": str(state),
        "MCL2_CONFIG": None,
        "MCL2_PROTOCOL": None,
        "MCL2_HOSTNAME": None,
        "MCL2_L1_SIZE": None,
        "MCL2_CLUSTER_ID": None,
        "MCL2_CONNECT_TIMEOUT": "0.5",
        "MCL2_ADMIN": f"http://127.0.0.1:{PORT}",
    }
    argv = command + args
    if "\0" in "".join(argv):
        return  # not representable in a real argv
    result = CliRunner().invoke(cli, argv, input=stdin, env=env, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"mcl2 {argv!r} raised {result.exception!r}") from result.exception
    assert result.exit_code in (0, 1, 2, 3), (argv, result.exit_code, result.output)
    assert "Traceback" not in result.output
