"""HTTP service: the retriever behind ``POST /search`` (FastAPI + uvicorn)."""
