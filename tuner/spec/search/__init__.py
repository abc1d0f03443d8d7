"""How the search proposes and what it may leave unrun: the spec's ``sampler`` block (:mod:`.sampler`)."""
