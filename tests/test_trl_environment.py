"""`toolserver.integrations.trl` without TRL: the generated methods' schemas as transformers reads them (every tool
of every profile), episodes against a live server, and the user-turn template. `tests_frameworks/test_trl.py` runs
it inside TRL's own GRPOTrainer."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import httpx
import pytest
from PIL import Image
from transformers.utils import get_json_schema
from transformers.utils.chat_template_utils import render_jinja_template

from toolserver.core import Core
from toolserver.integrations.trl import (
    environment_factory,
    place_tool_images_in_user_turn,
    release_all,
    tool_images_in_user_turn,
    tool_method,
)
from toolserver.profiles import PROFILES

SIMPLE = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean", "array": "array"}


def test_every_tool_of_every_profile_is_a_method_transformers_can_describe(core: Core):
    for profile in PROFILES:
        for entry in core.list_tools(profile):
            function = entry["function"]
            schema = get_json_schema(tool_method(function))["function"]
            assert schema["name"] == function["name"]
            assert schema["description"] == " ".join(function["description"].split())
            wanted, got = function["parameters"], schema["parameters"]
            assert set(got["properties"]) == set(wanted.get("properties", {}))
            # (DeepEyes' zoom schema requires `bbox`, which it does not define: a signature cannot say that.)
            assert set(got.get("required", [])) == set(wanted.get("required", [])) & set(got["properties"])
            for name, prop in wanted.get("properties", {}).items():
                described = got["properties"][name]
                assert described["description"].startswith(" ".join((prop.get("description") or "").split()))
                if prop.get("type") in SIMPLE and "enum" not in prop:
                    assert described["type"] == SIMPLE[prop["type"]], (profile, function["name"], name)
                if "enum" in prop:
                    assert described["enum"] == prop["enum"]


def test_constraints_are_written_out_and_keywords_renamed():
    function = {"name": "pick", "description": "Pick a box.", "parameters": {"type": "object", "required": ["box"],
                "properties": {"box": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1000},
                                       "minItems": 4, "maxItems": 4, "description": "The box."},
                               "class": {"type": "string", "description": "Its class."}}}}
    schema = get_json_schema(tool_method(function))["function"]
    assert schema["parameters"]["properties"]["box"] == {
        "type": "array", "items": {"type": "number"},
        "description": "The box. (exactly 4 items, each >= 0, each <= 1000)"}
    assert "class_" in schema["parameters"]["properties"] and schema["parameters"]["required"] == ["box"]


def test_an_episode_on_a_live_server(live_server):
    environment = environment_factory(live_server.url, "default")
    env = environment()
    picture = Image.new("RGB", (400, 300), (200, 30, 30))
    assert env.reset(prompt="What is it?", images=[picture]) == \
        "\nImages: `original_image` (index 0, 400x300)."
    first = env.session_id
    blocks = env.zoom_in(image=0, bbox_2d=[0, 0, 500, 500])
    assert [block["type"] for block in blocks] == ["image", "text"]
    assert blocks[0]["image"].size == (200, 150) and blocks[0]["image"].getcolors() == [(30000, (200, 30, 30))]
    assert "observation_1" in blocks[1]["text"]
    failed = env.zoom_in(image="nope", bbox_2d=[0, 0, 10, 10])
    assert isinstance(failed, str) and "nope" in failed  # the model reads the failure
    assert [result.ok for result in env.results] == [True, False]
    assert env.reset(image=picture) is not None  # `image`, TRL's single-image column, works too
    assert httpx.get(f"{live_server.url}/v1/sessions/{first}").status_code == 404  # the previous episode ended
    second = env.session_id
    release_all([env])
    assert httpx.get(f"{live_server.url}/v1/sessions/{second}").status_code == 404
    assert "Error" in env.zoom_in(image=0, bbox_2d=[0, 0, 10, 10])


def test_public_members_are_reset_and_the_tools(live_server):
    environment = environment_factory(live_server.url, "deepeyes", describe_images=False)
    public = sorted(name for name in vars(environment) if not name.startswith("_"))
    assert public == ["image_rotate_tool", "image_zoom_in_tool", "reset"]
    assert environment().reset(images=[]) is None
    with pytest.raises(ValueError, match="processor"):
        environment_factory(live_server.url, "deepeyes", tool_images="user")


DROPPING = ("{%- for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}{% else %}"
            "{% for c in m.content %}{% if c.type == 'image' and m.role != 'tool' %}[image]{% elif c.type == 'text' %}"
            "{{ c.text }}{% endif %}{% endfor %}{% endif %}</{{ m.role }}>{% endfor %}")


def test_tool_images_move_to_a_user_turn():
    image = Image.new("RGB", (4, 4))
    conversation = [{"role": "user", "content": [{"type": "text", "text": "look"}]},
                    {"role": "assistant", "content": "", "tool_calls": []},
                    {"role": "tool", "name": "zoom", "content": [{"type": "image", "image": image},
                                                                  {"type": "text", "text": "one"}]},
                    {"role": "tool", "name": "zoom", "content": [{"type": "image", "image": image},
                                                                  {"type": "text", "text": "two"}]},
                    {"role": "assistant", "content": "done"}]

    def render(template: str) -> str:
        return render_jinja_template(conversations=[conversation], chat_template=template)[0][0]

    assert render(DROPPING) == "<user>look</user><assistant></assistant><tool>one</tool><tool>two</tool>" \
                               "<assistant>done</assistant>"
    assert render(tool_images_in_user_turn(DROPPING)) == (
        "<user>look</user><assistant></assistant><tool>one</tool><tool>two</tool><user>[image][image]</user>"
        "<assistant>done</assistant>")
    processor = SimpleNamespace(chat_template=DROPPING, tokenizer=SimpleNamespace())
    place_tool_images_in_user_turn(processor)
    place_tool_images_in_user_turn(processor)  # once only
    assert processor.chat_template == tool_images_in_user_turn(DROPPING)


def test_importing_it_does_not_import_trl():
    code = "import sys, toolserver.integrations.trl; assert 'trl' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
