#!/usr/bin/env bash
# One prepared run of the tuner's CUDA paths on a real GPU (bench/gpu_check.py; docs/benchmarks.md, GPU section).
#   bash bench/gpu_check.sh [gpu_check.py options]   figures to $OUT/gpu_check.json (else ./gpu_check_out/)
# Without an NVIDIA GPU it says so in one line and exits 0 (CI runs it so, tests/test_gpu_check.py).
# Interpreter: $PYTHON, else .venv/bin/python, else python3. When it cannot import the tuner, the wheels in ./.whl
# (bench/gpu_wheels.sh fetches them where pip reaches an index) are installed with --no-index into
# /tmp/gpu_check_site (kept), first on PYTHONPATH so its typing_extensions wins over the image's; without wheels it
# says so in one line and exits 1: the GPU machine has no package registry, nothing is fetched. The whole run,
# install included, is bounded to 7 minutes (420 s): gpu_check.py gets what is left, its phases 20 s less.
set -uo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
if [ -n "${PYTHON:-}" ]; then py="$PYTHON"; elif [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi lists none); nothing to check, exit 0"
  exit 0
fi
site=/tmp/gpu_check_site
export PYTHONPATH="$PWD/bench:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if ! "$py" -c "import tuner.api, optuna" >/dev/null 2>&1; then
  if ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "gpu_check: $py cannot import the tuner and ./.whl holds no wheels (run bench/gpu_wheels.sh where pip reaches an index, then carry .whl); nothing checked"
    exit 1
  fi
  if ! "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
      --upgrade --target "$site" .whl/*.whl; then
    echo "gpu_check: installing ./.whl into $site failed (see above); nothing checked"
    exit 1
  fi
  export PYTHONPATH="$site:$PYTHONPATH"
  if ! problem=$("$py" -c "import tuner.api, optuna" 2>&1); then
    echo "$problem" | tail -3
    echo "gpu_check: $py cannot import the tuner even with the wheels of ./.whl in $site (see above); nothing checked"
    exit 1
  fi
fi
left=$((420 - (SECONDS - started)))
exec timeout --kill-after=15 "$left" "$py" bench/gpu_check.py --budget-s "$((left - 20))" "$@"
