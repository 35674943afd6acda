"""Which Mooncake wheel is installed, and how the package adapts to it (mooncake_cffi.wheel).

These run on whatever wheel the venv holds: scripts/wheel_venvs.sh runs them, with the client
and CLI integration tests, on the oldest and newest supported wheels.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from mooncake_cffi.cli import cli

import mooncake_cffi
from mooncake_cffi import wheel
from mooncake_cffi.cluster import ClusterError, LocalCluster, find_binary

MASTER_BINARY = "mooncake_master"


def test_mooncake_version_is_the_installed_wheels() -> None:
    found = wheel.detect()
    assert found.distribution in wheel.DISTRIBUTIONS
    assert mooncake_cffi.mooncake_version() == importlib.metadata.version(found.distribution)
    assert found.supported, f"the test venv holds {found.version}, outside the range"


def test_mcl2_version_names_the_wheel_in_use() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0, result.output
    first, second = result.output.splitlines()
    assert first == f"mcl2 (mooncake-cffi) {mooncake_cffi.__version__}"
    found = wheel.detect()
    assert f"{found.distribution} {found.version} ({found.variant}, supported)" in second


@pytest.mark.parametrize("version", ["0.3.9", "0.3.10.post1", "0.3.15", "1.0.0", "0.3.11rc1", ""])
def test_a_version_outside_the_range_is_refused_with_one_message(version: str) -> None:
    found = wheel.Wheel("mooncake-transfer-engine-non-cuda", version, "cpu", Path("/x/mooncake"))
    with pytest.raises(wheel.UnsupportedWheelError) as info:
        wheel.check_supported(found)
    msg = str(info.value)
    assert "\n" not in msg
    assert f"found mooncake-transfer-engine-non-cuda {version}" in msg
    assert f"{wheel.OLDEST} to {wheel.NEWEST}" in msg
    assert f"pip install 'mooncake-transfer-engine-non-cuda=={wheel.DEFAULT_VERSION}'" in msg


@pytest.mark.parametrize("version", ["0.3.10.post2", "0.3.11", "0.3.12.post1", "0.3.13.post1"])
def test_every_version_in_the_range_is_accepted(version: str) -> None:
    found = wheel.Wheel("mooncake-transfer-engine", version, "cuda", Path("/x/mooncake"))
    assert wheel.check_supported(found) is found


def test_the_cuda13_wheel_of_0_3_14_is_accepted_and_named() -> None:
    found = wheel.Wheel("mooncake-transfer-engine-cuda13", "0.3.14", "cuda13", Path("/x/mooncake"))
    assert wheel.check_supported(found) is found
    assert wheel.DISTRIBUTIONS["mooncake-transfer-engine-cuda13"] == "cuda13"
    assert wheel.CUDA13_ONLY == ("0.3.14",)
    # No cuda13 release of the default version exists: the fix offered is the CPU wheel.
    newer = wheel.Wheel("mooncake-transfer-engine-cuda13", "0.3.15", "cuda13", Path("/x/m"))
    with pytest.raises(wheel.UnsupportedWheelError) as info:
        wheel.check_supported(newer)
    assert f"'mooncake-transfer-engine-non-cuda=={wheel.DEFAULT_VERSION}'" in str(info.value)
    assert "-cuda13) " in str(info.value)


def _extension(where: Path, name: str) -> Path:
    path = where / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    path.write_bytes(b"\x7fELF")
    return path


def test_the_binding_is_found_in_either_layout(tmp_path: Path) -> None:
    """0.3.14 moved the binding to ``mooncake/_store.cpython-*.so`` and made
    ``mooncake/store`` a package choosing an implementation; older wheels have
    ``mooncake/store.so``.  The probe finds the extension module, never the package."""
    old = tmp_path / "old" / "mooncake"
    old.mkdir(parents=True)
    (old / "store.so").write_bytes(b"\x7fELF")
    assert wheel.find_binding(old) == old / "store.so"
    assert wheel.Wheel("d", "0.3.13.post1", "cpu", old).store_path == old / "store.so"

    new = tmp_path / "new" / "mooncake"
    (new / "store").mkdir(parents=True)
    (new / "store" / "__init__.py").write_text("")
    binding = _extension(new, "_store")
    assert wheel.find_binding(new) == binding
    assert wheel.Wheel("d", "0.3.14", "cuda13", new).store_path == binding

    # Both (a newer wheel unpacked over an older one): the newer layout wins.
    (old / "store.so").unlink()
    _extension(old, "store")
    both = _extension(old, "_store")
    assert wheel.find_binding(old) == both

    empty = tmp_path / "empty" / "mooncake"
    (empty / "store").mkdir(parents=True)
    assert wheel.find_binding(empty) is None
    assert wheel.Wheel("d", "0.3.14", "cuda13", empty).store_path is None


def _fake_metadata(where: Path, version: str) -> None:
    """Metadata of the installed wheel's distribution that claims ``version``, to put ahead of
    the real one on sys.path."""
    name = wheel.detect().distribution
    info = where / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_client_refuses_an_unsupported_wheel_before_touching_mooncake(tmp_path: Path) -> None:
    _fake_metadata(tmp_path, "0.3.9")
    code = textwrap.dedent(
        """
        import sys
        import mooncake_cffi
        try:
            mooncake_cffi.Client({"local_hostname": "127.0.0.1",
                                  "metadata_server": "http://127.0.0.1:1/metadata",
                                  "master_server_addr": "127.0.0.1:1"})
        except mooncake_cffi.UnsupportedWheelError as exc:
            print(exc)
            print("mooncake.store imported:", "mooncake.store" in sys.modules)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop(wheel.ALLOW_ENV, None)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("unsupported Mooncake wheel: found ")
    assert "0.3.9" in lines[0] and wheel.OLDEST in lines[0] and "pip install" in lines[0]
    assert lines[1] == "mooncake.store imported: False"


