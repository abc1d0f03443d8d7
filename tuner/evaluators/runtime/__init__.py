"""How a measured call ran, beside its latency: the device's utilization and power (:mod:`.device_activity`),
the chunks of a streamed output (:mod:`.streaming`), the same call timed bare (:mod:`.bare_twin`), its
spans (:mod:`.spans`) and its cost structure: phases and per-step times (:mod:`.structure`)."""
