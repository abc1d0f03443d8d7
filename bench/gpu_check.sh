#!/usr/bin/env bash
# One prepared run of the tuner's CUDA paths on a real GPU (bench/gpu_check.py; docs/benchmarks.md, GPU section).
#   bash bench/gpu_check.sh            figures to $OUT/gpu_check.json, or ./gpu_check_out/ without $OUT
# Without an NVIDIA GPU it says so in one line and exits 0 (CI runs it so, tests/test_gpu_check.py).
# Interpreter: $PYTHON, else .venv/bin/python, else python3. When it cannot import the tuner, wheels in
# ./.whl (bench/gpu_wheels.sh fetches them for a machine without a registry) go to /tmp/gpu_check_site;
# without them, `pip install -e '.[test]'` is tried. The whole run is bounded to 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then py="$PYTHON"; elif [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi lists none); nothing to check, exit 0"
  exit 0
fi
export PYTHONPATH="$PWD/bench:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if ! "$py" -c "import tuner.api, optuna" >/dev/null 2>&1; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_check_site .whl/*.whl \
      && export PYTHONPATH="$PYTHONPATH:/tmp/gpu_check_site"
  else
    "$py" -m pip install -q -e '.[test]'
  fi
  if ! "$py" -c "import tuner.api, optuna" 2>&1 | tail -3; then
    echo "gpu_check: $py cannot import the tuner and its dependencies (see above); nothing checked"
    exit 1
  fi
fi
exec timeout --kill-after=15 480 "$py" bench/gpu_check.py "$@"
