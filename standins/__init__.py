"""Stand-ins (simulated programs and services) for testing the adapters without the real models.

Everything here is SIMULATED and says so in its name: stand-in CLIs with the real
programs' flags, outputs and failure modes (Live Avatar's
``s2v_streaming_interact.py``, Wan's ``generate.py``, ``torchrun``), an
OpenAI-compatible stand-in service, and a python-adapter factory that wraps the
project's real built-in audio-visual QA model. They never produce numbers a study
would report as a real model's. See docs/adapters.md.
"""
