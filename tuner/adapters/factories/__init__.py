"""Ready python-adapter factories for common model families (``workload.python.factory``).

* :mod:`.transformers_av` -- a transformers ``generate()``-based audio-visual LLM;
* :mod:`.diffusers_video` -- a diffusers text/image-to-video pipeline.

They import transformers / diffusers only when built (neither is a dependency of
the tuner: install the one your model needs in the same environment). Weights are
read with ``local_files_only=True``: nothing downloads during a study.
"""
