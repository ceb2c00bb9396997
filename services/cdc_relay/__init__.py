"""The CDC relay: a logical replication slot (wal2json) -> RabbitMQ, at least once, confirming WAL positions only
behind the broker's publisher confirms. `main.run` wires the pieces; see docs/adr/0002 and 0011-0015 for the decisions.
"""
