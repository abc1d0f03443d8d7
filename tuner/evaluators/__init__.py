"""How a trial is measured and scored: latency, memory, and quality evaluator families.

* :mod:`.latency`, :mod:`.memory` -- latency statistics with adaptive repeats; peak memory;
* :mod:`.registry` -- metric names -> evaluator families (imported lazily), per-family timing;
* :mod:`.video`, :mod:`.perceptual`, :mod:`.temporal`, :mod:`.lipsync`, :mod:`.text` -- the families.

May import: :mod:`tuner.spec` (the metric catalogue) and the foundation modules
(:mod:`tuner.results`, :mod:`tuner.gpu`); never the runner, the study or anything above.
"""
