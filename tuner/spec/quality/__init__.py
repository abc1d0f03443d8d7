"""How a spec says its quality is compared: a reference per output shape (:mod:`.reference_shape`) and the
inputs each trial runs (:mod:`.cases`)."""
