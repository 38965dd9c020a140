"""Thyme's turns in the sandbox: what its trainer's `process_round` (yfzhang114/Thyme @ b9285b7a,
`swift/trainers/rlhf_trainer/grpo_trainer.py`) does around each call of its executor (`thyme_exec.execute`), in a
stateful worker per session:

- the session's input images (`options["inputs"]`: the name each is bound to, and its key) are files,
  `thyme/user_images/<key>.png` in the worker's directory (`/tmp` at the `namespaces` level,
  `/proc/self/cwd` at `restricted`); the user turn names them under `options["user_images"]`
  (`/mnt/data/user_images/`), which the code's text is rewritten to (as the reference rewrites
  `/mnt/data/temp_processed_images/`); `image_path` holds the first one's real path;
- each call writes to a directory of its own, `<key>_0_rnd<call>_0` (the trainer's `<stem>_<rank>_rnd<round>_<idx>`,
  fresh: the trainer's are reused across steps, so old images changed its glob counts);
- what the call leaves is carried to the next as the trainer carries it (`thyme_exec.carry`);
- the observation between `<sandbox_output>` and `</sandbox_output>`, as the trainer writes it: `<image>` per
  output image while the trajectory holds at most 10 images, else the invalid-aspect-ratio text, the printed
  text, the error, or `No output captured.`; paths are looked up in the sandbox's own files (the trainer looks
  on its host, where a printed host path showed any image there).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from PIL import Image

from toolserver.sandbox.child import capped, collect, in_raw_mode, workdir
from toolserver.sandbox.programs import thyme_exec

if TYPE_CHECKING:
    from toolserver.sandbox.child import Cells, Request

MAX_HELD = 10  # the trainer appends an image while the trajectory holds at most this many
MAX_ASPECT_RATIO = 200


def run_cell(code: str, request: Request, cells: Cells) -> tuple[str | None, dict[str, Any]]:
    state, options = cells.state, request.options
    if not state:
        inputs = [(cells.namespace.get(name), key) for name, key in options.get("inputs", [])]
        _start(state, inputs, str(options.get("key", "image")))
    state["round"] += 1
    out_dir = os.path.join(state["base"], f"{state['key']}_0_rnd{state['round']}_0")
    os.makedirs(out_dir, exist_ok=True)
    if options.get("user_images"):
        code = code.replace(str(options["user_images"]), state["input_dir"] + "/")
    outcome = thyme_exec.execute(code, state["image_path"], out_dir, state["key"], state["previous"],
                                 timeout_s=float(options.get("timeout_s", 10.0)))
    state["previous"] = thyme_exec.carry(outcome.context)
    held = int(options.get("images_held", 0))
    observation = _observation(outcome, cells, held, state["key"])
    return None, {"observation": capped(observation, request.max_output_bytes, "output")}


def _start(state: dict[str, Any], inputs: list[tuple[Any, str]], key: str) -> None:
    """The worker's files: the input images saved as files, `image_path` the first one's (none: the trainer's
    placeholder path, which does not exist)."""
    state.update(round=0, key=key, previous=None, base=os.path.join(workdir(), "thyme"))
    state["input_dir"] = os.path.join(state["base"], "user_images")
    os.makedirs(state["input_dir"], exist_ok=True)
    state["image_path"] = os.path.join(state["input_dir"], f"{key}.png")
    for image, name in inputs:
        if isinstance(image, Image.Image):
            image.save(os.path.join(state["input_dir"], f"{name}.png"), format="PNG")


def _observation(outcome: thyme_exec.Outcome, cells: Cells, held: int, key: str) -> str:
    """What the trainer writes between `<sandbox_output>` and `</sandbox_output>`; the images it appends join
    the cell's results, in order."""
    paths = outcome.paths
    if not paths:
        return outcome.error if outcome.error is not None else f"Sandbox for {key}: No output captured."
    if not os.path.exists(paths[0]):
        return paths[0]  # printed text
    existing = [path for path in paths if os.path.exists(path)]
    if not all(_aspect_ratio_ok(path) for path in existing):
        return f"Sandbox for {key}: The Generated img has invalid aspect_ratio"
    text = ""
    for path in existing:
        if held > MAX_HELD:
            break
        with Image.open(path) as image:
            pixels = in_raw_mode(image)
            pixels.load()
        kept = len(cells.current.images)
        collect(cells.current, {"kind": "image", "format": "raw", "mode": pixels.mode, "size": list(pixels.size),
                                "data": pixels.tobytes()}, pixels.size)
        if len(cells.current.images) > kept:  # not over the sandbox's image limits
            text += "<image>"
            held += 1
    return text


def _aspect_ratio_ok(path: str) -> bool:
    try:
        with Image.open(path) as image:
            width, height = image.size
            return max(width, height) / min(width, height) <= MAX_ASPECT_RATIO
    except Exception:
        return False