def test_mcl2_reports_an_unsupported_wheel_in_one_line(tmp_path: Path) -> None:
    _fake_metadata(tmp_path, "0.3.9")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop(wheel.ALLOW_ENV, None)
    argv = [str(Path(sys.executable).with_name("mcl2")), "--master", "127.0.0.1:1"]
    argv += ["--metadata-server", "http://127.0.0.1:1/metadata", "exists", "k"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.startswith("Error: unsupported Mooncake wheel: found ")
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr  # no traceback


def test_store_so_is_probed_for_the_libraries_it_needs() -> None:
    binding = wheel.detect().store_path
    assert binding is not None and str(binding) == wheel.store_so_path()
    needed = wheel.needed_libraries(binding)
    assert "libibverbs.so.1" in needed
    assert wheel.needed_libraries(Path(__file__)) == []


def test_master_flags_come_from_the_installed_master() -> None:
    flags = wheel.master_flags(find_binary(MASTER_BINARY))
    assert {"rpc_address", "rpc_port", "metrics_port", "enable_http_metadata_server"} <= flags
    # -metrics_host arrived in 0.3.13; the local cluster passes it only where it exists.
    assert ("metrics_host" in flags) == (wheel.detect().version_tuple >= (0, 3, 13, -1))


def test_binaries_get_the_cuda_runtime_only_where_they_link_it() -> None:
    binary = find_binary(MASTER_BINARY)
    env = wheel.binary_env(binary, base={"LD_LIBRARY_PATH": "/opt/x"})
    if "libcudart.so.12" in wheel.needed_libraries(binary):
        first = env["LD_LIBRARY_PATH"].split(":")[0]
        assert (Path(first) / "libcudart.so.12").is_file()
        assert env["LD_LIBRARY_PATH"].endswith(":/opt/x")
    else:
        assert env == {}


def test_store_so_is_loaded_without_importing_mooncake_store() -> None:
    """The shim loads store.so by path, with the wheel's version picking the layout of
    Mooncake's ReplicateConfig: mooncake.store is never imported (on the 0.3.12 / 0.3.13
    wheels it would fail before libcudart is preloaded)."""
    code = (
        "import sys\n"
        "from mooncake_cffi.capi import ensure_mooncake_loaded, ffi, lib\n"
        "ensure_mooncake_loaded()\n"
        "assert 'mooncake.store' not in sys.modules, 'imported'\n"
        "print(ffi.string(lib.mcs_replica_layout()).decode())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    layout = proc.stdout.strip()
    version = wheel.mooncake_version()
    assert version.startswith(layout + ".") or version == layout, (version, layout)


def test_older_wheels_get_sizes_in_bytes_and_keep_a_zero_segment() -> None:
    old = wheel.Wheel("mooncake-transfer-engine-non-cuda", "0.3.11.post1", "cpu", None)
    setup = {"global_segment_size": "0", "local_buffer_size": "32 MB", "protocol": "tcp"}
    adapted = wheel.adapt_setup_config(setup, old)
    assert adapted == {
        "global_segment_size": "0",
        "local_buffer_size": "33554432",
        "protocol": "tcp",
    }
    assert setup["local_buffer_size"] == "32 MB"  # the caller's dict is left alone
    new = wheel.Wheel("mooncake-transfer-engine-non-cuda", "0.3.12.post1", "cpu", None)
    assert wheel.adapt_setup_config(setup, new) == setup


def test_a_client_with_segment_size_zero_contributes_no_memory(cluster: LocalCluster) -> None:
    before = cluster.segments()
    with mooncake_cffi.Client(cluster.client_config(global_segment_size="0")) as client:
        client.put("wheel-zero-segment", b"stays on the storage node")
        assert cluster.segments() == before
    with mooncake_cffi.Client(cluster.client_config()) as other:
        assert other.get("wheel-zero-segment") == b"stays on the storage node"
        other.remove("wheel-zero-segment", force=True)


def test_a_client_may_still_contribute_a_segment(make_cluster) -> None:
    local = make_cluster().start()
    with mooncake_cffi.Client(local.client_config(global_segment_size="32 MB")) as client:
        assert len(local.segments()) == 2
        client.put("wheel-own-segment", b"x")
    assert client.closed


def test_the_extras_pin_the_default_wheel() -> None:
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    for variant, dist in (
        ("cpu", "mooncake-transfer-engine-non-cuda"),
        ("cuda", "mooncake-transfer-engine"),
    ):
        assert extras[variant] == [f"{dist}=={wheel.DEFAULT_VERSION}"]
    v = wheel.parse_version
    assert v(wheel.OLDEST) <= v(wheel.DEFAULT_VERSION) <= v(wheel.NEWEST)
    assert set(wheel.TESTED) >= {wheel.OLDEST, wheel.NEWEST, wheel.DEFAULT_VERSION}


def test_ha_masters_are_refused_by_name_where_the_master_has_no_oplog(make_cluster) -> None:
    if "enable_oplog" in wheel.master_flags(find_binary(MASTER_BINARY)):
        pytest.skip("this master has -enable_oplog: HA masters run (tests/test_ha.py)")
    with pytest.raises(ClusterError, match=r"HA masters .*-enable_oplog, which mooncake_master"):
        make_cluster(ha=True).start(timeout=30)


def test_the_range_ends_parse_to_the_tuples_compared() -> None:
    assert wheel.parse_version(wheel.OLDEST) == wheel._OLDEST
    assert wheel.parse_version(wheel.NEWEST) == wheel._NEWEST
    assert wheel.parse_version("0.3.13") < wheel.parse_version("0.3.13.post0")
