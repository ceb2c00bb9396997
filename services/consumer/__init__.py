"""The consumer runtime: one Session for every walfeed consumer of RabbitMQ (the fan-out worker, the notifier, the
delivery workers, the next one), its strategies, its one settler, outcomes and headers (docs/adr/0125,
docs/consumers.md). A library: it imports no service."""
