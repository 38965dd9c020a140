"""The committed OpenAPI document must match the one the code generates."""

import json
from pathlib import Path

from toolserver.cli import openapi_document

COMMITTED = Path(__file__).resolve().parents[1] / "openapi" / "openapi.json"


def test_openapi_is_current():
    generated = json.loads(json.dumps(openapi_document(), sort_keys=True))
    committed = json.loads(COMMITTED.read_text())
    assert generated == committed, "openapi/openapi.json is stale: run `toolserver openapi`"


def test_openapi_documents_the_contract_paths():
    paths = openapi_document()["paths"]
    for path in ["/v1/sessions", "/v1/sessions/{session_id}", "/v1/sessions/{session_id}/images",
                 "/v1/sessions/{session_id}/images/{key}", "/v1/sessions/{session_id}/texts", "/v1/tools",
                 "/v1/sessions/{session_id}/tools/{name}", "/v1/sessions/{session_id}/tool_calls",
                 "/healthz", "/readyz", "/metrics"]:
        assert path in paths, path
    create = paths["/v1/sessions"]["post"]["requestBody"]["content"]
    assert {"application/json", "multipart/form-data"} <= set(create)
