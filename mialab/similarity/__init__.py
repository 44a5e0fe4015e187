"""Floor 3: how close a reconstruction is to its reference: the metric definitions (Table 16 of the
ADRA paper), the fast batched lexical kernel, its slow reference specification, embedding cosine,
and a loader of the released code's reward modules for equality tests.
"""
