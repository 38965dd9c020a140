"""Call formats through `/act`: parse errors of any format come back as tool results and observations."""


def test_act_reports_parse_errors_as_results(client):
    from tests.conftest import b64, gradient, png_bytes
    sid = client.post("/v1/sessions", json={"images": [{"data": b64(png_bytes(gradient(50, 50)))}]}).json()["session_id"]
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": "<tool_call>{broken</tool_call>"}).json()
    assert r["calls"][0]["error"].startswith("Error: tool call 1 is not valid JSON")
    assert r["results"][0]["ok"] is False and r["results"][0]["error"]["code"] == "parse_error"
    assert r["observation"] == [{"role": "tool", "content": r["results"][0]["text"]}]
    mini = client.post(f"/v1/sessions/{sid}/act", json={"format": "mini-o3", "text": '<grounding>{"bbox_2d": '
                       '[0, 0, 500, 500], "source": "original_image"}</grounding>'}).json()
    assert mini["results"][0]["ok"] and mini["results"][0]["images"][0]["width"] == 28  # 25 px grows to 28
