"""The episodes of ARM-Thinker's reward goldens (record_rewards_arm_thinker.py runs the reference on them)."""

from __future__ import annotations

from typing import Any

CHECK = ('<tool_call>{"name": "check_whether_response_word_count_in_range", "arguments": {"response": "a b", '
         '"lower_bound": 1, "upper_bound": 5}}</tool_call>')
ZOOM = ('<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [0, 0, 500, 500], '
        '"image_key": "img_0"}}</tool_call>')
ZOOMED = "This is the zoom-in image `observation_1`(zoomed in on the image img_0) after your tool call."
PAGES = "Concatenated page images for query 'x' in 'doc': pages [1, 2]."


def case(name: str, turns: list[str], truth: Any, calls: list[dict[str, Any]] | None = None,
         **extra: Any) -> dict[str, Any]:
    return {"name": name, "episode": {"turns": turns, "ground_truth": truth, "calls": calls or [], "extra": extra}}


CASES: list[dict[str, Any]] = [
    case("mmif true, right", ["<think>ok</think><answer>Overall Judgment: True</answer>"], "True"),
    case("mmif false vs true", ["<think>ok</think><answer>Overall Judgment: False</answer>"], True),
    case("mmif lower case, after a validator call", [
        "<think>check</think>" + CHECK, "<think>fine</think><answer>overall judgment: false</answer>"], "false",
        [{"tool": "check_whether_response_word_count_in_range", "text": "Check result: True"}],
        data_source="mmif_instruction_following"),
    case("mmif no judgment", ["<think>ok</think><answer>True</answer>"], "True"),
    case("mmif first judgment counts", ["<answer>Overall Judgment: True</answer> then "
                                        "<answer>Overall Judgment: False</answer>"], "false"),
    case("critic right with zoom", ["<think>look</think>" + ZOOM,
                                    "<think>so</think><answer>Overall Judgment: Answer 2 is better.</answer>"], 2,
         [{"tool": "image_zoom_in_tool", "text": ZOOMED, "images": 1}], data_source="deepeyes_crop"),
    case("critic right no tool", ["<think>so</think><answer>Answer 1 is slightly preferred</answer>"], 1,
         data_source="deepeyes_crop"),
    case("critic wrong with a failed tool", ["<think>look</think>" + ZOOM,
                                             "<think>so</think><answer>Answer 1 is better</answer>"], 2,
         [{"tool": "image_zoom_in_tool", "ok": False, "text": "Error: bbox_2d out of range"}],
         data_source="deepeyes_crop"),
    case("critic wrong no tool", ["<think>so</think><answer>Answer 1 is better</answer>"], "2",
         data_source="deepeyes_crop"),
    case("critic bad shape", ["Intro <think>so</think><answer>Answer 2 is better</answer>"], 2,
         data_source="deepeyes_crop"),
    case("critic tool tag in last turn", ["<think>so <tool_call>x</tool_call></think><answer>Answer 2 is better"
                                          "</answer>"], 2, data_source="deepeyes_crop"),
    case("critic free answer", ["<think>so</think><answer>  Left  </answer>"], "left", data_source="deepeyes_crop"),
    case("llava v3 right", ["<think>a</think><answer>Answer 2 is correct.</answer>"], 2, data_source="llava_critic"),
    case("llava v3 right, shape off", ["Sure: Answer 2 is better."], "2", data_source="llava_critic"),
    case("llava v3 wrong", ["<think>a</think><answer>Answer 1 is better.</answer>"], 2, data_source="llava_critic"),
    case("docvqa single true with pages", ["<think>s</think>" + CHECK,
                                           "<think>s</think><answer>Overall Judgment: True.</answer>"], -1,
         [{"tool": "doc_page_search", "text": PAGES, "images": 1}], data_source="mp_docvqa", rm_tag="single_rm"),
    case("docvqa single fallback", ["<think>s</think><answer>Yes it holds</answer>"], "", data_source="mp_docvqa",
         rm_tag="single_rm"),
    case("docvqa pair tag", ["<think>s</think><answer> 2 </answer>"], 2, data_source="mp_docvqa",
         rm_tag="pair_rm"),
    case("docvqa pair none", ["<think>s</think><answer>neither</answer>"], "none", data_source="mp_docvqa",
         rm_tag="pair_rm"),
    case("docvqa false wrong", ["<think>s</think><answer>Overall Judgment: True</answer>"], -2,
         data_source="mp_docvqa", rm_tag="single_rm"),
]
