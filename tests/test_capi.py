"""The shim's C ABI called directly through cffi: header/cdef agreement and misuse.

Every misuse must come back as its documented status code with a message; none
may crash the process (a crash would take the whole pytest run down).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

import mooncake_cffi
from mooncake_cffi import _binding
from mooncake_cffi._binding import ffi, lib

REPO = Path(__file__).resolve().parents[1]
NULL = ffi.NULL

E_INVALID_ARG = lib.MCS_E_INVALID_ARG
E_INVALID_HANDLE = lib.MCS_E_INVALID_HANDLE
E_CLOSED = lib.MCS_E_CLOSED
E_FORKED = lib.MCS_E_FORKED
E_DUPLICATE_KEY = lib.MCS_E_DUPLICATE_KEY


# ------------------------------------------------------- header and cdef


def test_installed_header_is_the_repository_header():
    assert _binding.HEADER_PATH.read_text() == (REPO / "shim" / "mcs.h").read_text()


def _declared_functions(header: str) -> set[str]:
    cdef = _binding.cdef_from_header(header)
    return set(re.findall(r"\b(mcs_\w+)\s*\(", cdef))


def test_cdef_matches_the_exported_symbols():
    """Every declared function is exported by libmcs.so and nothing else is."""
    declared = _declared_functions(_binding.HEADER_PATH.read_text())
    so = Path(mooncake_cffi.__file__).parent / "libmcs.so"
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True
    ).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[-2:-1] == ["T"]}
    assert declared == exported


def test_declarations_are_precompiled_from_the_header():
    assert _binding.PRECOMPILED  # the build's out-of-line module, not runtime parsing
    import cffi

    parsed = cffi.FFI()
    parsed.cdef(_binding.cdef_from_header(_binding.HEADER_PATH.read_text()))
    for struct in (
        "struct mcs_lanes",
        "struct mcs_batch",
        "struct mcs_completion",
        "struct mcs_lane_stats",
        "struct mcs_op_stats",
    ):
        assert ffi.sizeof(struct) == parsed.sizeof(struct)
        assert [f for f, _ in ffi.typeof(struct).fields] == [
            f for f, _ in parsed.typeof(struct).fields
        ]


def test_every_declared_function_resolves():
    for name in _declared_functions(_binding.HEADER_PATH.read_text()):
        assert getattr(lib, name) is not None


def test_versions_agree():
    assert ffi.string(lib.mcs_version_string()).decode() == mooncake_cffi.__version__
    major, minor, patch = (int(x) for x in mooncake_cffi.__version__.split("."))
    assert lib.mcs_version() == major * 10000 + minor * 100 + patch
    assert lib.mcs_abi_version() == _binding.ABI_VERSION
    meson = (REPO / "meson.build").read_text()
    assert f"version: '{mooncake_cffi.__version__}'" in meson


def test_error_names_and_strings_are_never_null():
    assert _binding.error_name(-706) == "OBJECT_HAS_LEASE"
    assert _binding.error_name(E_CLOSED) == "MCS_E_CLOSED"
    for code in (0, -1, -704, -99999, 12345, E_INVALID_ARG):
        assert lib.mcs_error_name(code) != NULL
        assert lib.mcs_strerror(code) != NULL
    assert lib.mcs_last_error() != NULL


# --------------------------------------------------------------- misuse


@pytest.fixture
def raw(cluster):
    """A raw shim handle on the session cluster, freed afterwards."""
    _binding.ensure_mooncake_loaded()
    cfg = cluster.client_config()
    keys = [ffi.new("char[]", k.encode()) for k in cfg]
    vals = [ffi.new("char[]", str(v).encode()) for v in cfg.values()]
    out = ffi.new("mcs_client **")
    rc = lib.mcs_client_create(out, keys, vals, len(cfg), NULL, 0)
    assert rc == 0, _binding.last_error()
    handle = out[0]
    yield handle
    lib.mcs_client_free(handle)


_KEEP: list = []  # cdata the batches point to, alive for the whole test module


def _batch(
    op: int,
    *names: str,
    n: int | None = None,
    bufs=NULL,
    sizes=NULL,
    res=None,
    flags: int = 0,
    values=NULL,
    struct_size: int | None = None,
    offsets: list[int] | None = None,
):
    """A struct mcs_batch for `names` packed the way the ABI takes keys."""
    data = b"".join(x.encode() for x in names)
    offs = offsets
    if offs is None:
        offs = [0]
        for x in names:
            offs.append(offs[-1] + len(x.encode()))
    cdata = ffi.new("char[]", data or b"\0")
    coffs = ffi.new("uint64_t[]", offs)
    b = ffi.new("struct mcs_batch *")
    b.struct_size = ffi.sizeof("struct mcs_batch") if struct_size is None else struct_size
    b.op = op
    b.flags = flags
    b.n = len(names) if n is None else n
    b.key_data = cdata
    b.key_bytes = len(data)
    b.key_offsets = coffs
    b.bufs = bufs
    b.sizes = sizes
    results = _res(max(1, len(names))) if res is None else res
    b.results = results
    b.values = values
    _KEEP.extend([cdata, coffs, results])  # the owning cdata: b.results does not own it
    return b


def _res(n: int):
    return ffi.new("int64_t[]", max(n, 1))


def _run(handle, batch, idp=NULL):
    return lib.mcs_run(handle, idp, batch)


def test_misuse_table(raw):
    E = lib.MCS_OP_EXISTS
    buf = ffi.new("char[]", 16)
    bufs = ffi.new("void *[]", [buf])
    nullbufs = ffi.new("void *[]", [NULL])
    sizes = ffi.new("uint64_t[]", [16])
    zero = ffi.new("uint64_t[]", [0])
    values = ffi.new("void *[]", 1)
    idp = ffi.new("uint64_t *")
    comp = ffi.new("struct mcs_completion[]", 4)
    csize = ffi.sizeof("struct mcs_completion")
    st = ffi.new("struct mcs_lane_stats *")
    st.struct_size = ffi.sizeof("struct mcs_lane_stats")
    ost = ffi.new("struct mcs_op_stats *")
    ost.struct_size = ffi.sizeof("struct mcs_op_stats")
    unsized = ffi.new("struct mcs_lane_stats *")  # struct_size left 0
    fdp = ffi.new("int *")
    written = ffi.new("uint64_t *")
    OP = lib
    bogus = ffi.cast("mcs_client *", 0x1234)
    one = ffi.new("int64_t *")
    GET, BAD, BAD_H, DUP = lib.MCS_OP_GET, E_INVALID_ARG, E_INVALID_HANDLE, E_DUPLICATE_KEY
    res2 = ffi.new("int64_t[2]")

    cases = [
        ("run NULL handle", lambda: _run(NULL, _batch(E, "misuse-a")), E_INVALID_HANDLE),
        ("run bogus handle", lambda: _run(bogus, _batch(E, "misuse-a")), E_INVALID_HANDLE),
        ("run NULL batch", lambda: lib.mcs_run(raw, NULL, NULL), E_INVALID_ARG),
        ("struct_size 0", lambda: _run(raw, _batch(E, "k", struct_size=0)), E_INVALID_ARG),
        ("n == 0", lambda: _run(raw, _batch(E, "misuse-a", n=0)), E_INVALID_ARG),
        (
            "NUL form short of n keys",
            lambda: _run(raw, _nulloffs(raw)),
            E_INVALID_ARG,
        ),
        (
            "offsets decrease",
            lambda: _run(raw, _batch(E, "ab", "c", offsets=[0, 2, 1])),
            E_INVALID_ARG,
        ),
        ("empty key", lambda: _run(raw, _batch(E, "")), E_INVALID_ARG),
        ("NUL in a key", lambda: _run(raw, _batch(E, "a\0b")), E_INVALID_ARG),
        ("offsets past key_bytes", lambda: _run(raw, _offsets_past(raw)), E_INVALID_ARG),
        ("duplicate keys", lambda: _run(raw, _batch(E, "same", "same")), E_DUPLICATE_KEY),
        ("results NULL", lambda: _run(raw, _batch(E, "k", res=NULL)), E_INVALID_ARG),
        ("unknown op", lambda: _run(raw, _batch(99, "k")), E_INVALID_ARG),
        ("negative op", lambda: _run(raw, _batch(-1, "k")), E_INVALID_ARG),
        ("unknown flags", lambda: _run(raw, _batch(E, "k", flags=1 << 10)), E_INVALID_ARG),
        ("get without bufs", lambda: _run(raw, _batch(OP.MCS_OP_GET, "k")), E_INVALID_ARG),
        (
            "exists with bufs",
            lambda: _run(raw, _batch(E, "k", bufs=bufs, sizes=sizes)),
            E_INVALID_ARG,
        ),
        (
            "put NULL buffer",
            lambda: _run(raw, _batch(OP.MCS_OP_PUT, "k", bufs=nullbufs, sizes=sizes)),
            E_INVALID_ARG,
        ),
        (
            "put zero size",
            lambda: _run(raw, _batch(OP.MCS_OP_PUT, "k", bufs=bufs, sizes=zero)),
            E_INVALID_ARG,
        ),
        (
            "put without config",
            lambda: _run(raw, _batch(OP.MCS_OP_PUT, "k", bufs=bufs, sizes=sizes)),
            E_INVALID_ARG,
        ),
        (
            "get_buffer without values",
            lambda: _run(raw, _batch(OP.MCS_OP_GET_BUFFER, "k"), idp),
            E_INVALID_ARG,
        ),
        (
            "get_buffer run without id_out",
            lambda: _run(raw, _batch(OP.MCS_OP_GET_BUFFER, "k", values=values)),
            E_INVALID_ARG,
        ),
        ("submit id_out NULL", lambda: lib.mcs_submit(raw, NULL, _batch(E, "k")), E_INVALID_ARG),
        ("run_one NULL handle", lambda: lib.mcs_run_one(NULL, one, E, 0, b"k", 1, NULL, 0), BAD_H),
        ("run_one result NULL", lambda: lib.mcs_run_one(raw, NULL, E, 0, b"k", 1, NULL, 0), BAD),
        ("run_one key NULL", lambda: lib.mcs_run_one(raw, one, E, 0, NULL, 1, NULL, 0), BAD),
        ("run_one empty key", lambda: lib.mcs_run_one(raw, one, E, 0, b"k", 0, NULL, 0), BAD),
        ("run_one NUL in key", lambda: lib.mcs_run_one(raw, one, E, 0, b"a\0b", 3, NULL, 0), BAD),
        ("run_one unknown op", lambda: lib.mcs_run_one(raw, one, 99, 0, b"k", 1, NULL, 0), BAD),
        ("run_one get no buf", lambda: lib.mcs_run_one(raw, one, GET, 0, b"k", 1, NULL, 0), BAD),
        ("run_one get size 0", lambda: lib.mcs_run_one(raw, one, GET, 0, b"k", 1, buf, 0), BAD),
        ("run_one exists buf", lambda: lib.mcs_run_one(raw, one, E, 0, b"k", 1, buf, 16), BAD),
        ("run_keys NULL handle", lambda: lib.mcs_run_keys(NULL, res2, E, 0, b"a", 2, 1), BAD_H),
        ("run_keys results NULL", lambda: lib.mcs_run_keys(raw, NULL, E, 0, b"a", 2, 1), BAD),
        ("run_keys keys NULL", lambda: lib.mcs_run_keys(raw, res2, E, 0, NULL, 2, 1), BAD),
        ("run_keys n 0", lambda: lib.mcs_run_keys(raw, res2, E, 0, b"a", 2, 0), BAD),
        ("run_keys short of n", lambda: lib.mcs_run_keys(raw, res2, E, 0, b"a", 2, 2), BAD),
        ("run_keys past n", lambda: lib.mcs_run_keys(raw, res2, E, 0, b"a\0b", 4, 1), BAD),
        ("run_keys empty key", lambda: lib.mcs_run_keys(raw, res2, E, 0, b"\0a", 3, 2), BAD),
        ("run_keys duplicate", lambda: lib.mcs_run_keys(raw, res2, E, 0, b"a\0a", 4, 2), DUP),
        ("run_keys get", lambda: lib.mcs_run_keys(raw, res2, GET, 0, b"a", 2, 1), BAD),
        (
            "run_one get_buffer",
            lambda: lib.mcs_run_one(raw, one, OP.MCS_OP_GET_BUFFER, 0, b"k", 1, NULL, 0),
            BAD,
        ),
        ("drain out NULL", lambda: lib.mcs_drain(raw, NULL, 4, csize), E_INVALID_ARG),
        ("drain tiny elem_size", lambda: lib.mcs_drain(raw, comp, 4, 8), E_INVALID_ARG),
        ("drain NULL handle", lambda: lib.mcs_drain(NULL, comp, 4, csize), E_INVALID_HANDLE),
        ("stats bad lane", lambda: lib.mcs_client_lane_stats(raw, 7, st), E_INVALID_ARG),
        ("stats out NULL", lambda: lib.mcs_client_lane_stats(raw, 0, NULL), E_INVALID_ARG),
        ("stats struct_size 0", lambda: lib.mcs_client_lane_stats(raw, 0, unsized), E_INVALID_ARG),
        ("op stats bad op", lambda: lib.mcs_client_op_stats(raw, 42, ost), E_INVALID_ARG),
        ("release NULL handle", lambda: lib.mcs_release(NULL, 1), E_INVALID_HANDLE),
        (
            "gather into too little",
            lambda: lib.mcs_gather(written, buf, 1, values, ffi.new("int64_t[]", [5]), 1),
            E_INVALID_ARG,
        ),
        ("fd out NULL", lambda: lib.mcs_client_fd(raw, NULL), E_INVALID_ARG),
        ("register NULL", lambda: lib.mcs_client_register_l1(raw, NULL, 100, 0), E_INVALID_ARG),
        ("register size 0", lambda: lib.mcs_client_register_l1(raw, buf, 0, 0), E_INVALID_ARG),
        (
            "default config NULL",
            lambda: lib.mcs_client_set_default_replicate_config(raw, NULL),
            E_INVALID_ARG,
        ),
        ("hostname NULL buf", lambda: lib.mcs_client_hostname(raw, NULL, 10), E_INVALID_ARG),
        ("close NULL", lambda: lib.mcs_client_close(NULL), E_INVALID_HANDLE),
        ("log level 9", lambda: lib.mcs_set_log_level(9), E_INVALID_ARG),
        (
            "create out NULL",
            lambda: lib.mcs_client_create(NULL, NULL, NULL, 0, NULL, 0),
            E_INVALID_ARG,
        ),
        (
            "create keys NULL",
            lambda: lib.mcs_client_create(ffi.new("mcs_client **"), NULL, NULL, 2, NULL, 0),
            E_INVALID_ARG,
        ),
    ]
    for name, call, expected in cases:
        rc = call()
        assert rc == expected, f"{name}: got {rc} ({_binding.last_error()})"
        assert _binding.last_error(), f"{name}: no message"
    # the handle is still fine after all that
    assert _run(raw, _batch(E, "misuse-a")) == 0
    assert lib.mcs_run_one(raw, one, E, 0, b"misuse-a", 8, NULL, 0) == 0 and one[0] in (0, 1)
    assert lib.mcs_run_keys(raw, res2, E, 0, b"misuse-a\0misuse-b", 18, 2) == 0
    assert list(res2) == [one[0], 0]
    assert lib.mcs_release(raw, 123456789) == 0  # unknown ids are ignored
    assert lib.mcs_client_fd(raw, fdp) == 0 and fdp[0] >= 0
    assert lib.mcs_submit(raw, idp, _batch(E, "misuse-a")) == 0
    assert lib.mcs_wait(raw, 5000) == 0
    assert lib.mcs_drain(raw, comp, 4, csize) == 1 and comp[0].id == idp[0]
    assert comp[0].struct_size == csize
    assert lib.mcs_wait(raw, 10) == lib.MCS_E_TIMEOUT
    assert lib.mcs_client_op_stats(raw, E, ost) == 0 and ost.calls >= 2
    free_null = lib.mcs_client_free
    free_null(NULL)  # a no-op


def _nulloffs(raw):
    """NUL-terminated form with n larger than the keys key_data holds."""
    b = _batch(lib.MCS_OP_EXISTS, "k", n=2)
    b.key_offsets = NULL
    return b


def _offsets_past(raw):
    b = _batch(lib.MCS_OP_EXISTS, "k")
    b.key_bytes = 0
    return b


def test_a_batch_that_ran_returns_0_with_per_key_failures(raw):
    """The return says whether the call ran; key outcomes are only in results."""
    res = _res(2)
    b = _batch(lib.MCS_OP_REMOVE, "never-stored-1", "never-stored-2", res=res)
    assert _run(raw, b) == 0
    assert list(res[0:2]) == [-704, -704]


def test_lane_layout_out_of_range_is_refused(cluster):
    _binding.ensure_mooncake_loaded()
    lanes = ffi.new("struct mcs_lanes *")
    lanes.struct_size = ffi.sizeof("struct mcs_lanes")
    lanes.store = 5000
    out = ffi.new("mcs_client **")
    assert lib.mcs_client_create(out, NULL, NULL, 0, lanes, 0) == E_INVALID_ARG
    assert out[0] == NULL
    assert "1024" in _binding.last_error()


def test_calls_after_close_double_close_and_after_free(cluster):
    _binding.ensure_mooncake_loaded()
    cfg = cluster.client_config()
    keys = [ffi.new("char[]", k.encode()) for k in cfg]
    vals = [ffi.new("char[]", str(v).encode()) for v in cfg.values()]
    out = ffi.new("mcs_client **")
    assert lib.mcs_client_create(out, keys, vals, len(cfg), NULL, 0) == 0
    h = out[0]
    assert lib.mcs_client_close(h) == 0
    assert lib.mcs_client_close(h) == 0
    assert _run(h, _batch(lib.MCS_OP_EXISTS, "after-close")) == E_CLOSED
    assert lib.mcs_client_register_l1(h, ffi.new("char[]", 8), 8, 0) == E_CLOSED
    comp = ffi.new("struct mcs_completion[]", 1)
    assert lib.mcs_drain(h, comp, 1, ffi.sizeof(comp[0])) == 0  # still drainable, nothing left
    assert lib.mcs_wait(h, -1) == E_CLOSED  # never blocks on a closed client
    lib.mcs_client_free(h)
    lib.mcs_client_free(h)  # double free: a no-op
    assert _run(h, _batch(lib.MCS_OP_EXISTS, "after-close")) == E_INVALID_HANDLE
    assert lib.mcs_client_close(h) == E_INVALID_HANDLE


def test_close_while_other_threads_are_mid_call(cluster):
    """Threads hammer the client while another closes it: every call returns 0 or CLOSED."""
    _binding.ensure_mooncake_loaded()
    cfg = cluster.client_config()
    keys = [ffi.new("char[]", k.encode()) for k in cfg]
    vals = [ffi.new("char[]", str(v).encode()) for v in cfg.values()]
    out = ffi.new("mcs_client **")
    assert lib.mcs_client_create(out, keys, vals, len(cfg), NULL, 0) == 0
    h = out[0]
    codes: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def hammer(i: int) -> None:
        b = _batch(lib.MCS_OP_EXISTS, f"busy-{i}")
        while not stop.is_set():
            rc = _run(h, b)
            with lock:
                codes.append(rc)
            if rc in (E_CLOSED, E_INVALID_HANDLE):
                return

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert lib.mcs_client_close(h) == 0
    lib.mcs_client_free(h)
    stop.set()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert set(codes) <= {0, E_CLOSED, E_INVALID_HANDLE}
    assert codes.count(0) > 0


def test_use_in_forked_child_returns_forked(raw):
    b = _batch(lib.MCS_OP_EXISTS, "fork")
    pid = os.fork()
    if pid == 0:
        rc = _run(raw, b)
        comp = ffi.new("struct mcs_completion[]", 1)
        rc2 = lib.mcs_drain(raw, comp, 1, ffi.sizeof(comp[0]))
        rc3 = lib.mcs_client_close(raw)  # only marks it closed, no teardown of the parent's
        lib.mcs_client_free(raw)
        os._exit(0 if (rc, rc2, rc3) == (E_FORKED, E_FORKED, 0) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert _run(raw, b) == 0


def test_load_with_a_bad_path_reports_it():
    # Mooncake is already loaded in this process: mcs_load is idempotent.
    _binding.ensure_mooncake_loaded()
    assert lib.mcs_load(b"/nonexistent/store.so") == 0
    code = (
        "import cffi, sys\n"
        "from mooncake_cffi import _binding as b\n"
        "rc = b.lib.mcs_load(b'/nonexistent/store.so')\n"
        "print(rc, b.last_error())\n"
        "rc = b.lib.mcs_load(b.ffi.NULL)\n"
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
        "from mooncake_cffi import _binding as b\n"
        "import ctypes.util\n"
        "rc = b.lib.mcs_load(ctypes.util.find_library('z').encode() if False else b'libz.so.1')\n"
        "print(rc, b.last_error())\n"
    )
    out = subprocess.run(
        [os.sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True
    ).stdout
    assert out.startswith(str(lib.MCS_E_LOAD))
    assert "RealClient::create()" in out and "RealClient::batch_get_into" in out


def test_every_function_is_in_the_man_page():
    page = (REPO / "man" / "mcs.3").read_text()
    for name in _declared_functions(_binding.HEADER_PATH.read_text()):
        assert f"{name} ()" in page or f"{name}(" in page, f"{name} missing from man/mcs.3"
