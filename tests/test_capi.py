"""The shim's C ABI called directly through cffi: the header and the cdef agree, and a
handle's life (close, free, fork, loading) is misuse-proof.

Misuse of batches is in test_capi_misuse.py, the multi-part, cluster-wide, registered-memory
and teardown calls in test_capi_calls.py.  None may crash the process (a crash would take the
whole pytest run down).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from capi_helpers import (
    E_CLOSED,
    E_FORKED,
    E_INVALID_ARG,
    E_INVALID_HANDLE,
    NULL,
    REPO,
    make_batch,
    run_batch,
)
from process_helpers import wait_until

import mooncake_cffi
from mooncake_cffi import capi
from mooncake_cffi.capi import ffi, lib

# ------------------------------------------------------- header and cdef


def test_installed_header_is_the_repository_header():
    assert capi.HEADER_PATH.read_text() == (REPO / "shim" / "mcs.h").read_text()


def _declared_functions(header: str) -> set[str]:
    cdef = capi.cdef_from_header(header)
    return set(re.findall(r"\b(mcs_\w+)\s*\(", cdef))


def test_cdef_matches_the_exported_symbols():
    """Every declared function is exported by libmcs.so and nothing else is."""
    declared = _declared_functions(capi.HEADER_PATH.read_text())
    so = Path(mooncake_cffi.__file__).parent / "libmcs.so"
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True
    ).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[-2:-1] == ["T"]}
    # ... and the one C++ name store.so's reads call instead of its own (the replica choice)
    interposed = {n for n in exported if n.startswith("_ZN8mooncake17SelectBestReplica")}
    assert len(interposed) == 1, exported - declared
    assert declared == exported - interposed


def test_declarations_are_precompiled_from_the_header():
    assert capi.PRECOMPILED  # the build's out-of-line module, not runtime parsing
    assert capi.API_MODE  # compiled C calls (_mcs_api), not libffi's
    import cffi

    parsed = cffi.FFI()
    parsed.cdef(capi.cdef_from_header(capi.HEADER_PATH.read_text()))
    for struct in (
        "struct mcs_lanes",
        "struct mcs_batch",
        "struct mcs_completion",
        "struct mcs_lane_stats",
        "struct mcs_op_stats",
        "struct mcs_replica_options",
        "struct mcs_strings",
    ):
        assert ffi.sizeof(struct) == parsed.sizeof(struct)
        assert [f for f, _ in ffi.typeof(struct).fields] == [
            f for f, _ in parsed.typeof(struct).fields
        ]


def test_every_declared_function_resolves():
    for name in _declared_functions(capi.HEADER_PATH.read_text()):
        assert getattr(lib, name) is not None


def test_versions_agree():
    assert ffi.string(lib.mcs_version_string()).decode() == mooncake_cffi.__version__
    major, minor, patch = (int(x) for x in mooncake_cffi.__version__.split("."))
    assert lib.mcs_version() == major * 10000 + minor * 100 + patch
    assert lib.mcs_abi_version() == capi.ABI_VERSION
    meson = (REPO / "meson.build").read_text()
    assert f"version: '{mooncake_cffi.__version__}'" in meson


def test_error_names_and_strings_are_never_null():
    assert mooncake_cffi.error_name(-706) == "OBJECT_HAS_LEASE"
    assert mooncake_cffi.error_name(E_CLOSED) == "MCS_E_CLOSED"
    for code in (0, -1, -704, -99999, 12345, E_INVALID_ARG):
        assert lib.mcs_error_name(code) != NULL
        assert lib.mcs_strerror(code) != NULL
    assert lib.mcs_last_error() != NULL


# ---------------------------------------------------------- a handle's life


def test_lane_layout_out_of_range_is_refused(cluster):
    capi.ensure_mooncake_loaded()
    lanes = ffi.new("struct mcs_lanes *")
    lanes.struct_size = ffi.sizeof("struct mcs_lanes")
    lanes.store = 5000
    out = ffi.new("mcs_client **")
    assert lib.mcs_client_create(out, NULL, NULL, 0, lanes, 0) == E_INVALID_ARG
    assert out[0] == NULL
    assert "1024" in capi.last_error()


def test_calls_after_close_double_close_and_after_free(cluster):
    capi.ensure_mooncake_loaded()
    cfg = cluster.client_config()
    keys = [ffi.new("char[]", k.encode()) for k in cfg]
    vals = [ffi.new("char[]", str(v).encode()) for v in cfg.values()]
    out = ffi.new("mcs_client **")
    assert lib.mcs_client_create(out, keys, vals, len(cfg), NULL, 0) == 0
    h = out[0]
    assert lib.mcs_client_close(h) == 0
    assert lib.mcs_client_close(h) == 0
    assert run_batch(h, make_batch(lib.MCS_OP_EXISTS, "after-close")) == E_CLOSED
    assert lib.mcs_client_register_l1(h, ffi.new("char[]", 8), 8, 0) == E_CLOSED
    comp = ffi.new("struct mcs_completion[]", 1)
    comp[0].struct_size = ffi.sizeof(comp[0])
    assert lib.mcs_client_drain(h, comp, 1) == 0  # still drainable, nothing left
    assert lib.mcs_client_wait(h, -1) == E_CLOSED  # never blocks on a closed client
    lib.mcs_client_free(h)
    lib.mcs_client_free(h)  # double free: a no-op
    assert run_batch(h, make_batch(lib.MCS_OP_EXISTS, "after-close")) == E_INVALID_HANDLE
    assert lib.mcs_client_close(h) == E_INVALID_HANDLE


def test_close_while_other_threads_are_mid_call(cluster):
    """Threads hammer the client while another closes it: every call returns 0 or CLOSED."""
    capi.ensure_mooncake_loaded()
    cfg = cluster.client_config()
    keys = [ffi.new("char[]", k.encode()) for k in cfg]
    vals = [ffi.new("char[]", str(v).encode()) for v in cfg.values()]
    out = ffi.new("mcs_client **")
    assert lib.mcs_client_create(out, keys, vals, len(cfg), NULL, 0) == 0
    h = out[0]
    codes: list[int] = []
    served: set[int] = set()  # the threads that have had a call answered
    lock = threading.Lock()
    stop = threading.Event()

    def hammer(i: int) -> None:
        b = make_batch(lib.MCS_OP_EXISTS, f"busy-{i}")
        while not stop.is_set():
            rc = run_batch(h, b)
            with lock:
                codes.append(rc)
                if rc == 0:
                    served.add(i)
            if rc in (E_CLOSED, E_INVALID_HANDLE):
                return

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    wait_until("every thread to be inside its calls", lambda: len(served) == len(threads))
    assert lib.mcs_client_close(h) == 0
    lib.mcs_client_free(h)
    stop.set()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert set(codes) <= {0, E_CLOSED, E_INVALID_HANDLE}
    assert codes.count(0) > 0


def test_use_in_forked_child_returns_forked(raw):
    b = make_batch(lib.MCS_OP_EXISTS, "fork")
    pid = os.fork()
    if pid == 0:
        rc = run_batch(raw, b)
        comp = ffi.new("struct mcs_completion[]", 1)
        comp[0].struct_size = ffi.sizeof(comp[0])
        rc2 = lib.mcs_client_drain(raw, comp, 1)
        rc3 = lib.mcs_client_close(raw)  # only marks it closed, no teardown of the parent's
        lib.mcs_client_free(raw)
        os._exit(0 if (rc, rc2, rc3) == (E_FORKED, E_FORKED, 0) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert run_batch(raw, b) == 0


def test_load_with_a_bad_path_reports_it():
    # Mooncake is already loaded in this process: mcs_load is idempotent.
    capi.ensure_mooncake_loaded()
    assert lib.mcs_load(b"/nonexistent/store.so", NULL) == 0
    code = (
        "import cffi, sys\n"
        "from mooncake_cffi import capi as b\n"
        "rc = b.lib.mcs_load(b'/nonexistent/store.so', b'0.3.13.post1')\n"
        "print(rc, b.last_error())\n"
        "rc = b.lib.mcs_load(b.ffi.NULL, b.ffi.NULL)\n"
        "print(rc, b.last_error())\n"
    )
    out = subprocess.run(
        [os.sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True
    ).stdout.splitlines()
    assert out[0].startswith(str(lib.MCS_E_LOAD)) and "/nonexistent/store.so" in out[0]
    assert out[1].startswith(str(E_INVALID_ARG))


def test_a_library_lacking_symbols_is_named(tmp_path):
    """Loading a .so without RealClient's symbols names the missing ones."""
    code = (
        "from mooncake_cffi import capi as b\n"
        "import ctypes.util\n"
        "rc = b.lib.mcs_load(b'libz.so.1', b'0.3.13.post1')\n"
        "print(rc, b.last_error())\n"
    )
    out = subprocess.run(
        [os.sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True
    ).stdout
    assert out.startswith(str(lib.MCS_E_LOAD))
    assert "RealClient::create()" in out and "RealClient::batch_get_into" in out


def test_the_man_page_is_generated_from_the_header():
    """man/mcs.3 is shim/gen_man.py's rendering of mcs.h: each call's contract is written
    once, in the header, and a header change without the page fails here."""
    done = subprocess.run(
        [sys.executable, str(REPO / "shim" / "gen_man.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    page = (REPO / "man" / "mcs.3").read_text()
    for name in _declared_functions(capi.HEADER_PATH.read_text()):
        assert f"{name}(" in page, f"{name} missing from man/mcs.3"
