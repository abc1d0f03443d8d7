"""The pieces of a Wan pipeline that :mod:`tuner.adapters.factories.diffusers_video` drives: architecture presets
built from published configs with seeded random weights (:mod:`.presets`), the settings diffusers offers around
it -- caches, attention kernels, offload, compile (:mod:`.knobs`) -- the scheduler and VAE settings a call
changes without a reload (:mod:`.settings`), the prompt embeddings kept per prompt (:mod:`.text`), and what a
call needs warmed and the one-step call that warms it (:mod:`.warmup`)."""
