#!/usr/bin/env bash
# Wheels for bench/gpu_check.sh on a GPU machine that has Python 3.12, torch and the scientific stack but no
# package registry (the lent H200 image; its package list is in the device tool's KINDS.md). Run HERE, where
# pip reaches PyPI: it fills ./.whl (ignored by git through .git/info/exclude) with the tuner's dependencies
# that image lacks, for CPython 3.12 on x86-64; carry .whl with the working tree and gpu_check.sh installs them
# to /tmp/gpu_check_site. Versions are this project's venv's; av (PyAV, 36 MB; the stand-ins write mp4) is the
# largest. Not fetched: stlpips / lpips (64 MB with their weights, over what a run carries); gpu_check.py's
# studies use PSNR, so no perceptual model is needed there. About 45 MB in all, with the 7 MB tree under 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
packages=(optuna==5.0.0 alembic==1.20.1 Mako==1.4.3 colorlog==6.12.0 SQLAlchemy==2.1.9 greenlet
          pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
          av==18.1.0)
platforms=()
for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" --platform manylinux2014_x86_64 -d .whl "${packages[@]}"
du -sh .whl
