"""One module per benchmark family; each registers itself with ``register_family``."""
