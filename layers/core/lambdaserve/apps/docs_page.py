"""``/docs``: Swagger UI from local assets (the ``swagger-ui-bundle`` package), never a CDN.

Where the package is not installed (the Lambda images), there is no ``/docs``; the
OpenAPI document itself is always at ``/openapi.json``.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles


def install_docs(app: FastAPI) -> None:
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return
    app.mount("/docs/assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=app.title,
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon-32x32.png",
        )
