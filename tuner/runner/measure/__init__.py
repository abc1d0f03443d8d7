"""What one trial measures and reports, inside the worker: each input set up, timed and evaluated
(:mod:`.trial`), figures over several inputs (:mod:`.inputs`), where the wall time went (:mod:`.phases`),
browsable samples (:mod:`.samples`)."""
