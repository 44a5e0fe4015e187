"""Benchmark families, member/non-member pools and per-seed splits."""
