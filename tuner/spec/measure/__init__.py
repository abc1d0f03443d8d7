"""How a trial is measured and priced: the spec's ``measurement`` and ``budget`` blocks (:mod:`.measurement`:
warm-up, repeats, the memory sampler, the bare twin, sustained load) and its ``cost`` block (:mod:`.price`)."""
