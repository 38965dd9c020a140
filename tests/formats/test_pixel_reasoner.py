"""Call format `pixel-reasoner` (verl-tool's PixelReasonerTool.parse_action): the first block only, the empty
observation for what is not an action, the reference's texts for bad arguments, `<image>` filled in order."""

from toolserver.formats import get_format, parse
from toolserver.models import ResultImage, ToolResult


def test_the_first_block_only_and_what_is_no_action():
    first = parse('<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0, 0, 1, 1]}}</tool_call>'
                  '<tool_call>{"name": "select_frames", "arguments": {}}</tool_call>', "pixel-reasoner")
    assert [c.name for c in first.calls] == ["crop_image"] and first.done is False
    assert parse('<tool_call>{"name": "rotate", "arguments": {}}</tool_call>', "pixel-reasoner").errors == [""]
    assert parse("<tool_call>not json</tool_call>", "pixel-reasoner").errors == [""]
    assert parse("no call", "pixel-reasoner").done is True


def test_argument_problems_in_the_references_words():
    missing = parse('<tool_call>{"name": "zoom_in"}</tool_call>', "pixel-reasoner")
    assert missing.errors == ["Missing 'arguments' in the tool call."]
    listed = parse('<tool_call>{"name": "zoom_in", "arguments": [1]}</tool_call>', "pixel-reasoner")
    assert listed.errors == ["'arguments' should be a dictionary of parameters key-value pairs, got <class 'list'>."]


def test_the_observation_replaces_image_tokens_in_order():
    image = ResultImage(key="observation_1", index=1, width=2, height=2, mime="image/jpeg", data="AA==")
    result = ToolResult(ok=True, tool="crop_image", text="Here is the cropped image.\n<image>", images=[image])
    fmt = get_format("pixel-reasoner")
    assert fmt.prompt([result], image="<image>") == "Here is the cropped image.\n<image>"
    assert fmt.prompt([result]) == "Here is the cropped image.\n<|vision_start|><|image_pad|><|vision_end|>"
    content = fmt.observation([result])[0]["content"]
    assert content[0] == {"type": "text", "text": "Here is the cropped image.\n"}
    assert content[1]["image_url"]["url"] == "data:image/jpeg;base64,AA=="
