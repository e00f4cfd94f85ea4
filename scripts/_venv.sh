# Shared by scripts/run and scripts/test: make sure .venv exists with SoulFlow installed.
# Usage: source scripts/_venv.sh EXTRAS   (EXTRAS like "dev" or "local"; may be empty)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "SoulFlow needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
# llama-cpp-python (the `local` extra) compiles llama.cpp once: use both cores
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
# ...and for a fixed x86-64 instruction set (AVX2) instead of -march=native: virtual machines
# can report AMX in cpuid without enabling its register state, and a native build then dies
# with SIGILL on the first completion. Set CMAKE_ARGS yourself to build otherwise.
if [ -z "${CMAKE_ARGS:-}" ] && [ "$(uname -m)" = "x86_64" ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
fi
spec="$ROOT"
if [ -n "${1:-}" ]; then spec="$ROOT[$1]"; fi
# pip's own wheel cache is keyed by the source archive, not by CMAKE_ARGS: a wheel once built
# with -march=native would be reused on every later install and die with SIGILL. So the
# embedded model's wheel is built once per set of flags into a folder of our own and installed
# from there before SoulFlow (which then finds the requirement already met).
if [[ ",${1:-}," == *",local,"* ]]; then
    LLAMA_SPEC="$("$VENV/bin/python" - "$ROOT/pyproject.toml" <<'PY'
import re, sys, tomllib
extras = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["local"]
print(next(re.sub(r"\[.*?\]", "", dep) for dep in extras if dep.startswith("llama-cpp-python")))
PY
)"
    llama_key="$(printf '%s|%s|%s' "$LLAMA_SPEC" "${CMAKE_ARGS:-}" "$("$VENV/bin/python" -V)" | sha256sum | cut -c1-16)"
    LLAMA_WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/soulflow/llama-wheels/$llama_key"
    if [ "$(cat "$VENV/.llama-build" 2>/dev/null)" != "$llama_key" ]; then
        if ! ls "$LLAMA_WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
            echo "building llama-cpp-python once for these flags (${CMAKE_ARGS:-default}); takes minutes" >&2
            "$VENV/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps \
                --no-cache-dir --no-binary llama-cpp-python -w "$LLAMA_WHEELS" "$LLAMA_SPEC"
        fi
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall \
            --no-deps "$LLAMA_WHEELS"/llama_cpp_python-*.whl
        echo "$llama_key" > "$VENV/.llama-build"
    fi
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$spec"
# The diagram_render tool's Mermaid renderer (beautiful-mermaid, pinned in package-lock.json).
if command -v npm >/dev/null 2>&1; then
    if [ ! -d "$ROOT/soulflow/agent/diagram/node_modules/beautiful-mermaid" ]; then
        npm ci --silent --prefix "$ROOT/soulflow/agent/diagram" --ignore-scripts >/dev/null
    fi
else
    echo "note: npm not found; the diagram_render tool needs Node.js (apt-get install nodejs npm)" >&2
fi
