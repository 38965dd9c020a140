"""OpenAI strict mode makes every optional argument required-but-nullable, so a strict model sends `null` for
what it leaves out: the server reads such a `null` as "not given", for every tool of every profile that checks
its arguments (seed profiles that reproduce a system's own argument handling receive arguments as they come)."""

import pytest

from tests.conftest import b64, gradient, png_bytes
from toolserver.profiles import PROFILES

EXAMPLES = {  # a valid value for each required argument the tools have
    "image": 0, "bbox_2d": [100, 100, 600, 600], "keypoint": [500, 500], "angle": 90, "frames": [0],
    "boxes": [[100, 100, 600, 600]], "response": "One two. Three four.", "lower_bound": 1, "upper_bound": 9,
    "ranges": [[1, 9]], "substrings": ["x"], "substring": "x", "keywords": ["two"], "lower_bound_times": 0,
    "upper_bound_times": 3, "precision": 2, "img_idx": 0, "label": "a sign", "filename": "nosuch", "query": "q",
    "image_idx": 1,
}


def strict_calls():
    for profile in PROFILES.values():
        for entry in profile.openai_tools(strict=True):
            function = entry["function"]
            tool = profile.tool(function["name"])
            if tool is None or tool.raw_arguments:
                continue
            required = set(profile.tools[function["name"]].validation_schema().get("required", []))
            properties = function["parameters"]["properties"]
            if not required <= EXAMPLES.keys():
                continue
            arguments = {name: (EXAMPLES[name] if name in required else None) for name in properties}
            yield pytest.param(profile.name, function["name"], arguments, id=f"{profile.name}/{function['name']}")


@pytest.mark.parametrize(("profile", "name", "arguments"), list(strict_calls()))
def test_nulls_for_optional_arguments_mean_not_given(client, profile, name, arguments):
    sid = client.post("/v1/sessions", json={"profile": profile, "images": [
        {"data": b64(png_bytes(gradient(800, 600)))}]}).json()["session_id"]
    result = client.post(f"/v1/sessions/{sid}/tools/{name}", json=arguments).json()
    nulled = [k for k, v in arguments.items() if v is None]
    assert not (result["error"] and result["error"]["code"] == "invalid_arguments"), (nulled, result["text"])


def test_a_nullable_enum_includes_null():
    tools = {t["function"]["name"]: t["function"] for t in PROFILES["default"].openai_tools(strict=True)}
    scale = tools["super_resolution"]["parameters"]["properties"]["scale"]
    assert scale["type"] == ["integer", "null"] and None in scale["enum"]
