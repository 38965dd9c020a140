"""Writes the resources server's example rows from real photos and runs each one through the server against a live
toolserver, as a rollout: a scripted policy zooms where the row says, reads the tool's image, answers, and the
rollout is verified (docs/nemo-gym.md). Run it in the NeMo Gym environment with toolserver's client importable:

    PYTHONPATH=. python integrations/nemo_gym/collect_examples.py http://127.0.0.1:8000

It writes data/example.jsonl and data/example_rollouts.jsonl; `gym dataset collate ... +mode=example_validation`
then writes data/example_metrics.json.
"""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

from fastapi.testclient import TestClient
from PIL import Image

HERE = Path(__file__).resolve().parent
SERVER = HERE / "resources_servers" / "toolserver_image_tools"
PHOTOS = HERE.parents[2] / "shared" / "data" / "photos"
SYSTEM = ("You answer questions about images. Use the image tools when a detail is too small to read; images are "
          "numbered by img_idx from 0, and boxes are integers from 0 to 1000. Call one tool a turn, then answer.")
# photo, question, the demonstrated zoom (PivotRL's expected action), the policy's zoom, the policy's answer.
ROWS = [
    ("LadyBird.jpg", "How many black spots can you count on the ladybird's back?",
     [330, 280, 700, 720], [340, 300, 690, 700], "Zoomed in: the ladybird's red back has several black spots."),
    ("TwoWings.jpg", "What colour are the wings' edges?",
     [200, 200, 800, 800], [220, 180, 780, 820], "The wings' edges are dark, framing the lighter panes."),
    ("Wood.jpg", "Does the wood's grain run vertically or horizontally at the centre?",
     [350, 350, 650, 650], [360, 340, 660, 640], "At the centre the grain runs vertically."),
    ("Altai_1080x1920.png", "What is at the top of the picture: sky, snow or rock?",
     [0, 0, 1000, 300], [0, 0, 1000, 320], "The top of the picture is sky."),
    ("LadyBird.jpg", "What is the leaf's colour at the bottom left corner?",
     [0, 700, 300, 1000], [600, 0, 1000, 300], "The leaf there is green."),  # the policy zooms elsewhere: 0
]


def photo_uri(name: str, side: int = 640) -> str:
    image = Image.open(PHOTOS / name).convert("RGB")
    image.thumbnail((side, side))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()


def function_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """toolserver's OpenAI chat tools as Responses API function tools."""
    return [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
             "parameters": t["function"]["parameters"], "strict": False} for t in tools]


def row(photo: str, question: str, expected: list[int], tools: list[dict[str, Any]]) -> dict[str, Any]:
    action = {"name": "image_zoom_in_tool", "arguments": {"bbox_2d": expected, "label": "the detail", "img_idx": 0}}
    return {
        "agent_ref": {"type": "responses_api_agents", "name": "toolserver_image_tools_simple_agent"},
        "responses_create_params": {"input": [
            {"role": "system", "type": "message", "content": SYSTEM},
            {"role": "user", "type": "message", "content": [
                {"type": "input_image", "image_url": photo_uri(photo), "detail": "auto"},
                {"type": "input_text", "text": question}]}],
            "tools": function_tools(tools)},
        "verifier": "image_tools_pivot",
        "expected_answer": json.dumps(action),
        "metadata": {"photo": photo, "licence": "GPL-2.0-or-later (../../shared/data/photos/LICENSES.md)"},
    }


def response(n: int, zoom: list[int], tool_output: str, answer: str) -> dict[str, Any]:
    call = {"type": "function_call", "call_id": f"call_{n}", "name": "image_zoom_in_tool", "id": f"fc_{n}",
            "status": "completed", "arguments": json.dumps({"bbox_2d": zoom, "label": "the detail", "img_idx": 0})}
    return {"id": f"resp_{n}", "created_at": 0, "model": "scripted-policy", "object": "response",
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
            "output": [call, {"type": "function_call_output", "call_id": f"call_{n}", "output": tool_output},
                       {"type": "message", "role": "assistant", "id": f"msg_{n}", "status": "completed",
                        "content": [{"type": "output_text", "text": answer, "annotations": []}]}]}


def main(url: str) -> None:
    sys.path[:0] = [str(HERE)]
    from nemo_gym.server_utils import ServerClient
    from resources_servers.toolserver_image_tools.app import ToolserverImageToolsConfig, ToolserverImageToolsServer

    from toolserver.client import Client

    with Client(url) as ts:
        tools = ts.list_tools("nemo-gym")
    config = ToolserverImageToolsConfig(host="127.0.0.1", port=0, entrypoint="", name="toolserver_image_tools",
                                        toolserver_url=url)
    app = ToolserverImageToolsServer(config=config, server_client=MagicMock(spec=ServerClient)).setup_webserver()
    rows, rollouts = [], []
    with TestClient(app) as client:
        for n, (photo, question, expected, zoom, answer) in enumerate(ROWS):
            rows.append(row(photo, question, expected, tools))
            client.cookies.clear()
            client.post("/seed_session", json=rows[-1]).raise_for_status()
            output = client.post("/image_zoom_in_tool", json={"bbox_2d": zoom, "label": "the detail", "img_idx": 0})
            output.raise_for_status()
            verified = client.post("/verify", json={**rows[-1], "response": response(n, zoom, output.text, answer)})
            verified.raise_for_status()
            rollouts.append(verified.json())
    data = SERVER / "data"
    (data / "example.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "example_rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rollouts))
    print([r["reward"] for r in rollouts])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000")
