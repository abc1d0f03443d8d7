"""The parts :mod:`tuner.search.prediction`'s models are fitted from: the latency split into once-per-call phases and
the rest (:mod:`.split_latency`), runs derived along a count knob (:mod:`.count_neighbours`), interaction columns kept
where they predict held-out runs better (:mod:`.interactions`), and an interval's ends from held-out and recorded
errors (:mod:`.recorded_errors`)."""
