"""The image rule of `prompt`, for every registered format: `prompt(results, image)` writes `image` exactly where the
images go, so the default (Qwen-VL's vision tokens, as the references' rollouts append them) and a session's
`image_marker: "image_tag"` (`<image>`) differ there and nowhere else."""

import pytest

import toolserver.profiles  # noqa: F401 - registers the environments' own formats
from toolserver.formats import FORMATS
from toolserver.formats.base import IMAGE_MARKERS, VISION_TOKENS
from toolserver.models import ResultImage, ToolResult

MARK = "@@image@@"
IMAGE = ResultImage(key="observation_1", index=1, width=2, height=2, mime="image/png", data="AA==")
RESULTS = [ToolResult(ok=True, tool="t", text="Images:\n<image>", images=[IMAGE])]


@pytest.mark.parametrize("name", list(FORMATS))
def test_images_are_written_where_they_go_and_only_there(name):
    fmt = FORMATS[name]
    marked, default = fmt.prompt(RESULTS, image=MARK), fmt.prompt(RESULTS)
    assert (marked is None) is (default is None)
    if marked is not None:
        assert MARK in marked, f"{name} writes no image in its prompt"
        assert default == marked.replace(MARK, VISION_TOKENS)
        assert fmt.prompt(RESULTS, image=IMAGE_MARKERS["image_tag"]) == marked.replace(MARK, "<image>")


def test_the_markers():
    assert IMAGE_MARKERS == {"vision_tokens": "<|vision_start|><|image_pad|><|vision_end|>", "image_tag": "<image>"}
