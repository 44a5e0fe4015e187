"""Floor 5: checks of the data before any model sees it: train/evaluation leakage.
"""
