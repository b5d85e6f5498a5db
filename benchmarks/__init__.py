"""Benchmark and evaluation scripts of biomjepa (not shipped in the wheel); ``README.md`` here is their index.

The subfolders are packages so that a script reaches the shared helpers (``benchmarks._common``) and other
scripts (``benchmarks.speed.bench_embed``) by one name from any folder; every script is still run as a file,
``python benchmarks/speed/bench_embed.py``.
"""
