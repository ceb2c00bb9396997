"""`walfeed notifier`: derives notifications (and their deliveries) from post and follow events."""
