"""The delivery worker: notifications to webhooks and email (docs/notifications.md)."""
