#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench` and `llama-quantize` once, into a cache under target/peer/,
# from the llama.cpp tree that the `llama-cpp-python` source package on PyPI vendors.
#
# Usage: build_llama_cpp.sh CACHE_DIR
# Prints the directory holding the two binaries on its last line. Idempotent: a finished build
# (marked by CACHE_DIR/llama-cpp.done) is reused as it is.
#
# The build selects its x86 kernels from explicit flags, never from `-march=native`: some CPUs
# report AMX in /proc/cpuinfo where AMX instructions fault, so AMX stays off, and AVX-512 VNNI
# and BF16 are enabled only when the CPU reports them.
set -euo pipefail

VERSION=0.3.36
cache=${1:?usage: build_llama_cpp.sh CACHE_DIR}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
bin="$cache/build/bin"
if [[ -f "$cache/llama-cpp.done" && -x "$bin/llama-bench" && -x "$bin/llama-quantize" ]]; then
    echo "$bin"
    exit 0
fi

# A virtual environment with the build tools: scikit-build-core lets pip fetch the source
# package without building it in an isolated environment; cmake comes from PyPI as well.
venv="$cache/venv"
if [[ ! -x "$venv/bin/cmake" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check scikit-build-core cmake
fi

src="$cache/src"
if [[ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]]; then
    dl="$cache/dl"
    mkdir -p "$dl"
    "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        --no-build-isolation "llama-cpp-python==$VERSION" -d "$dl"
    rm -rf "$src" "$cache/unpack"
    mkdir -p "$cache/unpack"
    tar -xzf "$dl/llama_cpp_python-$VERSION.tar.gz" -C "$cache/unpack"
    mv "$cache/unpack/llama_cpp_python-$VERSION" "$src"
    rmdir "$cache/unpack"
fi

has_flag() { grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$1"; }
on_if() { if has_flag "$1"; then echo ON; else echo OFF; fi; }

"$venv/bin/cmake" -S "$src/vendor/llama.cpp" -B "$cache/build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_AVX512="$(on_if avx512f)" \
    -DGGML_AVX512_VNNI="$(on_if avx512_vnni)" \
    -DGGML_AVX512_BF16="$(on_if avx512_bf16)" \
    -DGGML_AVX512_VBMI="$(on_if avx512vbmi)" \
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
    -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TOOLS=ON >&2
jobs=$(nproc)
"$venv/bin/cmake" --build "$cache/build" --config Release -j "$jobs" \
    --target llama-bench llama-quantize >&2
touch "$cache/llama-cpp.done"
echo "$bin"
