"""PyVision-RL's extraction against the values its own `extract_answer` / `extract_code` gave (recorded by running
the reference at 62ca599d: tests/data/pyvision_rl_extraction.json)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, png_bytes
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.profiles.pyvision_rl import NO_CODE, PyVisionFormat, extract_answer, extract_code

PYVISION_RL = PyVisionFormat()

CASES = json.loads((Path(__file__).parents[1] / "data" / "pyvision_rl_extraction.json").read_text())["extraction"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_extraction_is_the_reference_s(case):
    assert extract_answer(case["action"]) == case["extract_answer"]
    assert extract_code(case["action"]) == case["extract_code"]


def test_a_turn_is_an_answer_a_code_call_or_the_environment_s_error():
    answered = PYVISION_RL.parse("<code>\n```python\nprint(7)\n```\n</code>\n<answer>\\boxed{A}</answer>")
    assert answered.done and not answered.calls
    coded = PYVISION_RL.parse("<answer></answer><code>\n```python\nprint(1)\n```\n</code>")
    assert coded.done is False and [(c.name, c.arguments) for c in coded.calls] == [("python", {"code": "print(1)"})]
    nothing = PYVISION_RL.parse("<code>\n```python\n```\n</code>")
    assert nothing.notices == [NO_CODE] and nothing.done is False


# -- whole sessions through /act, against the reference's own observations (tests/data/pyvision_rl_sessions.json)

SESSIONS = {s["name"]: s for s in json.loads((Path(__file__).parents[1] / "data" / "pyvision_rl_sessions.json")
                                              .read_text())["sessions"]}
SEEDS = {"basic_one_image": [(300, 200, 1)], "output_shapes": [(64, 48, 2)], "forbidden_regex": [(32, 32, 6)],
         "no_input_image": []}


def golden_image(width: int, height: int, seed: int) -> Image.Image:
    """The reference run's input images: a gradient in red and green, noise in blue."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([(x * 255 // max(width - 1, 1)), (y * 255 // max(height - 1, 1)),
                       rng.integers(0, 256, size=(height, width))], axis=-1).astype(np.uint8)
    return Image.fromarray(pixels, "RGB")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), sr_model_dir=tmp_path_factory.mktemp("none"))
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.mark.parametrize("name", ["basic_one_image", "output_shapes", "forbidden_regex"])
def test_a_session_answers_as_the_reference_did(client, name):
    session = SESSIONS[name]
    images = [golden_image(*spec) for spec in SEEDS[name]]
    for image, recorded in zip(images, session["input_images"], strict=True):
        assert hashlib.sha256(image.tobytes()).hexdigest() == recorded["pixel_sha256"]
    body = {"profile": "pyvision-rl", "images": [{"data": b64(png_bytes(image))} for image in images]}
    sid = client.post("/v1/sessions", json=body).json()["session_id"]
    for turn in session["turns"]:
        answer = client.post(f"/v1/sessions/{sid}/act", json={"text": turn["action"]}).json()
        assert answer["done"] == turn["done"], turn["action"]
        if turn["done"]:
            assert answer["prompt"] == ""
            continue
        assert answer["prompt"] == turn["appended"]["obs_text_vllm"], turn["action"]
        shown = [(image["width"], image["height"]) for result in answer["results"] for image in result["images"]]
        assert shown == [tuple(image["size"]) for image in turn["appended"].get("images_to_vllm", [])]


def test_several_input_images_are_image_clue_0_1_in_order(client):
    """A deviation (docs/decisions.md): the reference binds every input to `image_clue_0`, the last winning."""
    images = [golden_image(120, 80, 3), golden_image(90, 60, 4)]
    body = {"profile": "pyvision-rl", "images": [{"data": b64(png_bytes(image))} for image in images]}
    sid = client.post("/v1/sessions", json=body).json()["session_id"]
    code = "<code>\n```python\nprint(image_clue_0.size, image_clue_1.size, len(_captured_figures))\n```\n</code>"
    answer = client.post(f"/v1/sessions/{sid}/act", json={"text": code}).json()
    assert "Text Result:\n(120, 80) (90, 60) 2</interpreter>" in answer["prompt"]


def test_a_timeout_ends_the_worker_and_the_next_turn_starts_afresh(client, monkeypatch):
    """A deviation: the reference leaves the timed-out code running and reads its late result as the next turn's."""
    import toolserver.profiles.pyvision_rl as env

    monkeypatch.setattr(env, "TIMEOUT_S", 1.0)
    sid = client.post("/v1/sessions", json={"profile": "pyvision-rl"}).json()["session_id"]

    def turn(code: str) -> str:
        text = f"<code>\n```python\n{code}\n```\n</code>"
        return client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()["prompt"]

    assert "Text Result:\n1</interpreter>" in turn("x = 1\nprint(x)")
    assert "<interpreter>Execution error: Execution timeout</interpreter>" in turn("while True:\n    pass")
    assert "<interpreter>Execution error: name 'x' is not defined</interpreter>" in turn("print(x)")


def test_a_cell_s_printed_text_passes_whole_as_in_the_reference(client):
    """Its worker reads stdout from a `StringIO`, whole: 34 kB of prints come back unchanged (the sandbox's own
    default would cut them at 20,000 bytes); past 1 MB they are cut with a marker."""
    sid = client.post("/v1/sessions", json={"profile": "pyvision-rl"}).json()["session_id"]

    def turn(code: str) -> str:
        text = f"<code>\n```python\n{code}\n```\n</code>"
        return client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()["prompt"]

    lines = "".join(f"{i:05d} " + "x" * 62 + "\n" for i in range(500))  # 34,500 bytes
    assert f"Text Result:\n{lines.strip()}</interpreter>" in turn(f"print({lines!r}, end='')")
    cut = turn("print('y' * 1_000_100)")
    assert "Text Result:\n" + "y" * 1_000_000 + "\n[stdout truncated: 101 more bytes not shown]</interpreter>" in cut
