"""DeepEyesV2 against what its own env and code server answered (tests/data/deepeyes_v2_golden.json, recorded by
running DeepEyesV2_ENV against the reference's fast_api_server.py): the rewrite, the extraction, the resize, and
whole sessions through /act, turn by turn (texts, `done`, image counts, sizes and modes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, png_bytes, slow_cases
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.profiles.deepeyes_v2 import (
    DeepEyesV2Format,
    extract_answer,
    extract_code,
    fix_python_indentation,
    maybe_resize_image,
)
from toolserver.sandbox.programs.deepeyes_v2 import SERVER_FILE

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "deepeyes_v2_golden.json").read_text())
SESSIONS = {s["name"]: s for s in GOLDEN["sessions"]}
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
# Where this service deviates on purpose (docs/decisions.md, "DeepEyesV2"); each has its own test below.
# The searches need the session's `search_key` and a search cache: test_deepeyes_v2_search.py replays them (an integer
# data index, `image_search_int_index`, cannot be a session text).
SEARCHES = {"search_ok_placeholder", "image_search_cached", "image_search_not_fvqa", "search_missing_arguments",
            "search_missing_name", "image_search_int_index"}
DEVIATING = {"whitespace_only_code", "traceback_across_cells", "unpicklable_state_dropped", "imported_show_goes_stale",
             *SEARCHES,
             # no reset: the reference's guard prefix runs in model code only when the init cell was skipped
             "guard_only_first_cell", "first_call_blank_figure"}


@pytest.mark.parametrize("name", list(GOLDEN["fix_python_indentation"]))
def test_fix_python_indentation_is_the_reference_s(name):
    code, fixed = GOLDEN["fix_python_indentation"][name]
    assert fix_python_indentation(code) == fixed


@pytest.mark.parametrize("name", list(GOLDEN["extraction"]))
def test_extraction_is_the_reference_s(name):
    case = GOLDEN["extraction"][name]
    assert extract_code(case["action"]) == case["code"]
    assert extract_answer(case["action"]) == case["answer"]


@pytest.mark.parametrize(("size", "resized"), GOLDEN["resize"], ids=[f"{w}x{h}" for (w, h), _ in GOLDEN["resize"]])
def test_figures_are_resized_as_the_env_resizes_them(size, resized):
    assert list(maybe_resize_image(Image.new("RGBA", tuple(size))).size) == resized


def golden_image() -> Image.Image:
    image = Image.new("RGB", (64, 48), (200, 30, 30))
    image.putpixel((0, 0), (1, 2, 3))
    return image


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), sr_model_dir=tmp_path_factory.mktemp("none"))
    with TestClient(create_app(settings)) as client:
        yield client


def new_session(client: TestClient, images: list[Image.Image]) -> str:
    body = {"profile": "deepeyes-v2", "images": [{"data": b64(png_bytes(image))} for image in images]}
    return client.post("/v1/sessions", json=body).json()["session_id"]


def act(client: TestClient, sid: str, text: str) -> dict:
    response = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()


def shown(answer: dict) -> list[list]:
    return [[[image["width"], image["height"]], image.get("mode")] for result in answer["results"]
            for image in result["images"]]


@pytest.mark.parametrize("name", slow_cases([name for name in SESSIONS if name not in DEVIATING], {"figure_cap_10"}))
def test_a_session_answers_as_the_reference_did(client, name):
    session = SESSIONS[name]
    sid = new_session(client, [golden_image()] if session["reset"] else [])
    for turn in session["turns"]:
        answer = act(client, sid, turn["action"])
        assert answer["done"] == turn["done"], turn["action"]
        if turn["done"]:
            assert answer["prompt"] == ""
            continue
        assert answer["prompt"] == turn["prompt"].replace("<image>", VISION), turn["action"]
        assert [size for size, _ in shown(answer)] == [size for size, _ in turn["images"]]


def test_figures_keep_the_mode_the_server_saved_them_in(client):
    sid = new_session(client, [golden_image()])
    turn = SESSIONS["figure_crop_show"]["turns"][0]
    image = act(client, sid, turn["action"])["results"][0]["images"][0]
    assert image["mime"] == "image/png" and [image["width"], image["height"]] == turn["images"][0][0]
    assert turn["images"][0][1] == "RGBA"


def code_turn(code: str) -> str:
    return f"<think>Let me look.</think>\n<code>\n```python\n{code}\n```\n</code>"


def test_search_calls_without_a_cache_are_answered_in_the_env_s_markup(client):
    """The cached searches are tests/profiles/test_deepeyes_v2_search.py's; without `SEARCH_CACHE` a well-formed
    search says so, and the env's own errors come before it."""
    sid = new_session(client, [])
    recorded = SESSIONS["search_missing_name"]["turns"][0]
    answer = act(client, sid, recorded["action"])
    assert answer["done"] is False
    assert answer["prompt"] == re.sub(r"for \S+<\|im_end\|>", "for None<|im_end|>", recorded["prompt"])
    served = act(client, sid, SESSIONS["search_ok_placeholder"]["turns"][0]["action"])
    assert served["done"] is False
    assert served["prompt"].startswith("<|im_end|>\n<|im_start|>user\nError: no search cache is configured on this "
                                       "server (set SEARCH_CACHE")


