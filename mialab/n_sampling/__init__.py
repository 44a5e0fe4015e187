"""N-Sampling (the ADRA paper's sampling baseline): N rollouts per candidate from its prefix, scored by
reconstruction metrics and aggregated (average- or best-of-N). ADRA evaluates its policies with it.
"""
