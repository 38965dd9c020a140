"""Thyme through /act, round by round, against what its own trainer appended (tests/data/thyme_turns.json,
recorded by running the reference's `process_round` with its `execute_code_in_sandbox`): the observation texts,
`done`, and each output image's size, mode and pixels."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, png_bytes
from tests.test_thyme_program import make_inputs
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.profiles.thyme import ThymeFormat, extract_code, has_repeated_content, user_image_path, user_turn

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "thyme_turns.json").read_text())
CASES = {case["name"]: case for case in GOLDEN["cases"]}
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
PATH_CHARS = r"[^\s'\"]"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    import toolserver.profiles.thyme as env

    inputs = make_inputs(tmp_path_factory.mktemp("inputs"))
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), sr_model_dir=tmp_path_factory.mktemp("none"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(env, "TIMEOUT_S", GOLDEN["timeout_s"])  # the golden run's alarm (the reference's is 10 s)
        with TestClient(create_app(settings)) as client:
            client.inputs = {Path(path).name: Image.open(path).convert("RGB") for path in inputs.values()}
            yield client


def normalized(text: str, stem: str, ours: bool) -> str:
    """Paths made comparable: each call's directory, and the input image's path."""
    if ours:
        text = re.sub(rf"{PATH_CHARS}*/thyme/{stem}_0_rnd\d+_0", "<DIR>", text)
        return re.sub(rf"{PATH_CHARS}*/thyme/user_images/{stem}\.png", "<INPUT>", text)
    text = re.sub(rf"\{{ROOT\}}/rl_cache/[^/]+/{stem}_0_rnd\d+_0", "<DIR>", text)
    return text.replace(f"{{ROOT}}/inputs/{stem}.png", "<INPUT>")


def images_of(answer: dict) -> list[list]:
    shown = []
    for message in answer["observation"]:
        for part in message["content"] if isinstance(message["content"], list) else []:
            if part.get("type") == "image_url":
                image = Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1])))
                shown.append([list(image.size), image.mode, hashlib.sha256(image.tobytes()).hexdigest()])
    return shown


@pytest.mark.parametrize("name", list(CASES))
def test_a_trajectory_gets_what_the_trainer_appended(client, name):
    case = CASES[name]
    file_name = Path(case["input"]).name
    stem = file_name.rsplit(".", 1)[0]
    images = [{"data": b64(png_bytes(client.inputs[file_name])), "key": stem}]
    if name == "rewrite_image_path_kept":  # the code names another image that exists: the session's second
        images.append({"data": b64(png_bytes(client.inputs["other_200x100.png"])), "key": "other_200x100"})
    body = {"profile": "thyme", "images": images}
    sid = client.post("/v1/sessions", json=body).json()["session_id"]
    for turn in case["rounds"]:
        response = turn["response"].replace("{ROOT}/inputs/", "/mnt/data/user_images/")
        answer = client.post(f"/v1/sessions/{sid}/act", json={"text": response}).json()
        if turn["observation"] is None:
            assert answer["prompt"] == "", response
        else:
            expected = normalized(turn["observation"], stem, ours=False).replace("<image>", VISION)
            assert normalized(answer["prompt"], stem, ours=True) == expected, response
        assert images_of(answer) == turn["images"]
        assert answer["done"] == ("</answer>" in turn["appended"]), response
        if answer["done"]:
            break


def test_the_user_turn_names_the_image_inside_the_sandbox(client):
    sid = client.post("/v1/sessions", json={"profile": "thyme", "images": [
        {"data": b64(png_bytes(Image.new("RGB", (80, 60), (9, 8, 7)))), "key": "photo_1"}]}).json()["session_id"]
    path = user_image_path("photo_1")
    assert path == "/mnt/data/user_images/photo_1.png"
    code = f"<code>\n```python\nfrom PIL import Image\nprint(Image.open('{path}').size, image_path == '{path}')\n```\n</code>"
    answer = client.post(f"/v1/sessions/{sid}/act", json={"text": code}).json()
    assert answer["prompt"] == "<sandbox_output>(80, 60) True</sandbox_output>"  # the path in the text is the real one


def test_the_user_turn_is_the_reference_s_with_the_sandbox_path():
    recorded = CASES["img_processed_path_var"]
    expected = GOLDEN["user_turn"]["text"].replace("{ROOT}/inputs/scene_640x480.png", "/mnt/data/user_images/scene_640x480.png")
    assert user_turn("What is shown?", "scene_640x480", (640, 480)) == expected
    assert recorded["input"] == "{ROOT}/inputs/scene_640x480.png"


def test_the_code_runs_confined_not_in_the_server(client):
    """The reference execs in the trainer's process behind a blacklist that lets `os.system` through."""
    sid = client.post("/v1/sessions", json={"profile": "thyme"}).json()["session_id"]
    code = ("<code>\n```python\nimport os\nprint(os.path.exists('" + str(Path(__file__).resolve()) + "'), "
            "os.getuid() == 0)\n```\n</code>")
    answer = client.post(f"/v1/sessions/{sid}/act", json={"text": code}).json()
    assert answer["prompt"] == "<sandbox_output>False False</sandbox_output>"


