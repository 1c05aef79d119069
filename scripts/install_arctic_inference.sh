#!/usr/bin/env bash
# Install arctic-inference==0.1.1 (needed by vLLM's `suffix` speculative
# method: `from arctic_inference.suffix_decoding import SuffixDecodingCache`)
# into an existing venv, building it from the PyPI sdist.
#
# Usage: scripts/install_arctic_inference.sh [VENV_BIN_DIR]   (default .venv/bin)
#
# - Idempotent: exits 0 at once when the import already works.
# - Build deps (nanobind==2.9.2, grpcio-tools) go into a throw-away
#   `pip install --target` dir put on PYTHONPATH/PATH; the venv is not touched
#   by them.  The sdist's build-system pins (torch==2.7.0, protobuf==5.29.5,
#   cmake, ninja, ...) are NOT installed: the build runs with
#   --no-build-isolation against the venv's own torch (setup.py only imports it
#   for a cmake prefix path that the suffix-decoding extension never uses).
# - The wheel goes into the venv with --no-deps; `pip freeze` before/after must
#   differ only by the arctic-inference line, else the script fails.
#
# Native build needs: a C++20 compiler (c++/g++), cmake >= 3.18, ninja (or
# make), and the Python headers.  No CUDA: the CUDA custom ops are only built
# when ARCTIC_INFERENCE_PRECOMPILED_OPS=1, which this script forces off.
#
# Env knobs: TMPDIR (where the scratch dir goes), ARCTIC_KEEP_WORKDIR=1 (keep
# it), ARCTIC_BUILD_LOG=FILE (copy the verbose build log there),
# ARCTIC_GRPCIO_TOOLS_SPEC (default "grpcio-tools").
set -euo pipefail

BIN="${1:-.venv/bin}"
BIN="$(cd "$BIN" && pwd)"
PY="$BIN/python"
PIP="$BIN/pip"
VERSION="0.1.1"
IMPORT_CHECK="from arctic_inference.suffix_decoding import SuffixDecodingCache"

if [[ ! -x "$PY" ]]; then
    echo "error: no python at $PY" >&2
    exit 2
fi

if "$PY" -c "$IMPORT_CHECK" >/dev/null 2>&1; then
    echo "arctic_inference.suffix_decoding already importable in $BIN; nothing to do."
    exit 0
fi

start_s=$(date +%s.%N)

# --- tool checks (only the native suffix_decoding._C step needs them) -------
CXX_BIN="${CXX:-}"
if [[ -z "$CXX_BIN" ]]; then
    for c in c++ g++ clang++; do
        if command -v "$c" >/dev/null 2>&1; then CXX_BIN="$c"; break; fi
    done
fi
if [[ -z "$CXX_BIN" ]]; then
    echo "error: no C++ compiler (c++/g++/clang++) found; suffix_decoding._C is C++20 and must be compiled" >&2
    exit 3
