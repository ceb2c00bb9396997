"""Settings of the embedder, read once at start from the environment (docs/settings.md, "embedder").

| variable | default | meaning |
|---|---|---|
| `WALFEED_EMBEDDER` | `local` | `local` (the pinned model, in process), `ollama`, `openai` (compatible) or `off` |
| `WALFEED_EMBEDDER_URL` | `http://127.0.0.1:11434` for ollama; none for openai | server's base URL (http, https) |
| `WALFEED_EMBEDDER_MODEL` | the pinned model for local; none otherwise | model name the server is asked for |
| `WALFEED_EMBEDDER_TIMEOUT` | `10` | seconds: longest wait for the server's answer to one batch |
| `WALFEED_EMBEDDER_API_KEY` | none | bearer token sent to an openai server, if it wants one |
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from services.core.settings import Env, SettingsError
from services.embedding import local
from services.embedding.protocol import Embedder
from services.embedding.remote import OllamaEmbedder, OpenAIEmbedder

KINDS: Final = ("local", "ollama", "openai", "off")
OLLAMA_URL: Final = "http://127.0.0.1:11434"
_URL: Final = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
_MODEL: Final = re.compile(r"^[\w.:/@+\-]{1,200}$")


@dataclass(frozen=True, slots=True)
class EmbedderSettings:
    kind: str = "local"
    url: str | None = None
    model: str = local.MODEL_ID
    timeout: float = 10.0
    api_key: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EmbedderSettings:
        env = Env(environ)
        kind = env.str("WALFEED_EMBEDDER", "local").lower()
        if kind not in KINDS:
            raise SettingsError(f"WALFEED_EMBEDDER={kind!r} is invalid: expected one of {', '.join(KINDS)}")
        url = env.optional("WALFEED_EMBEDDER_URL")
        model = env.optional("WALFEED_EMBEDDER_MODEL")
        timeout = env.float("WALFEED_EMBEDDER_TIMEOUT", 10.0, minimum=0.1, maximum=600.0)
        api_key = env.optional("WALFEED_EMBEDDER_API_KEY")
        if url is not None and not _URL.match(url):
            raise SettingsError(f"WALFEED_EMBEDDER_URL={url!r} is invalid: expected http://host[:port][/path] "
                                "or https://...")
        if model is not None and not _MODEL.match(model):
            raise SettingsError(f"WALFEED_EMBEDDER_MODEL={model!r} is invalid: it must match {_MODEL.pattern}")
        if kind == "local":
            if model not in (None, local.MODEL_ID):
                raise SettingsError(f"WALFEED_EMBEDDER_MODEL={model!r} is invalid with WALFEED_EMBEDDER=local: the "
                                    f"local embedder runs only {local.MODEL_ID}; unset it, or use ollama or openai")
            return cls(kind, None, local.MODEL_ID, timeout)
        if kind in ("ollama", "openai"):
            if model is None:
                raise SettingsError(f"WALFEED_EMBEDDER_MODEL is not set: WALFEED_EMBEDDER={kind} needs the name of "
                                    "the model to ask the server for")
            if url is None and kind == "openai":
                raise SettingsError("WALFEED_EMBEDDER_URL is not set: WALFEED_EMBEDDER=openai needs the server's "
                                    "base URL (the adapter posts to {url}/v1/embeddings)")
            return cls(kind, url or OLLAMA_URL, model, timeout, api_key)
        return cls(kind, None, "", timeout)


def model_id(settings: EmbedderSettings) -> str | None:
    """The `model_id` the embedder of these settings writes its vectors under (without loading it), None when off."""
    if settings.kind == "local":
        return local.MODEL_ID
    if settings.kind in ("ollama", "openai"):
        return f"{settings.kind}:{settings.model}"
    return None


def build(settings: EmbedderSettings, threads: int = 0) -> Embedder | None:
    """The embedder the settings name, or None when it is off. The local one loads (and checks) its model here and
    runs on `threads` threads (0: onnxruntime's default, every core)."""
    if settings.kind == "local":
        return local.LocalEmbedder(threads=threads)
    if settings.kind == "ollama":
        assert settings.url is not None
        return OllamaEmbedder(settings.url, settings.model, settings.timeout)
    if settings.kind == "openai":
        assert settings.url is not None
        return OpenAIEmbedder(settings.url, settings.model, settings.timeout, settings.api_key)
    return None
