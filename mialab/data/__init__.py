"""Floor 4: benchmark families, member/non-member pools, per-seed splits, corpora, questions of a
pool and the RL-contamination corpus, paraphrased splits."""
