"""Reference agents (oracle, null, heuristic, llm) and the HTTP server that serves them.

Start one from Python with :func:`evaluator.reference.server.serve_in_thread`, from a shell
with ``python -m evaluator.reference --agent ... --app ... --protocol ... --port ...`` (no
Django needed), or with ``python manage.py serve_agent`` (same options).
"""