fi
echo "compiler: $(command -v "$CXX_BIN") ($("$CXX_BIN" --version | head -n1))"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/arctic-inference-build.XXXXXX")"
cleanup() {
    if [[ "${ARCTIC_KEEP_WORKDIR:-0}" == "1" ]]; then
        echo "kept work dir: $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

DEPS="$WORK/build-deps"
mkdir -p "$WORK/sdist" "$WORK/wheel" "$DEPS"

BUILD_DEPS=("nanobind==2.9.2" "${ARCTIC_GRPCIO_TOOLS_SPEC:-grpcio-tools}")

# cmake: system one if >= 3.18, else the PyPI wheel into the target dir.
need_cmake=1
if command -v cmake >/dev/null 2>&1; then
    cmv="$(cmake --version | head -n1 | awk '{print $3}')"
    if [[ "$(printf '%s\n3.18\n' "$cmv" | sort -V | head -n1)" == "3.18" ]]; then
        need_cmake=0
        echo "cmake: $(command -v cmake) ($cmv)"
    fi
fi
[[ $need_cmake == 1 ]] && BUILD_DEPS+=("cmake>=3.18")
# ninja: setup.py does `import ninja` to pick the Ninja generator; otherwise
# it falls back to CMake's default (Makefiles, needs `make`).
if ! "$PY" -c "import ninja" >/dev/null 2>&1; then
    BUILD_DEPS+=("ninja")
else
    echo "ninja: python package in venv"
fi

# --- 1. sdist --------------------------------------------------------------
# --no-build-isolation: otherwise pip builds an isolated env for metadata and
# --no-binary :all: cascades into it (torch==2.7.0 from source -> fails).
echo "== downloading arctic-inference==$VERSION sdist"
"$PIP" download --quiet --no-deps --no-binary :all: --no-build-isolation \
    "arctic-inference==$VERSION" -d "$WORK/sdist"
SDIST="$(ls "$WORK"/sdist/arctic_inference-"$VERSION".tar.gz)"

# --- 2. build deps into a --target dir (not the venv) ----------------------
echo "== installing build deps into $DEPS: ${BUILD_DEPS[*]}"
if ! "$PIP" install --quiet --disable-pip-version-check --no-warn-conflicts \
        --only-binary :all: --target "$DEPS" "${BUILD_DEPS[@]}"; then
    # grpcio-tools only generates the (unused here) embedding gRPC stubs, and
    # setup.py treats its failure as non-fatal.
    echo "warning: build-dep install failed; retrying without grpcio-tools" >&2
    rest=()
    for d in "${BUILD_DEPS[@]}"; do [[ "$d" == grpcio-tools* ]] || rest+=("$d"); done
    "$PIP" install --quiet --disable-pip-version-check --no-warn-conflicts \
        --only-binary :all: --target "$DEPS" "${rest[@]}"
fi

# --- 3. build the wheel -----------------------------------------------------
echo "== building wheel"
freeze_before="$WORK/freeze.before"
freeze_after="$WORK/freeze.after"
"$PIP" freeze --all | sort >"$freeze_before"

(
    export PYTHONPATH="$DEPS${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="$DEPS/bin:$PATH"
    export ARCTIC_INFERENCE_PRECOMPILED_OPS=0
    export CXX="$CXX_BIN"
    export CMAKE_ARGS="-DPython_EXECUTABLE=$PY${CMAKE_ARGS:+ $CMAKE_ARGS}"
    export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
    "$PIP" wheel -v --no-build-isolation --no-deps --disable-pip-version-check \
        -w "$WORK/wheel" "$SDIST"
) >"$WORK/build.log" 2>&1 || {
    echo "error: wheel build failed; last lines of the log:" >&2
    tail -n 60 "$WORK/build.log" >&2
    ARCTIC_KEEP_WORKDIR=1
    exit 4
}
if [[ -n "${ARCTIC_BUILD_LOG:-}" ]]; then cp "$WORK/build.log" "$ARCTIC_BUILD_LOG"; fi
WHEEL="$(ls "$WORK"/wheel/arctic_inference-"$VERSION"-*.whl)"
echo "built: $(basename "$WHEEL")"

# --- 4. install into the venv, no deps --------------------------------------
echo "== installing wheel into $BIN (--no-deps)"
# By name from --find-links (not by path) so pip freeze shows a plain
# `arctic-inference==0.1.1` pin rather than a file:// URL into the temp dir.
"$PIP" install --quiet --disable-pip-version-check --no-deps --no-index \
    --find-links "$WORK/wheel" "arctic-inference==$VERSION"
"$PIP" freeze --all | sort >"$freeze_after"

echo "== pip freeze diff (before -> after)"
diff "$freeze_before" "$freeze_after" || true
unexpected="$(diff "$freeze_before" "$freeze_after" | grep -E '^[<>]' \
    | grep -viE '^[<>] arctic[-_]inference' || true)"
if [[ -n "$unexpected" ]]; then
    echo "error: installing the wheel changed other packages:" >&2
    echo "$unexpected" >&2
    exit 5
fi

# --- 5. check --------------------------------------------------------------
"$PY" -c "$IMPORT_CHECK; c = SuffixDecodingCache(max_tree_depth=8); print('import ok:', type(c).__name__)"

end_s=$(date +%s.%N)
awk -v a="$start_s" -v b="$end_s" -v v="$VERSION" \
    'BEGIN { printf "arctic-inference==%s installed in %.1f s\n", v, b - a }'
