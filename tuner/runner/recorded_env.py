"""Which environment variables a trial records: an allow-list, nothing else.

A trial's ``env`` record (written by the worker, :func:`tuner.runner.worker.trial_provenance`;
stored as a side record, :mod:`tuner.storage.records`; exported as ``env`` in ``best.yaml``) holds
only the variables that can change a measurement's performance or results:

* :data:`ALLOWED` -- the built-in allow-list: CUDA, cuBLAS and cuDNN switches (``CUDA_*``,
  ``CUBLAS_*``, ``CUBLASLT_*``, ``CUDNN_*``), NCCL (``NCCL_*``), PyTorch and its compiler
  (``PYTORCH_*``, ``TORCH_*``, ``TORCHINDUCTOR_*``, ``TORCHDYNAMO_*``: allocator, cuDNN / TF32
  switches such as ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE``), the container runtime's and NVIDIA's
  (``NVIDIA_*``: visible devices, ``NVIDIA_TF32_OVERRIDE``), the OpenMP / MKL / OpenBLAS runtimes
  (``OMP_*``, ``KMP_*``, ``GOMP_*``, ``MKL_*``, ``OPENBLAS_*``) and the other thread counts
  (``NUMEXPR_*_THREADS``, ``VECLIB_MAXIMUM_THREADS``, ``BLIS_NUM_THREADS``,
  ``TOKENIZERS_PARALLELISM``), Hugging Face's offline switches (``HF_HUB_OFFLINE``,
  ``TRANSFORMERS_OFFLINE``, ``HF_DATASETS_OFFLINE``, ``HF_EVALUATE_OFFLINE``) and the tuner's
  own (``TUNER_*``);
* plus the spec's ``record_env:`` list (names or simple globs, :data:`tuner.spec.models.RECORD_ENV_PATTERN`),
  which reaches the worker in :attr:`tuner.runner.base.TrialRequest.record_env`.

Every other variable is left out, name and value. A recorded value still passes the
secret masks (:mod:`tuner.secrets`): a variable with a secret-looking name
(:func:`~tuner.secrets.is_secret_name`: ``TUNER_TOKEN``, ``NVIDIA_API_KEY``) or one of
:data:`~tuner.secrets.SECRET_VARIABLES` is :data:`~tuner.secrets.MASK` (when not empty); any
other value goes through :func:`~tuner.secrets.redact_text` (a URL's password, secret
``name=value`` pairs, known secret values), so ``TUNER_STORAGE`` keeps its host, not its password.

Names are matched case-sensitively (``fnmatch.fnmatchcase``), as the process environment is.
:func:`recorded_only` applies the same filter at read time, so a trial an older tuner recorded
with the whole environment is shown, synced and exported as if recorded now.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from tuner.secrets import MASK, SECRET_VARIABLES, is_secret_name, redact_text

ALLOWED: tuple[str, ...] = (
    "CUDA_*",
    "CUBLAS_*",
    "CUBLASLT_*",
    "CUDNN_*",
    "NCCL_*",
    "PYTORCH_*",
    "TORCH_*",
    "TORCHINDUCTOR_*",
    "TORCHDYNAMO_*",
    "NVIDIA_*",
    "OMP_*",
    "KMP_*",
    "GOMP_*",
    "MKL_*",
    "OPENBLAS_*",
    "NUMEXPR_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "HF_EVALUATE_OFFLINE",
    "TUNER_*",
)
"""The built-in allow-list (names or ``fnmatch`` globs); see the module docstring for why each."""


@lru_cache(maxsize=32)
def _matcher(extra: tuple[str, ...]) -> re.Pattern[str]:
    """One regular expression matching :data:`ALLOWED` and ``extra`` (``fnmatch`` globs, case-sensitive)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(pattern)})" for pattern in (*ALLOWED, *extra)))


def is_recorded(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether a variable named ``name`` is recorded: it matches :data:`ALLOWED` or one of ``extra``
    (a spec's ``record_env``), case-sensitively (as ``fnmatch.fnmatchcase``)."""
    return _matcher(tuple(extra)).match(name) is not None


def _shown(name: str, value: str, environ: Mapping[str, str] | None) -> str:
    """``value`` as recorded: masked whole for a secret name, else with its secrets redacted."""
    secret = name in SECRET_VARIABLES or is_secret_name(name)
    return MASK if secret and value else redact_text(value, environ)


def recorded_environment(environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``environ`` (default ``os.environ``) a trial records (:func:`is_recorded` with
    ``extra``), secrets masked (see module docs); keys sorted. The rest of ``environ`` is left out; only its
    known secrets (:func:`tuner.secrets.known_secrets`) are read, to mask them inside recorded values."""
    source = os.environ if environ is None else environ
    matcher = _matcher(tuple(extra))
    return {name: _shown(name, source[name], source) for name in sorted(source) if matcher.match(name)}


def recorded_only(env: Any, extra: Iterable[str] = ()) -> dict[str, str] | None:
    """A stored ``env`` record filtered as :func:`recorded_environment` would have recorded it (read time:
    a trial an older tuner recorded with the whole environment): only :func:`is_recorded` names, values
    masked again (a value recorded masked stays masked). None when ``env`` is not a mapping (not recorded)."""
    if not isinstance(env, Mapping):
        return None
    matcher = _matcher(tuple(extra))
    named = sorted(((str(name), value) for name, value in env.items()), key=lambda item: item[0])
    return {name: _shown(name, str(value), None) for name, value in named if matcher.match(name)}
