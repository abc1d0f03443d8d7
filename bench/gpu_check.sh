#!/usr/bin/env bash
# The tuner's CUDA paths on a real GPU in two prepared runs (bench/gpu_check.py; docs/benchmarks.md, GPU section):
#   bash bench/gpu_check.sh --run 1    the new and most valuable phases: figures to $OUT/gpu_check_run1.json
#   bash bench/gpu_check.sh --run 2    the rest (after run 1 on the warm machine, or alone): gpu_check_run2.json
# ($OUT, else ./gpu_check_out/; other gpu_check.py options pass through, e.g. --phases a,g instead of --run).
# Without an NVIDIA GPU it says so in one line and exits 0 (CI runs it so, tests/test_gpu_check.py).
# Interpreter: $PYTHON, else .venv/bin/python, else python3. When it cannot import the tuner, the wheels in ./.whl
# (bench/gpu_wheels.sh fetches them where pip reaches an index) are installed with --no-index into
# /tmp/gpu_check_site (or $GPU_CHECK_SITE; kept, and reused by a later run on the machine while the wheels are the
# same), first on PYTHONPATH so its typing_extensions wins over the image's; without wheels it says so in one line
# and exits 1: the GPU machine has no package registry, nothing is fetched. Each run, install included, is bounded
# to 6 minutes (limit; bench/gpu_check_plan.py RUN_LIMIT_S), so both fit one 15-minute window with the machine's
# start: gpu_check.py gets what is left, its phases 20 s less (finish; FINISH_MARGIN_S).
set -uo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
limit=360
finish=20
if [ -n "${PYTHON:-}" ]; then py="$PYTHON"; elif [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi lists none); nothing to check, exit 0"
  exit 0
fi
site="${GPU_CHECK_SITE:-/tmp/gpu_check_site}"
export PYTHONPATH="$PWD/bench:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if ! "$py" -c "import tuner.api, optuna" >/dev/null 2>&1; then
  if ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "gpu_check: $py cannot import the tuner and ./.whl holds no wheels (run bench/gpu_wheels.sh where pip reaches an index, then carry .whl); nothing checked"
    exit 1
  fi
  stamp=$(sha256sum .whl/*.whl | sha256sum | cut -d" " -f1)
  if [ "$(cat "$site/.gpu_check_wheels" 2>/dev/null)" = "$stamp" ]; then
    echo "gpu_check: the wheels of ./.whl are already installed in $site; reused"
  elif ! "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
      --upgrade --target "$site" .whl/*.whl; then
    echo "gpu_check: installing ./.whl into $site failed (see above); nothing checked"
    exit 1
  else
    echo "$stamp" > "$site/.gpu_check_wheels"
  fi
  export PYTHONPATH="$site:$PYTHONPATH"
  if ! problem=$("$py" -c "import tuner.api, optuna" 2>&1); then
    echo "$problem" | tail -3
    echo "gpu_check: $py cannot import the tuner even with the wheels of ./.whl in $site (see above); nothing checked"
    exit 1
  fi
fi
left=$((limit - (SECONDS - started)))
exec timeout --kill-after=15 "$left" "$py" bench/gpu_check.py --budget-s "$((left - finish))" "$@"
