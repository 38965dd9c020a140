"""With API keys, a session belongs to the key that created it: another key gets 404 for it and does not list it;
an operator key sees every session; without keys nothing changes. Both stores."""

from fastapi.testclient import TestClient

from tests.conftest import b64, gradient, png_bytes
from toolserver.api import create_app

A, B, OPERATOR = "team-a-key", "team-b-key", "operator-key"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_sessions_belong_to_the_key_that_created_them(settings_any_store):
    settings = settings_any_store.model_copy(update={"api_keys": [A, B], "operator_keys": [OPERATOR],
                                                     "session_list": "on"})
    with TestClient(create_app(settings)) as c:
        made = c.post("/v1/sessions", headers=auth(A),
                      json={"images": [{"data": b64(png_bytes(gradient(80, 60)))}], "texts": {"t": "hi"}})
        assert made.status_code == 201
        sid = made.json()["session_id"]
        other = c.post("/v1/sessions", headers=auth(B), json={}).json()["session_id"]
        call = {"image": 0, "bbox_2d": [0, 0, 500, 500]}
        for method, path, body in (("GET", f"/v1/sessions/{sid}", None), ("GET", f"/v1/sessions/{sid}/images/0", None),
                                   ("GET", f"/v1/sessions/{sid}/trajectory", None),
                                   ("POST", f"/v1/sessions/{sid}/tools/zoom_in", call),
                                   ("POST", f"/v1/sessions/{sid}/texts", {"texts": ["x"]}),
                                   ("DELETE", f"/v1/sessions/{sid}", None)):
            r = c.request(method, path, headers=auth(B), json=body)
            assert r.status_code == 404 and r.json()["code"] == "unknown_session", (method, path, r.text)
        assert c.post(f"/v1/sessions/{sid}/tools/zoom_in", headers=auth(A), json=call).json()["ok"]
        listed = {key: [s["session_id"] for s in c.get("/v1/sessions", headers=auth(key)).json()["sessions"]]
                  for key in (A, B, OPERATOR)}
        assert listed[A] == [sid] and listed[B] == [other] and set(listed[OPERATOR]) == {sid, other}
        assert c.get(f"/v1/sessions/{sid}", headers=auth(OPERATOR)).status_code == 200
        assert c.get(f"/v1/sessions/{sid}", headers=auth("nope")).status_code == 401
        assert c.delete(f"/v1/sessions/{sid}", headers=auth(A)).status_code == 204


def test_without_keys_every_session_is_reachable(client):
    sid = client.post("/v1/sessions", json={}).json()["session_id"]
    assert client.get(f"/v1/sessions/{sid}").status_code == 200
