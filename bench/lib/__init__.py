"""Support modules of bench/run_all.py: pure parts (stats, pacing, parsing, report) and thin I/O adapters."""