def test_whitespace_only_code_ends_the_episode(client):
    """The reference's env crashes on it (AttributeError); the episode ends, as for empty code."""
    sid = new_session(client, [golden_image()])
    assert act(client, sid, "<code>\n```python\n \n```\n</code>")["done"] is True


@pytest.mark.slow
def test_state_lives_in_the_worker(client):
    """The reference pickles the namespace between calls (a generator is dropped, an earlier cell's function has
    no source); the worker keeps it alive."""
    sid = new_session(client, [golden_image()])
    act(client, sid, code_turn("gen = (i for i in range(3))\nprint(next(gen))\ndef h(a): return a[3]"))
    assert "stdout:\n```\n1\n\n```" in act(client, sid, code_turn("print(next(gen))"))["prompt"]
    failed = act(client, sid, code_turn("h([1])"))["prompt"]
    assert "Cell In[1], line 3, in h(a)\n----> 3 def h(a): return a[3]" in failed


def test_sessions_do_not_share_a_kernel(client):
    """The reference's training env shares one kernel among every trajectory of a process (a class attribute)."""
    red, blue = Image.new("RGB", (40, 40), (255, 0, 0)), Image.new("RGB", (50, 20), (0, 0, 255))
    first, second = new_session(client, [red]), new_session(client, [blue])
    act(client, second, code_turn("secret = 1"))
    answer = act(client, first, code_turn("print(image_1.size, image_1.getpixel((0, 0)))\nprint('secret' in dir())"))
    assert "stdout:\n```\n(40, 40) (255, 0, 0)\nFalse\n\n```" in answer["prompt"]


def test_timeouts_read_as_the_server_s(client, monkeypatch):
    """The alarm's traceback (its handler frame in the reference's own file), then the kill a second later; a
    killed cell loses the session's state (the reference rolls back to the call before) and the next one starts
    from the init cell's."""
    import toolserver.profiles.deepeyes_v2 as env

    monkeypatch.setattr(env, "TIMEOUT_S", 1.0)
    golden = GOLDEN["timeouts"]
    sid = new_session(client, [golden_image()])
    act(client, sid, code_turn("kept = 1"))
    soft = act(client, sid, code_turn(golden["soft_timeout_sigalrm"]["code"]))["prompt"]
    stderr = golden["soft_timeout_sigalrm"]["stderr"].replace(
        "/work/notes/26-deepeyesv2/ref/sandbox/fast_api_server.py", SERVER_FILE)
    assert f"stdout:\n```\nstart\n\n```\n\nstderr:\n```\n{stderr}\n```" in soft
    assert "stdout:\n```\n1\n\n```" in act(client, sid, code_turn("print(kept)"))["prompt"]
    hard = act(client, sid, code_turn(golden["hard_kill_sigalrm_ignored"]["code"]))["prompt"]
    assert "stdout:\n```\n\n```\n\nstderr:\n```\nTimeOutError: code execution timed out\n```" in hard
    after = act(client, sid, code_turn("print('kept' in dir(), image_1.size)"))["prompt"]
    assert "stdout:\n```\nFalse (64, 48)\n\n```" in after


def test_the_format_reads_turns_as_the_env_does():
    turns = DeepEyesV2Format()
    assert turns.parse("<answer>B</answer><code>\n```python\nprint(1)\n```\n</code>").done is True
    assert turns.parse("plain text").done is True
    coded = turns.parse(code_turn("print(1)"))
    assert coded.done is False and [(c.name, c.arguments) for c in coded.calls] == [("python", {"code": "print(1)"})]


def test_a_session_s_worker_is_counted_and_ends_with_it(client):
    def live_workers() -> float:
        line = next(line for line in client.get("/metrics").text.splitlines()
                    if line.startswith("toolserver_sandbox_live_workers "))
        return float(line.split()[1])

    sid = new_session(client, [golden_image()])
    before = live_workers()
    act(client, sid, code_turn("x = 1"))
    assert live_workers() == before + 1
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    assert live_workers() == before


def test_texts_are_bounded_even_when_the_code_lifts_the_program_s_cap(client):
    """The code runs in the same process as the program, so the server caps what comes back as well."""
    sid = new_session(client, [golden_image()])
    code = ("import toolserver.sandbox.programs.deepeyes_v2 as program\nprogram.capped = lambda text, limit, name: text"
            "\nraise ValueError('x' * 3_000_000)")
    prompt = act(client, sid, code_turn(code))["prompt"]
    assert len(prompt) < 1_100_000 and "[stderr truncated: " in prompt
