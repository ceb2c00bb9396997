"""Settings of the embedder, read once at start from the environment (docs/settings.md, "embedder").

Each setting is declared once below (services/core/settings.py): its variable, default, bounds and meaning.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from services.core.embedding import local
from services.core.embedding.protocol import Embedder
from services.core.embedding.remote import OllamaEmbedder, OpenAIEmbedder
from services.core.settings import Choice, Declared, Env, Float, OptionalStr, SettingsError

OLLAMA_URL: Final = "http://127.0.0.1:11434"
_URL: Final = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
_MODEL: Final = re.compile(r"^[\w.:/@+\-]{1,200}$")

KIND: Final = Choice(
    "WALFEED_EMBEDDER", "local", ("local", "ollama", "openai", "off"),
    "`local` (the pinned all-MiniLM-L6-v2 int8 model, in process), `ollama`, `openai` (any OpenAI-compatible "
    "server) or `off`")
URL: Final = OptionalStr(
    "WALFEED_EMBEDDER_URL",
    "the server's base URL; the adapter posts to `/api/embed` or `/v1/embeddings` under it",
    allowed="`http://host[:port][/path]` or `https://...`",
    shown=f"`{OLLAMA_URL}` for ollama; required for openai")
MODEL: Final = OptionalStr(
    "WALFEED_EMBEDDER_MODEL",
    "the model the server is asked for; with `local` only the pinned model is accepted",
    allowed=f"`{_MODEL.pattern}`", shown=f"`{local.MODEL_ID}` for local; required otherwise")
TIMEOUT: Final = Float("WALFEED_EMBEDDER_TIMEOUT", 10.0, "seconds: longest wait for a server's answer to one batch",
                       minimum=0.1, maximum=600.0)
API_KEY: Final = OptionalStr("WALFEED_EMBEDDER_API_KEY", "bearer token sent to an openai server that wants one",
                             shown="none")
SETTINGS: Final[tuple[Declared, ...]] = (KIND, URL, MODEL, TIMEOUT, API_KEY)


@dataclass(frozen=True, slots=True)
class EmbedderSettings:
    kind: str = KIND.default
    url: str | None = None
    model: str = local.MODEL_ID
    timeout: float = TIMEOUT.default_value()
    api_key: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EmbedderSettings:
        env = Env(environ)
        kind = KIND.read(env)
        url, model, timeout, api_key = URL.read(env), MODEL.read(env), TIMEOUT.read(env), API_KEY.read(env)
        if url is not None and not _URL.match(url):
            raise SettingsError(f"{URL.name}={url!r} is invalid: expected http://host[:port][/path] or https://...")
        if model is not None and not _MODEL.match(model):
            raise SettingsError(f"{MODEL.name}={model!r} is invalid: it must match {_MODEL.pattern}")
        if kind == "local":
            if model not in (None, local.MODEL_ID):
                raise SettingsError(f"{MODEL.name}={model!r} is invalid with {KIND.name}=local: the local embedder "
                                    f"runs only {local.MODEL_ID}; unset it, or use ollama or openai")
            return cls(kind, None, local.MODEL_ID, timeout)
        if kind in ("ollama", "openai"):
            if model is None:
                raise SettingsError(f"{MODEL.name} is not set: {KIND.name}={kind} needs the name of the model to ask "
                                    "the server for")
            if url is None and kind == "openai":
                raise SettingsError(f"{URL.name} is not set: {KIND.name}=openai needs the server's base URL (the "
                                    "adapter posts to {url}/v1/embeddings)")
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
