"""Floor 1: text tools every method shares: prefix/suffix cutting, the metric word tokeniser, spans to
protect (LaTeX math, ``[BLANK]``), offline WordNet, and LLM prompt templates and list parsing.
"""
