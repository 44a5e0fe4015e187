"""Reconstruction metrics and rewards of ADRA (active data reconstruction attack).

- ``tokenize``: the word tokenisation every lexical metric uses;
- ``metrics``: metric definitions (Table 16), counts -> scores, embedding cosine;
- ``kernel``: fast exact batched lexical metrics (suffix arrays + rapidfuzz, multiprocessing);
- ``reference``: the slow pure-Python executable specification the kernel is tested against;
- ``rewards``: ``trio`` / ``ngram`` rewards with length penalty, ADRA+ contrastive reward,
  membership weights, distractor sampling;
- ``evaluation``: suffix-only vs full protocols, scoring rollouts, AoN / BoN aggregation.
"""
