#!/usr/bin/env bash
# Installs PyPI's sglang beside this package in a virtualenv of its own, for the SGLang tier
# (tests/test_sglang_*.py run with it): SGLang's HiCache MooncakeStore backend, driven through
# its own class against Mooncake's and the drop-in's clients.
#
# sglang is installed WITHOUT its dependencies (they include CUDA kernels and a serving
# stack); what its HiCache Mooncake backend imports is installed by name below.  It
# imports torchvision (sglang.srt.multimodal, through sglang.srt.configs), and PyPI's
# torchvision does not load beside the CPU torch 2.13.0 ("operator torchvision::nms does
# not exist"): so torch is sglang's own pin, 2.14.1, with torchvision 0.29.1 (PyPI's
# builds, CUDA ones that run on the CPU; about 5.5 GB in the virtualenv).
# The virtualenv is kept in a cache directory outside the work tree and reused while it
# holds the tested sglang version; only this package is reinstalled into it on each run.
#
#   MOONCAKE_CFFI_SGLANG_VENV=DIR   virtualenv location
#                                   (default: ~/.cache/mooncake-cffi/venv-sglang-<ver>)
#   SGLANG_VERSION=X.Y.Z            sglang release to install (default: the tested one)
#   TORCH_VERSION=X.Y.Z             torch release to install first (default 2.14.1)
#   TORCHVISION_VERSION=X.Y.Z       its torchvision (default 0.29.1)
#   MOONCAKE_CFFI_WHEEL=cpu|cuda    the Mooncake wheel (default as scripts/install.sh)
#   MOONCAKE_CFFI_PACKAGE=FILE      a wheel of this package to install, instead of building one
#                                   from the checkout (scripts/test.sh builds one for all steps)
# Prints the virtualenv's path on its last line of stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/_common.sh

sglang_version=${SGLANG_VERSION:-0.5.23}
torch_version=${TORCH_VERSION:-2.14.1}
torchvision_version=${TORCHVISION_VERSION:-0.29.1}
python=${PYTHON:-python3}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/mooncake-cffi
venv=${MOONCAKE_CFFI_SGLANG_VENV:-$cache/venv-sglang-$sglang_version}
# What `import sglang.srt.mem_cache.storage.mooncake_store.mooncake_store` needs besides
# torch (measured with sglang 0.5.23).
pure=(orjson pybase64 pillow ipython traitlets dill apache-tvm-ffi sentencepiece
    compressed-tensors loguru gguf numpy requests psutil packaging pydantic msgspec
    transformers starlette pyzmq)

need_mooncake_libs

if venv_holds "$venv" sglang "$sglang_version"; then
    log "reusing $venv (sglang $sglang_version)"
else
    log "creating $venv with sglang $sglang_version (a few minutes)"
    fresh_venv "$venv"
    pins=("torch==$torch_version" "torchvision==$torchvision_version")
    "$venv/bin/python" -m pip install -q "${pins[@]}" >&2
    "$venv/bin/python" -m pip install -q "${pure[@]}" "${pins[@]}" >&2
    "$venv/bin/python" -m pip install -q --no-deps "sglang==$sglang_version" >&2
fi

install_package "$venv" test "torch==$torch_version" "torchvision==$torchvision_version"
(cd / && "$venv/bin/python" -c \
    'import sglang.srt.mem_cache.storage.mooncake_store.mooncake_store as m; print(m.__file__)') >&2
echo "$venv"
