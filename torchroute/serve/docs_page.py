"""``GET /docs`` of ``torchroute serve --docs``: the API as one self-contained HTML page.

FastAPI's own pages load Swagger UI or ReDoc scripts from a CDN; this page is rendered on
the server from the app's OpenAPI schema and holds no script at all (its
``Content-Security-Policy`` allows none), so a browser loads nothing from another host.
"""

from __future__ import annotations

import html
import json
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

#: nothing but the page itself and its inline style
POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def docs_html(schema: dict[str, Any]) -> str:
    """The page of an OpenAPI ``schema``: each path and method, its summary, its request
    body's schema (escaped JSON), and a link to ``/openapi.json``."""
    info = schema.get("info", {})
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(str(info.get('title', 'API')))}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "pre{background:#f4f4f4;padding:.5em;overflow:auto}</style></head><body>",
        f"<h1>{html.escape(str(info.get('title', 'API')))}</h1>",
        f"<p>{html.escape(str(info.get('summary', '')))}</p>",
        "<p>The schema: <a href='/openapi.json'>/openapi.json</a></p>",
    ]
    components = schema.get("components", {}).get("schemas", {})
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():
            parts.append(f"<h2>{html.escape(method.upper())} {html.escape(path)}</h2>")
            parts.append(f"<p>{html.escape(str(op.get('summary', '')))}</p>")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            ref = body.get("schema", {}).get("$ref", "")
            model = components.get(ref.rsplit("/", 1)[-1]) if ref else None
            if model is not None:
                text = json.dumps(model, indent=2)
                parts.append(f"<pre>{html.escape(text)}</pre>")
    parts.append("</body></html>")
    return "".join(parts)


def add_docs_page(app: FastAPI) -> None:
    """Add ``GET /docs`` (the page of :func:`docs_html` for ``app``) to ``app``."""

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        page = docs_html(app.openapi())
        return HTMLResponse(page, headers={"content-security-policy": POLICY})


def api_app(docs: bool, **kwargs: Any) -> FastAPI:
    """A FastAPI application that answers its API only: ``/openapi.json`` and ``/docs``
    (:func:`add_docs_page`) only when ``docs``, FastAPI's own pages never; ``kwargs`` go to
    :class:`fastapi.FastAPI` (``title``, ``lifespan``, ...)."""
    app = FastAPI(
        docs_url=None, redoc_url=None, openapi_url="/openapi.json" if docs else None, **kwargs
    )
    if docs:
        add_docs_page(app)
    return app
