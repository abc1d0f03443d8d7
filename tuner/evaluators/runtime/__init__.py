"""How a measured call ran, beside its latency: the device's utilization and power (:mod:`.device_activity`),
the chunks of a streamed output (:mod:`.streaming`), the same call timed bare (:mod:`.bare_twin`)."""
