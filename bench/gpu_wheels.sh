#!/usr/bin/env bash
# Wheels for bench/gpu_check.sh on a GPU machine that has Python 3.12, torch and the scientific stack but no
# package registry (the lent H200 image; its packages are listed in bench/gpu_image_packages.txt, from the device
# tool's KINDS.md). Run HERE, where pip reaches an index:
#   bash bench/gpu_wheels.sh [DEST]      wheels for CPython 3.12 on x86-64 into DEST (default ./.whl)
# ./.whl is ignored through .git/info/exclude; carry it with the working tree and gpu_check.sh installs it with
# --no-index into /tmp/gpu_check_site, first on PYTHONPATH. The set: what the GPU check imports that the image
# lacks (the tuner's optuna + SQLAlchemy storage and its pydantic specs) and every Requires-Dist of those that
# the image does not provably meet: typing_extensions (pydantic 2.14 needs >= 4.16), packaging and MarkupSafe
# (bounded requirements on image packages whose version is not known); diffusers for the Wan phase (the image
# has transformers, accelerate, safetensors and huggingface-hub) with importlib_metadata (missing there), zipp and
# regex (bounded requirements again). About 15 MB. bench/gpu_wheels_check.py proves the set complete
# (tests/test_gpu_check.py runs both). Not carried: av (PyAV, 36 MB; the check's stand-ins write .npz), stlpips / lpips (64 MB with weights; the check's studies use PSNR), mlflow (the check
# runs without tracking). Versions are this project's venv's; one version of each package (two stop pip).
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-.whl}"
if [ "$dest" = .whl ] && exclude=$(git rev-parse --git-path info/exclude 2>/dev/null); then
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
fi
mkdir -p "$dest"
rm -f "$dest"/*.whl  # a wheel left from an older set (another version, av) would travel and could stop pip
packages=(
  optuna==5.0.0 alembic==1.20.1 Mako==1.4.3 MarkupSafe==3.0.4 colorlog==6.12.0 SQLAlchemy==2.1.9
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  typing_extensions==4.16.0 packaging==26.4
  diffusers==0.42.1 importlib_metadata==9.1.0 zipp==4.1.2 regex==2026.11.19
)
platforms=()
for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
py="${PYTHON:-python3}"
"$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platforms[@]}" --platform manylinux2014_x86_64 -d "$dest" "${packages[@]}"
du -sh "$dest"
