"""Records tests/data/codedance_golden.json by running CodeDance's own code (CodeDance-VL/CodeDance @ 62f8c6f5) over
the sessions of tests/profiles/codedance_sessions.py:

- the turn as its rollout reads it (`verl/workers/rollout/sglang_rollout/sglang_rollout.py`,
  `_async_rollout_a_request`): sglang's function-call parser first, of the type `get_tool_call_parser_type` picks
  for Qwen2.5-VL's vocabulary under the sglang its install.sh pins (0.5.5.post3: the first parser whose tokens the
  vocabulary has, `glm`), the arguments through verl's `OpenAIFunctionCallSchema`, else its
  `_extract_python_code_from_response` (taken from that file as it is);
- each call through its `CodeExecuteTool` (`verl/tools/code_tool.py`, with `configs/tool_config.yaml`'s schema):
  `create` with the image as a dataset row holds it (`{"bytes": <PNG>, "path": None}`: `datasets` stores a PIL
  image nested in `extra_info.tools_kwargs` so, and `load_dataset("parquet")` hands that dict back), `execute`, its
  spawned worker processes, its texts and figure encoding;
- the `input_image.jpg` its `_save_image_in_main_process` writes for such rows: the input above and the RGBA, LA
  and palette inputs of tests/profiles/alpha_inputs.py;
- each image as its rollout's `add_tool_response_messages` takes it (`process_image`, qwen-vl-utils 0.0.14's
  `fetch_image`), and the tool turn as its chat template (`configs/multiturn_config.yaml`) renders it after the
  base history, through transformers' template renderer.

Stand-ins, and only these: empty `__init__` files for the `verl`, `verl.utils` and `verl.utils.dataset` packages
(theirs import the trainer); a `torchvision` holding only the names qwen-vl-utils imports (`io`,
`transforms.InterpolationMode`, `__version__`: it uses them for videos only; no CUDA-free build is on PyPI); the
framework's 300 s wait for a worker that does not answer is set to 30 s (its text unchanged).

    PYTHONPATH=<codedance>:<torchvision stand-in>:<qwen-vl-utils, partial_json_parser>:<sglang 0.5.5.post3 wheel> \\
        <toolserver venv python> scripts/goldens/record_codedance.py <codedance checkout> <out.json>
"""

from __future__ import annotations

import ast
import asyncio
import base64
import hashlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import verl.tools.code_tool as code_tool
import yaml
from PIL import Image
from verl.tools.schemas import OpenAIFunctionCallSchema, OpenAIFunctionParsedSchema, OpenAIFunctionToolSchema

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "profiles"))
from alpha_inputs import png
from codedance_sessions import SESSIONS, input_image

ALPHA_INPUTS = {"rgba": ("rgba", 301, 203, 2), "la": ("la", 301, 203, 3), "palette": ("palette", 301, 203, 4)}

# The tool's workers are spawned processes that import this module again: what only the rollout's side needs is
# imported in `main`.
FunctionCallParser: Any = None
Tool: Any = None
fetch_image: Any = None
render_jinja_template: Any = None

BASE = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "I am a user."}]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pixels_of(image: Image.Image) -> dict[str, Any]:
    return {"size": list(image.size), "mode": image.mode, "pixels_sha256": sha(image.tobytes())}


def row_image(data: bytes) -> dict[str, Any]:
    """An image as a parquet row of the reference's data holds it (what `datasets` makes of a nested PIL image)."""
    return {"bytes": data, "path": None}


def png_of(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def saved_input_files(tmp: Path) -> dict[str, Any]:
    """The `input_image.jpg` the tool's `create` writes for each input, read back as its code reads it."""
    inputs = {"rgb": png_of(input_image()), **{name: png(*spec) for name, spec in ALPHA_INPUTS.items()}}
    out = {}
    for name, data in inputs.items():
        path = code_tool._save_image_in_main_process(f"file-{name}", row_image(data), str(tmp / name))
        out[name] = {"png_sha256": sha(data), **pixels_of(Image.open(path))}
    return out


def rollout_function(root: Path, name: str) -> Any:
    """A method of the rollout class, taken from its file as it is and compiled on its own."""
    source = (root / "verl/workers/rollout/sglang_rollout/sglang_rollout.py").read_text()
    tree = ast.parse(source)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"re": __import__("re"), "Optional": Any}
    exec(compile(ast.Module([node], []), "sglang_rollout.py", "exec"), namespace)
    return namespace[name]


def turn_limit_text(root: Path) -> str:
    source = (root / "verl/workers/rollout/sglang_rollout/sglang_rollout.py").read_text()
    return next(n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)
                and isinstance(n.value, str) and n.value.startswith("Turn limit reached."))


