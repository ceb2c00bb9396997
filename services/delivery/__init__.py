"""The delivery worker: notifications to webhooks and email (issue 15, docs/notifications.md)."""
