"""What the api, the relay and the worker share: settings, the event envelope, AMQP names, database access."""
