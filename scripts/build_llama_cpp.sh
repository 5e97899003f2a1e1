#!/usr/bin/env bash
# Build the pinned llama.cpp (the copy vendored in the llama-cpp-python sdist, which implements DeepSeek-V4) for the
# llama.cpp conformance audit (docs/guides/conformance.md). Not a CI dependency: the tests that need it skip when it
# is missing.
#
#     scripts/build_llama_cpp.sh            # prints the pinned folder: build/bin (libllama.so), python/llama_cpp
#                                           # (the binding's ctypes API), gguf-py, convert_hf_to_gguf.py
#
# The build lives outside the repository, in $PHASEKV_LLAMA_CPP_CACHE (default ~/.cache/phasekv), in a folder named
# after the pin, so changing LLAMA_CPP_PYTHON_VERSION builds a fresh copy and an existing build is reused as is.
# The audit drives libllama in process through the binding's ctypes API (batches, sequence ids, ubatch sizes,
# sequence copies, saved state, rollback: more than llama-server exposes), so only the library is built: 30 min
# under nice -n 19 on a busy 2-core machine (-j$JOBS, default 2). Needs pip (to download the sdist), cmake, g++.
set -euo pipefail
PIN=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CACHE=${PHASEKV_LLAMA_CPP_CACHE:-$HOME/.cache/phasekv}
JOBS=${JOBS:-2}
PY=${PYTHON:-python3}
ROOT="$CACHE/llama.cpp-$PIN"
LIB="$ROOT/build/bin/libllama.so"
BINDING="$ROOT/python/llama_cpp"

if [ -f "$LIB" ] && [ -f "$BINDING/llama_cpp.py" ]; then
  echo "$ROOT"
  exit 0
fi
for tool in cmake g++; do
  command -v "$tool" >/dev/null || { echo "build_llama_cpp: $tool is needed and not found" >&2; exit 1; }
done
mkdir -p "$CACHE"
if [ ! -f "$ROOT/CMakeLists.txt" ] || [ ! -f "$BINDING/llama_cpp.py" ]; then
  dl=$(mktemp -d "$CACHE/download.XXXXXX")
  # --no-binary: the wheel carries only the compiled library, the sdist carries llama.cpp's source.
  "$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$PIN" -d "$dl" >&2
  tar -xzf "$dl"/llama_cpp_python-"$PIN".tar.gz -C "$dl"
  src="$dl/llama_cpp_python-$PIN"
  if [ ! -f "$ROOT/CMakeLists.txt" ]; then
    rm -rf "$ROOT"
    mv "$src/vendor/llama.cpp" "$ROOT"
  fi
  # Only the binding's low-level ctypes API (and the helper it imports), loaded against the library built here
  # (LLAMA_CPP_LIB_PATH): its package __init__ pulls in the high-level API and its dependencies, which the audit
  # does not use, so the package gets an empty one.
  mkdir -p "$BINDING"
  cp "$src/llama_cpp/llama_cpp.py" "$src/llama_cpp/_ctypes_extensions.py" "$BINDING/"
  : > "$BINDING/__init__.py"
  rm -rf "$dl"
fi
cd "$ROOT"
# CURL off: the audit serves a local GGUF, and the machines it runs on have no model hub to reach.
cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >&2
cmake --build build -j"$JOBS" --target llama >&2
test -f "$LIB" || { echo "build_llama_cpp: the build finished without $LIB" >&2; exit 1; }
echo "$ROOT"
