"""The walfeed test harness: real Postgres and RabbitMQ, one database + slot + AMQP prefix per test, real processes."""