class Rollout:
    def __init__(self, root: Path):
        config = yaml.safe_load((root / "configs/tool_config.yaml").read_text())["tools"][0]
        self.schema = OpenAIFunctionToolSchema.model_validate(config["tool_schema"])
        self.tool = code_tool.CodeExecuteTool(config={"max_workers": 1, **config["config"]}, tool_schema=self.schema)
        template = yaml.safe_load((root / "configs/multiturn_config.yaml").read_text())
        self.template = template["actor_rollout_ref"]["model"]["custom_chat_template"]
        self.parser = FunctionCallParser([Tool.model_validate(self.schema.model_dump())], "glm")
        self.extract = rollout_function(root, "_extract_python_code_from_response")

    def calls(self, content: str) -> list[dict[str, Any]] | None:
        """The calls of a turn, as the rollout finds them; None when the turn ends the rollout."""
        if self.parser.has_tool_call(content):
            try:
                _, parsed = self.parser.parse_non_stream(content)
            except (json.JSONDecodeError, AttributeError):
                parsed = []
            calls = []
            for item in parsed:
                function, error = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
                    OpenAIFunctionParsedSchema(name=item.name, arguments=item.parameters))
                if not error:
                    calls.append({"name": function.name, "arguments": function.arguments})
            return calls or None
        python_code = self.extract(None, content)
        return [{"name": "execute_python_code", "arguments": {"code": python_code}}] if python_code else None

    def rendered(self, messages: list[dict[str, Any]]) -> str:
        tools = [self.schema.model_dump()]
        full = render_jinja_template(conversations=[BASE + messages], tools=tools, chat_template=self.template,
                                     add_generation_prompt=False)[0][0]
        base = render_jinja_template(conversations=[BASE], tools=tools, chat_template=self.template,
                                     add_generation_prompt=False)[0][0]
        assert full.startswith(base)
        return full[len(base):]


def record_message(content: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A tool response as the rollout appends it: its chat message, and what each of its parts is."""
    chat, parts = [], []
    for item in content:
        if item.get("type") == "text":
            chat.append({"type": "text", "text": item["text"]})
            parts.append({"text": item["text"]})
        elif item.get("type") == "image":
            prefix, data = item["image"].split(",", 1)
            raw = base64.b64decode(data)
            seen = code_tool.process_image({"image": item["image"]})
            assert pixels_of(seen) == pixels_of(fetch_image({"image": item["image"]}, image_patch_size=14))
            chat.append({"type": "image"})
            parts.append({"image": {"prefix": prefix + ",", "bytes_sha256": sha(raw),
                                    **pixels_of(Image.open(io.BytesIO(raw)))}, "model_view": pixels_of(seen)})
    return {"role": "tool", "content": chat}, parts


async def run_session(rollout: Rollout, name: str, with_image: bool, turns: list[str]) -> dict[str, Any]:
    request_id = f"session-{name}"
    if with_image:
        await rollout.tool.create(request_id, image=row_image(png_of(input_image())))
    else:
        await rollout.tool.create(request_id)
    recorded = []
    try:
        for content in turns:
            calls = rollout.calls(content)
            if calls is None:
                recorded.append({"action": content, "done": True})
                break
            results = await asyncio.gather(*[rollout.tool.execute(request_id, call["arguments"]) for call in calls])
            messages, parts, rewards = [], [], []
            for response, reward, _ in results:
                message, message_parts = record_message(response["content"])
                messages.append(message)
                parts.append(message_parts)
                rewards.append(reward)
            recorded.append({"action": content, "done": False, "calls": calls, "responses": parts,
                             "rewards": rewards, "appended": rollout.rendered(messages)})
    finally:
        await rollout.tool.release(request_id)
    return {"name": name, "with_image": with_image, "turns": recorded}


async def record_all(root: Path) -> tuple[list[dict[str, Any]], str]:
    rollout = Rollout(root)
    limit_message = {"role": "tool", "content": [{"type": "text", "text": turn_limit_text(root)}]}
    try:
        sessions = [await run_session(rollout, name, with_image, turns)
                    for name, (with_image, turns) in SESSIONS.items()]
        return sessions, rollout.rendered([limit_message])
    finally:
        for worker in rollout.tool.workers:
            worker.kill()


def main() -> None:
    global FunctionCallParser, Tool, fetch_image, render_jinja_template
    from qwen_vl_utils import fetch_image
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from transformers.utils.chat_template_utils import render_jinja_template

    root = Path(sys.argv[1])
    code_tool.FRAMEWORK_COMM_TIMEOUT = 30
    loop = asyncio.new_event_loop()  # not asyncio.run: its executor's reader thread never returns from its queue
    sessions, limit_appended = loop.run_until_complete(record_all(root))
    out = {"source": "github CodeDance-VL/CodeDance@62f8c6f5: CodeExecuteTool (verl/tools/code_tool.py, "
                     "configs/tool_config.yaml) driven as its sglang rollout drives it, with sglang 0.5.5.post3's "
                     "function-call parser, qwen-vl-utils 0.0.14 and its chat template (configs/multiturn_config.yaml)",
           "produced_by": f"Python {sys.version.split()[0]}, Pillow {Image.__version__}, numpy "
                          f"{__import__('numpy').__version__}, matplotlib {__import__('matplotlib').__version__}, "
                          f"opencv {__import__('cv2').__version__}; the framework's worker wait set to 30 s",
           "input_image": pixels_of(input_image()),
           "row_form": "bytes",
           "input_files": saved_input_files(Path(tempfile.mkdtemp())),
           "turn_limit": {"text": turn_limit_text(root), "appended": limit_appended},
           "sessions": sessions}
    Path(sys.argv[2]).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    os._exit(0)


if __name__ == "__main__":
    main()