def test_a_call_past_the_kill_ends_the_episode(client, monkeypatch):
    """Code that swallows the alarm (the reference's is catchable) is killed; the trainer skips every later round
    of a sample whose turn holds that text."""
    import toolserver.profiles.thyme as env

    monkeypatch.setattr(env, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(env, "KILL_AFTER_S", 0.5)
    sid = client.post("/v1/sessions", json={"profile": "thyme"}).json()["session_id"]
    code = ("<code>\n```python\nimport time\nwhile True:\n    try:\n        while True:\n            pass\n    except Exception:\n"
            "        pass\n```\n</code>")
    answer = client.post(f"/v1/sessions/{sid}/act", json={"text": code}).json()
    assert answer["prompt"] == "<sandbox_output>Sandbox for 1: Execution timed out after 10 seconds.</sandbox_output>"
    assert answer["done"] is True


def test_rounds_are_read_as_the_trainer_reads_them():
    rounds = ThymeFormat()
    assert extract_code("\n```python\nprint(1)\n```\n</code>") == "print(1)"  # the continuation of `…<code>`
    assert extract_code("<CODE>pythonic = 3</CODE>") == "ic = 3"
    assert rounds.parse("</code>").calls == [] and rounds.parse("</code>").done is False
    assert rounds.parse("x</think>\n<answer>C</answer>").done is True
    assert has_repeated_content("abcdefghij" * 10) and not has_repeated_content("<code>" + "abcdefghij" * 10)


def _repeated_by_search(text: str, threshold: float = 0.3, tail: int = 1000) -> bool:
    """The trainer's search as it runs it (every length from a third down, every substring counted), for checking
    the one-pass form against."""
    if "sandbox_output" in text or "answer" in text or "<code>" in text:
        return False
    target = text[-tail:]
    n = len(target)
    if n < 50:
        return False
    for length in range(n // 3, 0, -1):
        if 2 * length / n <= threshold:
            return False
        counts: dict[str, int] = {}
        for start in range(n - length + 1):
            counts[target[start:start + length]] = counts.get(target[start:start + length], 0) + 1
        if any(count > 1 and count * length / n > threshold for count in counts.values()):
            return True
    return False


@pytest.mark.slow
def test_the_repetition_filter_decides_as_the_trainer_s_search():
    import random

    rng = random.Random(7)
    for _ in range(300):
        n = rng.choice([20, 49, 50, 51, 90, 300, 1000, 1400])
        alphabet = rng.choice(["ab", "abc", "abcdefghijklmnopqrstuvwxyz \n"])
        unit = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, n)))
        text = (unit * (n // len(unit) + 1))[:n] if rng.random() < 0.5 else "".join(rng.choice(alphabet)
                                                                                  for _ in range(n))
        assert has_repeated_content(text) == _repeated_by_search(text), text
