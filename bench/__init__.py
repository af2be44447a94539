"""Benchmark harness for autobatch: `python -m bench --help`."""
