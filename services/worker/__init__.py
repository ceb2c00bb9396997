"""The fan-out worker: turns post/follow events into materialized home timelines (`walfeed worker`)."""
