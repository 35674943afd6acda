"""mcl2's data commands (put, get, exists, stat, rm, --json), run in-process with click's
CliRunner against the session cluster.

Every test uses keys of its own (the session cluster is shared).  Options, configs and the
local cluster are in test_cli_options.py, help and the man page in test_cli_manpage.py, the
installed console script in test_cli_console.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import (
    blob,
)
from mooncake_cffi.cli.errors import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

# -- put / get round trips -------------------------------------------------------------------


def test_put_file_then_get_to_stdout_is_byte_exact(run, key: str, tmp_path: Path) -> None:
    data = blob(1 << 20)
    src = tmp_path / "src.bin"
    src.write_bytes(data)

    put = run("put", key, str(src))
    assert put.exit_code == EXIT_OK, put.output
    assert f"{key}: stored" in put.stderr

    got = run("get", key)
    assert got.exit_code == EXIT_OK, got.stderr
    assert got.stdout_bytes == data


def test_stdin_to_stdout_round_trip(run, key: str) -> None:
    data = b"\x00\r\n\xffline\n" * 1000
    assert run("put", key, input=data).exit_code == EXIT_OK
    assert run("put", f"{key}-dash", "-", input=data).exit_code == EXIT_OK
    assert run("get", key).stdout_bytes == data
    assert run("get", f"{key}-dash", "-o", "-").stdout_bytes == data


def test_get_to_file_writes_the_value(run, key: str, tmp_path: Path) -> None:
    data = blob(4096)
    assert run("put", key, input=data).exit_code == EXIT_OK
    out = tmp_path / "out.bin"
    result = run("get", key, "-o", str(out))
    assert result.exit_code == EXIT_OK, result.output
    assert out.read_bytes() == data


def test_existing_key_is_reported_and_kept(run, key: str) -> None:
    assert run("put", key, input=b"first").exit_code == EXIT_OK
    again = run("put", key, input=b"second")
    assert again.exit_code == EXIT_OK
    assert f"{key}: exists, kept (use --overwrite to replace)" in again.stderr
    assert run("get", key).stdout_bytes == b"first"


def test_overwrite_replaces_the_value(run, key: str) -> None:
    assert run("put", key, input=b"first").exit_code == EXIT_OK
    result = run("put", "--overwrite", key, input=b"second, longer")
    assert result.exit_code == EXIT_OK, result.output
    assert run("get", key).stdout_bytes == b"second, longer"


def test_several_pairs_go_as_one_batch_and_get_into_a_directory(
    run, key: str, tmp_path: Path
) -> None:
    files = {}
    for i in range(3):
        path = tmp_path / f"f{i}"
        path.write_bytes(blob(1000 + i))
        files[f"{key}-{i}"] = path
    result = run("put", *[f"{k}={p}" for k, p in files.items()])
    assert result.exit_code == EXIT_OK, result.output
    assert "stored 3 of 3 keys" in result.stderr

    out = tmp_path / "out"
    got = run("get", *files, "-d", str(out))
    assert got.exit_code == EXIT_OK, got.output
    for k, path in files.items():
        assert (out / k).read_bytes() == path.read_bytes()


def test_put_dir_with_prefix(run, key: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"A")
    (src / "b").write_bytes(b"BB")
    (src / "sub").mkdir()  # not a regular file: skipped
    result = run("put", "--dir", str(src), "--prefix", f"{key}/")
    assert result.exit_code == EXIT_OK, result.output
    assert run("get", f"{key}/b").stdout_bytes == b"BB"
    assert run("exists", f"{key}/sub").exit_code == EXIT_NOT_FOUND


def test_keys_from_stdin_for_a_large_batch(run, key: str, tmp_path: Path) -> None:
    n = 600  # more than two batches of 256
    lines = []
    for i in range(n):
        path = tmp_path / f"v{i}"
        path.write_bytes(f"value {i}".encode())
        sep = "\t" if i % 2 else "="
        lines.append(f"{key}-{i}{sep}{path}")
    put = run("put", "--keys-from", "-", input="\n".join(lines) + "\n")
    assert put.exit_code == EXIT_OK, put.output
    assert f"stored {n} of {n} keys" in put.stderr

    keys = "".join(f"{key}-{i}\n" for i in range(n))
    exists = run("exists", "--keys-from", "-", input=keys)
    assert exists.exit_code == EXIT_OK
    assert exists.stdout.count("\ttrue\n") == n

    out = tmp_path / "out"
    got = run("get", "--keys-from", "-", "-d", str(out), input=keys)
    assert got.exit_code == EXIT_OK, got.output
    assert (out / f"{key}-599").read_bytes() == b"value 599"
    assert len(list(out.iterdir())) == n

    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(keys)
    rm = run("rm", "--force", "--keys-from", str(keys_file))
    assert rm.exit_code == EXIT_OK, rm.output
    assert f"removed {n} of {n} keys" in rm.stderr


def test_l1_staging_round_trips_and_splits_batches(run, key: str, tmp_path: Path) -> None:
    """--l1-size stages transfers through registered memory (what rdma needs), over tcp."""
    files = {}
    for i in range(6):
        path = tmp_path / f"s{i}"
        path.write_bytes(blob(700_000 + i))
        files[f"{key}-{i}"] = path
    put = run("--l1-size", "1MB", "put", *[f"{k}={p}" for k, p in files.items()])
    assert put.exit_code == EXIT_OK, put.output
    out = tmp_path / "out"
    got = run("get", *files, "-d", str(out), "--l1-size", "2MB")
    assert got.exit_code == EXIT_OK, got.output
    for k, path in files.items():
        assert (out / k).read_bytes() == path.read_bytes()
    single = run("--l1-size", "1MB", "get", f"{key}-0")
    assert single.stdout_bytes == files[f"{key}-0"].read_bytes()

    too_small = run("--l1-size", "512KB", "get", f"{key}-0")
    assert too_small.exit_code == EXIT_ERROR
    assert "--l1-size" in too_small.stderr


def test_empty_input_file_is_refused(run, key: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    result = run("put", key, str(empty))
    assert result.exit_code == EXIT_USAGE
    assert "cannot store 0 bytes" in result.stderr


# -- exists / stat / missing keys --------------------------------------------------------------


def test_exists_prints_one_line_per_key_and_exits_3_for_a_missing_one(run, key: str) -> None:
    assert run("put", key, input=b"x").exit_code == EXIT_OK
    present = run("exists", key)
    assert present.exit_code == EXIT_OK
    assert present.stdout == f"{key}\ttrue\n"

    mixed = run("exists", key, f"{key}-missing")
    assert mixed.exit_code == EXIT_NOT_FOUND
    assert mixed.stdout == f"{key}\ttrue\n{key}-missing\tfalse\n"

    quiet = run("-q", "exists", f"{key}-missing")
    assert quiet.exit_code == EXIT_NOT_FOUND
    assert quiet.stdout == ""


def test_get_of_a_missing_key_exits_3(run, key: str, tmp_path: Path) -> None:
    result = run("get", f"{key}-missing")
    assert result.exit_code == EXIT_NOT_FOUND
    assert "not found" in result.stderr
    assert result.stdout_bytes == b""

    out = tmp_path / "never"
    assert run("get", f"{key}-missing", "-o", str(out)).exit_code == EXIT_NOT_FOUND
    assert not out.exists()


def test_get_several_keys_writes_the_others_and_exits_3(run, key: str, tmp_path: Path) -> None:
    assert run("put", key, input=b"here").exit_code == EXIT_OK
    out = tmp_path / "out"
    result = run("get", key, f"{key}-missing", "-d", str(out))
    assert result.exit_code == EXIT_NOT_FOUND
    assert (out / key).read_bytes() == b"here"
    assert f"{key}-missing: not found" in result.stderr


def test_stat_prints_sizes(run, key: str) -> None:
    assert run("put", key, input=b"12345").exit_code == EXIT_OK
    result = run("stat", key, f"{key}-missing")
    assert result.exit_code == EXIT_NOT_FOUND
    assert result.stdout == f"{key}\t5\n{key}-missing\t-\n"


def test_get_refuses_keys_that_are_not_file_names(run, key: str, tmp_path: Path) -> None:
    result = run("get", f"{key}/x", "..", "-d", str(tmp_path / "out"))
    assert result.exit_code == EXIT_ERROR
    assert "cannot be used as a file name" in result.stderr


# -- rm ----------------------------------------------------------------------------------------


def test_rm_under_a_read_lease_explains_and_force_removes(run, key: str) -> None:
    assert run("put", key, input=b"leased").exit_code == EXIT_OK
    assert run("get", key).exit_code == EXIT_OK  # the read takes a ~10 s lease

    refused = run("rm", key)
    assert refused.exit_code == EXIT_ERROR
    assert "OBJECT_HAS_LEASE" in refused.stderr
    assert "--force" in refused.stderr
    assert run("exists", key).exit_code == EXIT_OK

    forced = run("rm", "--force", key)
    assert forced.exit_code == EXIT_OK, forced.output
    assert f"{key}: removed" in forced.stderr
    assert run("exists", key).exit_code == EXIT_NOT_FOUND


def test_rm_of_a_missing_key_is_fine_unless_strict(run, key: str) -> None:
    relaxed = run("rm", f"{key}-missing")
    assert relaxed.exit_code == EXIT_OK
    assert "absent" in relaxed.stderr
    assert run("rm", "--strict", f"{key}-missing").exit_code == EXIT_NOT_FOUND


# -- --json ------------------------------------------------------------------------------------


def test_json_output_parses(run, key: str, tmp_path: Path) -> None:
    assert run("put", key, input=b"abc").exit_code == EXIT_OK
    put = run("put", "--json", key, input=b"abc")
    assert json.loads(put.stdout) == {key: {"status": "exists", "bytes": 3}}

    exists = run("--json", "exists", key, f"{key}-missing")
    assert exists.exit_code == EXIT_NOT_FOUND
    assert json.loads(exists.stdout) == {key: True, f"{key}-missing": False}

    got = run("get", key, "-d", str(tmp_path), "--json")
    record = json.loads(got.stdout)[key]
    assert record["status"] == "written" and record["bytes"] == 3

    rm = run("rm", "--force", "--json", key, f"{key}-missing")
    assert json.loads(rm.stdout) == {
        key: {"status": "removed"},
        f"{key}-missing": {"status": "absent"},
    }


def test_json_rm_reports_a_lease(run, key: str) -> None:
    assert run("put", key, input=b"abc").exit_code == EXIT_OK
    assert run("exists", key).exit_code == EXIT_OK  # renews the lease
    assert run("get", key).exit_code == EXIT_OK
    rm = run("rm", "--json", key)
    assert rm.exit_code == EXIT_ERROR
    assert json.loads(rm.stdout)[key]["error"] == "OBJECT_HAS_LEASE"
    assert run("rm", "-f", key).exit_code == EXIT_OK
