"""Benchmarks (not timed tests). Run each as a module from the repository root: .venv/bin/python -m bench.<name>."""
