"""The HTTP API (SPEC.md section 2): FastAPI app factory in `app.py`, process entrypoint in `main.py`."""
