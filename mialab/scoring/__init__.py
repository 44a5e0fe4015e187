"""Token log-probabilities and the passive membership scores built on them."""
