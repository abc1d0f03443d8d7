"""How a study's front is shown: tables, CSV, PNG plots, the interactive page, the
latency-throughput curve. Reads stored trial records only.

* :mod:`.labels` -- metric names and values for people (``latency p50 [s]``, ``PSNR 31.2 dB``);
* :mod:`.report` -- front table, CSV, pairwise Pareto and hypervolume plots;
* :mod:`.html` -- the interactive Plotly page (plotly.js embedded);
* :mod:`.throughput` -- the latency-throughput curve over batch size and its knee;
* :mod:`.cost` -- what the study cost (device-hours used / wasted / avoided) as every view words it.

May import: :mod:`tuner.storage` (records) and below. The Pareto arithmetic
itself is the foundation module :mod:`tuner.pareto`.
"""
