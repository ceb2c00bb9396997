"""Text embeddings for semantic search (docs/search.md, docs/adr/0120): one interface, `Embedder`, and its
adapters: the pinned local model (`local.py`), an Ollama server and an OpenAI-compatible server (`remote.py`).
Every failure of any adapter is `EmbedderUnavailable`; vectors are float32 rows of unit length."""

from services.core.embedding.protocol import Embedder, EmbedderUnavailable

__all__ = ["Embedder", "EmbedderUnavailable"]
