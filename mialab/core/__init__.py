"""Floor 0, below everything: atomic writes and parquet/JSON io, content hashes, the name registry,
progress, job entry points and the distributed launcher. Imports nothing from mialab.
"""
