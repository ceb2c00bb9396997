"""`walfeed embedder` and `walfeed embed backfill` (docs/search.md): the vectors of posts, best effort, off the
fan-out's path. Reads bodies by id, embeds them with WALFEED_EMBEDDER's model, writes post_embeddings."""
