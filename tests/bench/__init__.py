"""Benchmarks: each prints its figures and a ratio against a baseline measured in the same run.

Run with ``make bench``. They are not tests: these machines are shared and noisy, so speed is
judged by ratios within one run, never by absolute timings in the test suite.
"""
