"""The backfill (docs/adr/0123): every live post without a vector of the model gets one, batch by batch in post id
order, online (short statements, nothing locked), resumable (the model's position in embedding_models moves
after each batch), run by `walfeed embed backfill` and by the embedder when its queue is idle.

A pass goes from the model's position to the horizon, the newest post created more than `settle` seconds ago
(a younger one's transaction may not have committed yet: it is the next pass's). A pass that reaches the horizon
marks the model complete (search then uses it: services/api/search_index.py), and the position stays there: later
passes look only at newer posts. A post whose vector failed below the position is refilled when the model's
row is reset (`--from-start`). The embedder failing stops the pass where it is, to resume later."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from services.core.embedding.protocol import Embedder
from services.embedder import store

log = logging.getLogger(__name__)

BATCH: Final = 64  # posts embedded per batch: a few hundred ms of one core with the local model


@dataclass(frozen=True, slots=True)
class Progress:
    model: str
    position: int
    horizon: int
    embedded: int  # this pass so far
    complete: bool


def run_pass(conn: store.Conn, embedder: Embedder, *, settle: float, batch: int = BATCH, from_start: bool = False,
             progress: Callable[[Progress], None] | None = None, max_batches: int | None = None) -> Progress:
    """One pass (or `max_batches` batches of it). Raises EmbedderUnavailable when the model fails: the position
    keeps what was done."""
    model = embedder.model_id
    position, complete = store.ensure_model(conn, model)
    if from_start:  # stored at once: stopped, the next pass resumes this one (the model stays complete if it was)
        store.restart(conn, model)
        position = 0
    until = store.horizon(conn, settle)
    embedded, batches = 0, 0
    while position < until and (max_batches is None or batches < max_batches):
        posts = store.missing(conn, model, position, until, batch)
        if posts:
            vectors = embedder.embed([body for _, body in posts])
            with conn.transaction():
                embedded += store.insert_vectors(conn, model, [post for post, _ in posts], vectors)
        reached = posts[-1][0] if len(posts) == batch else until
        done = reached >= until
        store.advance(conn, model, reached, done)
        position, complete, batches = reached, complete or done, batches + 1
        if progress is not None:
            progress(Progress(model, position, until, embedded, complete))
    if position >= until and not complete:
        store.advance(conn, model, position, True)
        complete = True
    return Progress(model, position, until, embedded, complete)
