"""The HTTP API (docs/api.md): FastAPI app factory in `app.py`, process entrypoint in `main.py`."""
