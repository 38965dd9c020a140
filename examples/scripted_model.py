"""A scripted stand-in for an OpenAI-compatible chat endpoint, so the rollout example runs without a model.

`POST /v1/chat/completions` answers from a script chosen by the request's `model` name (`scripted-<format>`),
one step per assistant turn already in the conversation. There is a script for every format `rollout.py` offers:
each calls tools in that system's own syntax, many also send one malformed call (to show the model-readable error
that comes back instead of a silent drop), and each ends with an `<answer>`. Answers are built with the `openai`
package's own `ChatCompletion` type.

    python examples/scripted_model.py --port 8001
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException
from openai.types.chat import ChatCompletion


def _hermes(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _xml(name: str, **parameters: Any) -> str:
    """A Qwen3-Coder XML call (NeMo Gym): each parameter's value as JSON."""
    body = "".join(f"<parameter={key}>\n{json.dumps(value)}\n</parameter>\n" for key, value in parameters.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def _code(code: str) -> str:
    return f"<code>\n```python\n{code}\n```\n</code>"


def _tool_call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function", "function": {"name": name, "arguments": text}}


# Python that prints the image's size and shows a crop of it (the code formats).
SHOW = "import matplotlib.pyplot as plt\nprint({image}.size)\nplt.imshow({image}.crop((0, 0, 200, 200)))\nplt.show()"
ANSWER = "<answer>I have looked closely; the detail is visible in the zoomed image.</answer>"

# format -> steps; a step is assistant text, or a list of OpenAI tool calls (openai format only).
SCRIPTS: dict[str, list[Any]] = {
    "openai": [
        [_tool_call("zoom_in", {"image": "original_image", "bbox_2d": [100, 100, 600, 500], "label": "sign"}),
         _tool_call("keypoint_zoom", {"image": "original_image", "keypoint": [500, 500]})],
        [_tool_call("zoom_in", '{"image": "original_image", "bbox_2d": [100, 100'),  # malformed JSON
         _tool_call("lookback_reuse", {"image": "observation_1", "reason": "check the sign again"})],
        ANSWER,
    ],
    "hermes": [
        "<think>The sign is small.</think>" + _hermes("zoom_in", {"image": "original_image",
                                                                  "bbox_2d": [200, 200, 700, 600]}),
        "<think>Let me also check the corner.</think><tool_call>{\"name\": \"zoom_in\", \"arguments\": {</tool_call>",
        _hermes("zoom_in", {"image": "observation_1", "bbox_2d": [0, 0, 500, 500]}),
        ANSWER,
    ],
    "groundlight": [
        "<think>I should look at the middle.</think>\n<tool>\nname: zoom\nkeypoint: [400, 300]\n</tool>",
        "<think>Again, closer.</think>\n<tool>\nname: zoom\nkeypoint: [400.5, 300]\n</tool>",
        "<think>Now I can see it.</think>\n" + ANSWER,
    ],
    "mags-rl": [
        "<think>Two regions matter. <zoom>[[40, 40, 200, 160], [250, 120, 400, 260]]</zoom></think>",
        "<think>Enough detail.</think>" + ANSWER,
    ],
    "mgpo": [
        'The object is here:\n```json\n[{"bbox_2d": [60, 60, 420, 360], "label": "the sign"}]\n```',
        ANSWER,
    ],
    "mini-o3": [  # 0-1 boxes; an observation is addressed by its number
        '<think>Zoom on the left part.</think><grounding>{"bbox_2d": [0, 0.1, 0.5, 0.9], '
        '"source": "original_image"}</grounding>',
        "<think>Something went wrong.</think><grounding>{bbox_2d: oops}</grounding>",
        '<grounding>{"bbox_2d": [0.2, 0, 0.8, 0.5], "source": "observation_1"}</grounding>',
        ANSWER,
    ],
    "deepeyes": [  # pixel boxes on the original; a turn of two calls, then one whose box is inverted
        "<think>Two places to check.</think>"
        + _hermes("image_zoom_in_tool", {"bbox_2d": [100, 100, 500, 400], "label": "sign"})
        + _hermes("image_zoom_in_tool", {"bbox_2d": [10, 10, 20, 20], "label": "corner"}),
        "<think>Closer.</think>" + _hermes("image_zoom_in_tool", {"bbox_2d": [400, 300, 100, 100]}),
        ANSWER,
    ],
    "pixel-reasoner": [  # images numbered from 1; the second call names an image that does not exist
        "<think>Crop the middle.</think>"
        + _hermes("crop_image", {"bbox_2d": [0.25, 0.25, 0.75, 0.75], "target_image": 1}),
        _hermes("crop_image", {"bbox_2d": [0.1, 0.1, 0.4, 0.4], "target_image": 9}),
        _hermes("crop_image", {"bbox_2d": [0.1, 0.1, 0.4, 0.4], "target_image": 2}),
        ANSWER,
    ],
    "qwen-agent": [  # Qwen3-VL's zoom: 0-1000 boxes on the image numbered by img_idx; a label is required
        "<think>Zoom on the sign.</think>\n"
        + _hermes("image_zoom_in_tool", {"img_idx": 0, "bbox_2d": [200, 200, 700, 600], "label": "sign"}),
        "<think>And the corner, forgetting the label.</think>\n"
        + _hermes("image_zoom_in_tool", {"img_idx": 0, "bbox_2d": [0, 0, 500, 500]}),
        ANSWER,
    ],
    "nemo-gym": [  # Qwen3-Coder XML calls, one a turn; its episode ends at a turn without a call
        "I will look closer.\n" + _xml("image_zoom_in_tool", label="sign", img_idx=0, bbox_2d=[200, 200, 700, 600]),
        "I can read it now. " + ANSWER,
    ],
    "pyvision-rl": [  # Python in <code>; the image is image_clue_0, plt.show() returns the figure
        _code(SHOW.format(image="image_clue_0")),
        "<think>The figure shows it.</think>" + ANSWER,
    ],
    "deepeyes-v2": [  # Python in <code>; the image is image_1, plt.show() returns the figure
        "<think>Let me crop.</think>\n" + _code(SHOW.format(image="image_1")),
        "<think>Now I see it.</think>" + ANSWER,
    ],
    "thyme": [  # Python in <code>; the image's file is image_path, an image saved and printed is shown
        "<think>Let me look closer.</think>\n" + _code(
            "from PIL import Image\nimage = Image.open(image_path)\ncropped = image.crop((0, 0, 200, 200))\n"
            "processed_path = '/mnt/data/temp_processed_images/crop.png'\ncropped.save(processed_path)\n"
            "print(processed_path)"),
        "<think>Now I see it.</think>" + ANSWER,
    ],
    "chain-of-focus": [  # pixel boxes on the image as the model was shown it
        "<think>Let me zoom in.</think>\n"
        + _hermes("image_zoom_in_tool", {"bbox_2d": [100, 120, 400, 380], "label": "sign"}),
        "<think>Now I see it.</think>" + ANSWER,
    ],
    "visionthink": [  # the image is first shown downsampled; resize_image asks for it at twice that size
        "<think>The text is too small to read.</think>\n" + _hermes("resize_image", {"action": "resize"}),
        "<think>Now I can read it.</think>" + ANSWER,
    ],
    "codedance": [  # a python fence; the image is input_image, plt.show() returns the figure
        "Let me look closer.\n" + _code(SHOW.format(image="input_image")),
        ANSWER,
    ],
    "vrag": [  # VRAG-RL: search the document library for a page, then crop it (pixels of the page as shown)
        "<think>I need the page about the wings.</think><search>dragonfly wings</search>",
        "<think>Zoom on the part that matters.</think><bbox>[10, 10, 200, 150]</bbox>",
        ANSWER,
    ],
    "mmsearch-r1": [  # MMSearch-R1: an image search of the row (answered from the server's search cache, which
        # needs SEARCH_CACHE and the session texts `search_key` and `prompt`: without them, an error it reads)
        "<reason>I cannot tell which insect this is.</reason><search><img></search>",
        ANSWER,
    ],
}


def completion(model: str, step: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": step if isinstance(step, str) else None}
    if not isinstance(step, str):
        message["tool_calls"] = step
    body = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message,
                                         "finish_reason": "stop" if isinstance(step, str) else "tool_calls"}]}
    return ChatCompletion.model_validate(body).model_dump(exclude_none=True)


def create_app() -> FastAPI:
    app = FastAPI(title="scripted model")

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> dict[str, Any]:
        model = str(body.get("model", ""))
        script = SCRIPTS.get(model.removeprefix("scripted-"))
        if script is None:
            raise HTTPException(404, f"unknown model {model!r}; models: {[f'scripted-{k}' for k in SCRIPTS]}")
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        return completion(model, script[min(turn, len(script) - 1)])

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args()
    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
