"""Fixtures shared by the tests and the benchmarks: real Postgres and RabbitMQ, a database + slot + AMQP prefix of
one's own, real processes, waiting with a deadline. Imports services only, never tests/ or bench/: both import it
(tests/unit/test_imports.py)."""
