#!/usr/bin/env bash
# Build ggml-rpc-server, llama.cpp's RPC worker, from the llama.cpp sources
# vendored in the llama-cpp-python sdist of the given version, so that it
# speaks the same RPC protocol as the installed llama-cpp-python (a worker
# of another version is refused at the handshake).
#
#   scripts/build_rpc_server.sh 0.3.36     # prints the ggml-rpc-server path
#
# Everything lives outside the repo, in $ENGY_RPC_SERVER_CACHE (default
# ~/.cache/engy/rpc-server); a finished build is reused, so a second call
# only prints the path. CPU build.
set -euo pipefail

version="${1:?usage: build_rpc_server.sh LLAMA_CPP_PYTHON_VERSION}"
cache="${ENGY_RPC_SERVER_CACHE:-$HOME/.cache/engy/rpc-server}"
jobs="${JOBS:-2}"
pip="${PIP:-python3 -m pip}"
src="$cache/src/llama_cpp_python-$version"
build="$cache/build-$version"
bin="$build/bin/ggml-rpc-server"

if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache/src"
if [[ ! -d "$src/vendor/llama.cpp" ]]; then
    tarball="$cache/src/llama_cpp_python-$version.tar.gz"
    if [[ ! -f "$tarball" ]]; then
        # only this package from source; its build tools as wheels
        $pip download --no-deps --no-binary llama-cpp-python \
            "llama-cpp-python==$version" -d "$cache/src" >&2
    fi
    tar -xzf "$tarball" -C "$cache/src"
fi

generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$src/vendor/llama.cpp" -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DGGML_RPC=ON >&2
start=$(date +%s)
cmake --build "$build" --target ggml-rpc-server -j "$jobs" >&2
echo "built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
