# Shared by the scripts (sourced, not run): messages, finding shared libraries as any user,
# picking the Mooncake wheel, and installing Debian/Ubuntu packages so that one package
# missing from a distribution's archive never stops the others.

# Bold only on a terminal, and never when NO_COLOR is set (https://no-color.org).
if [ -t 2 ] && [ -z "${NO_COLOR:-}" ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
log() { printf '%s==> %s%s\n' "$bold" "$*" "$plain" >&2; }
warn() { printf '%swarning:%s %s\n' "$bold" "$plain" "$*" >&2; }
die() {
    printf '%serror:%s %s\n' "$bold" "$plain" "$*" >&2
    exit 1
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "need root (or sudo) to run: $*" >&2
        return 1
    fi
}

# ldconfig is in /sbin or /usr/sbin, which a user's PATH often lacks; without it (or
# without a cache) the usual library directories are looked at directly.
_lib_dirs=(/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib/aarch64-linux-gnu
    /usr/lib/aarch64-linux-gnu /lib64 /usr/lib64 /lib /usr/lib /usr/local/lib /usr/lib/wsl/lib)
has_lib() {
    local name=$1 ldc dir
    for ldc in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
        command -v "$ldc" >/dev/null 2>&1 || continue
        "$ldc" -p 2>/dev/null | awk -v n="$name" '$1 == n { found = 1 } END { exit !found }' &&
            return 0
        break
    done
    for dir in "${_lib_dirs[@]}"; do [ -e "$dir/$name" ] && return 0; done
    return 1
}

# The Mooncake wheel to install: $MOONCAKE_CFFI_WHEEL, else cuda where the NVIDIA driver's
# libcuda.so.1 is present, else cpu.
mooncake_wheel() {
    local wheel=${MOONCAKE_CFFI_WHEEL:-}
    if [ -z "$wheel" ]; then
        if has_lib libcuda.so.1; then wheel=cuda; else wheel=cpu; fi
    fi
    case "$wheel" in
        cpu | cuda) echo "$wheel" ;;
        *) die "MOONCAKE_CFFI_WHEEL must be cpu or cuda, not '$wheel'" ;;
    esac
}

# True when a tool is on PATH or in the sbin/bin directories a user's PATH may lack.
has_tool() {
    command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ] ||
        [ -x "/usr/bin/$1" ]
}

# system_install PACKAGES PURPOSE [PACKAGES PURPOSE]...
# Installs with apt-get, for each pair, the first of PACKAGES ("a|b": alternatives, e.g. a
# package renamed between releases) that the archive has.  A package the archive lacks, or
# whose installation fails, is reported with what needs it, and the others are installed
# anyway.  Returns 1 if anything could not be installed.
system_install() {
    [ $# -gt 0 ] || return 0
    local missing=() chosen=() purposes=() spec purpose alt pkg i alts
    if ! command -v apt-get >/dev/null 2>&1; then
        warn "no apt-get on this system: install these with its package manager:"
        while [ $# -gt 1 ]; do
            warn "  ${1//|/ or } (for $2)"
            shift 2
        done
        return 1
    fi
    log "updating the package lists"
    as_root apt-get update -qq || warn "apt-get update failed; using the package lists as they are"
    while [ $# -gt 1 ]; do
        spec=$1 purpose=$2 pkg=''
        shift 2
        IFS='|' read -ra alts <<<"$spec"
        for alt in "${alts[@]}"; do
            if apt-cache show --no-all-versions "$alt" >/dev/null 2>&1; then
                pkg=$alt
                break
            fi
        done
        if [ -z "$pkg" ]; then
            missing+=("${spec//|/ or } (for $purpose): not in this system's package archive")
        else
            chosen+=("$pkg")
            purposes+=("$purpose")
        fi
    done
    if [ ${#chosen[@]} -gt 0 ]; then
        log "installing system packages: ${chosen[*]}"
        if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${chosen[@]}" >/dev/null; then
            # Find out which of them fails, installing the others.
            for i in "${!chosen[@]}"; do
                as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                    --no-install-recommends "${chosen[$i]}" >/dev/null ||
                    missing+=("${chosen[$i]} (for ${purposes[$i]}): apt-get install failed")
            done
        fi
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        warn "some system packages were not installed:"
        for i in "${missing[@]}"; do warn "  $i"; done
        return 1
    fi
}

# -- the tiers' virtualenvs (install_engine.sh, install_lmcache.sh, install_sglang.sh) ----

# Runs scripts/install.sh when a library Mooncake's wheel loads is missing.
need_mooncake_libs() {
    local lib
    for lib in libibverbs.so.1 libnuma.so.1 libcurl.so.4; do
        if ! has_lib "$lib"; then
            ./scripts/install.sh >&2
            return
        fi
    done
}

# Whether the virtualenv VENV holds each DIST at VERSION (distribution names as pip knows them).
venv_holds() { # VENV DIST VERSION [DIST VERSION ...]
    local venv=$1
    shift
    [ -x "$venv/bin/python" ] || return 1
    "$venv/bin/python" - "$@" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
pairs = sys.argv[1:]
sys.exit(0 if all(version(d) == v for d, v in zip(pairs[::2], pairs[1::2])) else 1)
PY
}

# A new virtualenv at VENV, made by $python, with pip upgraded and PACKAGES installed; an
# old virtualenv there is removed first, and anything else there is refused.
fresh_venv() { # VENV [PACKAGES...]
    local venv=$1
    shift
    if [ -e "$venv" ]; then
        [ -f "$venv/pyvenv.cfg" ] || die "$venv exists and is no virtualenv"
        rm -rf "$venv"
    fi
    mkdir -p "$(dirname "$venv")"
    "${python:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip "$@" >&2
}

# This package, reinstalled into VENV with the Mooncake wheel's extra and EXTRAS (comma
# separated); further arguments go to the same pip call (pins to keep). The package is
# $MOONCAKE_CFFI_PACKAGE (a wheel file), else this checkout.
install_package() { # VENV EXTRAS [PIP ARGS...]
    local venv=$1 extras=$2 package=${MOONCAKE_CFFI_PACKAGE:-.}
    shift 2
    [ "$package" = . ] || [ -f "$package" ] || die "MOONCAKE_CFFI_PACKAGE=$package: no such file"
    local spec="$package[$(mooncake_wheel)${extras:+,$extras}]"
    log "installing '$spec' (mooncake-cffi) into $venv"
    "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$package" >&2
    "$venv/bin/python" -m pip install -q "$spec" "$@" >&2
}
