"""Records tests/data/nemo_gym_golden.json by running NeMo Gym's own image-tools agent (NVIDIA-NeMo/Gym @ 07d6b0d0:
`ImageToolsAgent._run_image_tools_loop` of `responses_api_agents/image_tools_agent/app.py`, with the tool logic of
`resources_servers/image_tools/base.py`) under its shipped config (`configs/image_tools_agent.yaml`) over the
sessions of tests/profiles/nemo_gym_sessions.py.

Stubbed, and only that: the model server (the agent's `server_client.post` answers each `/v1/responses` with the
session's next assistant turn, as the agent's own tests do), and the crop directory (a temporary folder).

Run with NeMo Gym's checkout at that commit as the working directory and its environment's Python:
    cd <gym checkout> && <gym python> <toolserver>/scripts/goldens/record_nemo_gym.py <out.json>
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import yaml
from PIL import Image

sys.path.insert(0, ".")
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "tests" / "profiles"))

from nemo_gym.config_types import ModelServerRef, ResourcesServerRef
from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.server_utils import ServerClient
from nemo_gym_sessions import IMAGES, PARSE_TEXTS, SESSIONS
from resources_servers.image_tools import has_malformed_image_tool_markup, parse_image_tool_calls
from responses_api_agents.image_tools_agent.app import ImageToolsAgent, ImageToolsAgentConfig

CONFIG = "responses_api_agents/image_tools_agent/configs/image_tools_agent.yaml"
EXAMPLE = "resources_servers/image_tools/data/example.jsonl"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pixels_of(image: Image.Image) -> dict[str, Any]:
    return {"size": list(image.size), "mode": image.mode, "pixels_sha256": sha(image.tobytes())}


def png_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def shown(url: str) -> dict[str, Any]:
    """An image part the agent sends the model: its data URL's prefix and bytes, and the pixels they decode to."""
    prefix, data = url.split(",", 1)
    raw = base64.b64decode(data)
    return {"prefix": prefix + ",", "bytes_sha256": sha(raw), **pixels_of(Image.open(io.BytesIO(raw)).convert("RGB"))}


class Model:
    """The stubbed model server: the session's turns, one per `/v1/responses`."""

    def __init__(self, turns: list[str]):
        self.turns, self.calls = list(turns), 0

    async def post(self, *, server_name: str, url_path: str, **kwargs: Any) -> Any:
        assert url_path == "/v1/responses", url_path
        text = self.turns[self.calls]
        self.calls += 1
        payload = {"id": f"r{self.calls}", "created_at": 1, "model": "m", "object": "response", "output": [
            {"id": f"m{self.calls}", "content": [{"annotations": [], "text": text, "type": "output_text"}],
             "role": "assistant", "status": "completed", "type": "message"}],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
        response = MagicMock()
        response.ok, response.cookies = True, {}
        response.read = AsyncMock(return_value=json.dumps(payload).encode())
        return response


def agent(crop_dir: str, model: Model) -> ImageToolsAgent:
    settings = yaml.safe_load(Path(CONFIG).read_text())["image_tools_simple_agent"]["responses_api_agents"][
        "image_tools_agent"]
    settings.update(crop_dir=crop_dir, host="localhost", port=1, name="image_tools_simple_agent",
                    model_server=ModelServerRef(**settings["model_server"]),
                    resource_servers_by_agent={k: ResourcesServerRef(**v)
                                               for k, v in settings["resource_servers_by_agent"].items()})
    client = MagicMock(spec=ServerClient)
    client.post = AsyncMock(side_effect=model.post)
    return ImageToolsAgent(config=ImageToolsAgentConfig(**settings), server_client=client)


def record(name: str, inputs: list[str], turns: list[str], crop_dir: str) -> dict[str, Any]:
    model = Model(turns)
    runner = agent(crop_dir, model)
    steps: list[dict[str, Any]] = []
    logic = runner._logic
    turn_of = logic.process_nonterminal_turn

    def spy(message_log: list[dict[str, Any]], metadata: dict[str, Any]) -> Any:
        out = turn_of(message_log, metadata)
        observation, reward, done, _, next_metadata, _, _ = out
        steps.append({"reward": reward, "done": done, "observation": observation,
                      "tool_call_count": (next_metadata or metadata).get("tool_call_count", 0),
                      "force_final_next": bool((next_metadata or {}).get("force_final_next", False))})
        return out

    logic.process_nonterminal_turn = spy  # type: ignore[method-assign]
    images = [IMAGES[key]() for key in inputs]
    content: list[dict[str, Any]] = [{"type": "input_text", "text": "How many?"}]
    content += [{"type": "input_image", "image_url": png_url(image), "detail": "auto"} for image in images]
    body = NeMoGymResponseCreateParamsNonStreaming(input=[{"role": "user", "content": content}])
    response, _, info = asyncio.run(runner._run_image_tools_loop(body=body, row_metadata={}, initial_cookies={}))
    outputs = [item if isinstance(item, dict) else item.model_dump() for item in response.output]
    appended = [item for item in outputs if item.get("role") == "user"]
    saved = iter(info["image_tools_output_paths"])
    recorded_turns = []
    for i, step in enumerate(steps):
        turn: dict[str, Any] = {"action": turns[i], "reward": step["reward"], "done": step["done"],
                                "tool_call_count": step["tool_call_count"],
                                "force_final_next": step["force_final_next"]}
        observation = step["observation"]
        ended = i == len(steps) - 1 and len(appended) < len(steps)
        if ended:
            turn["ended"] = True
            turn["dropped_observation"] = observation.get("content")
        else:
            turn["appended"] = _appended(appended[i]["content"], saved)
        recorded_turns.append(turn)
    return {"name": name, "inputs": [{"key": key, **pixels_of(image)} for key, image in zip(inputs, images,
                                                                                            strict=True)],
            "model_calls": model.calls, "turns": recorded_turns, "aux_reward": info["image_tools_aux_reward"],
            "call_count": info["image_tools_call_count"], "error_count": info["image_tools_error_count"]}


def _appended(content: Any, saved: Any) -> Any:
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part["type"] == "input_text":
            parts.append({"text": part["text"]})
        else:
            stored = Image.open(next(saved)).convert("RGB")
            parts.append({"image": shown(part["image_url"]), "stored": pixels_of(stored)})
    return parts


def main() -> None:
    out = {"source": "github NVIDIA-NeMo/Gym@07d6b0d07 (added in 4a582181, PR #2624): ImageToolsAgent."
                     "_run_image_tools_loop with resources_servers/image_tools/base.py, config "
                     "configs/image_tools_agent.yaml; only the model server (scripted turns) and the crop "
                     "directory (a temporary folder) stubbed",
           "produced_by": f"Python {sys.version.split()[0]}, Pillow {Image.__version__}, numpy "
                          f"{__import__('numpy').__version__}, scipy {__import__('scipy').__version__}",
           "system_prompt": json.loads(Path(EXAMPLE).read_text().splitlines()[0])["responses_create_params"][
               "input"][0]["content"],
           "parsing": [{"text": text, "calls": [[c["name"], c["arguments"], c["source"]]
                                                for c in parse_image_tool_calls(text)],
                        "malformed": has_malformed_image_tool_markup(text)} for text in PARSE_TEXTS],
           "sessions": []}
    with tempfile.TemporaryDirectory() as crop_dir:
        for name, (inputs, turns) in SESSIONS.items():
            out["sessions"].append(record(name, inputs, turns, crop_dir))
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
