"""TRL: one real GRPO step through TRL's own `GRPOTrainer` (`environment_factory`) on a tiny, randomly initialised
Qwen2-VL built here, the environment class calling a live toolserver. TRL drops images silently (a tool response the
completion budget cannot hold is rolled back; a token/feature mismatch drops `pixel_values`), so "no error" proves
nothing: the test reads the training forward itself and checks that the server's tool image is in it, as the image
processor makes it, with its image tokens counted, and that the vision tower learned from it."""

from __future__ import annotations

import io
import json
import os

import httpx
import pytest
from PIL import Image

from tests_frameworks import tiny_vlm
from tests_frameworks.conftest import need, picture, snippet

PROFILE = "deepeyes"  # two tools: a short prompt for a model this small
CALL = '<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [0, 0, 200, 150]}}\n</tool_call><|im_end|>'


def dropping_tool_images(template: str) -> str:
    """A template that renders a tool message's text but drops its images, as Qwen2/2.5-VL's and Gemma's do."""
    tool_branch = template.index('message.role == "tool"')
    return template[:tool_branch] + template[tool_branch:].replace("<|vision_start|><|image_pad|><|vision_end|>", "")


def run_step(toolserver, tmp_path, *, tool_images: str, template: str):
    """One GRPO step; returns the trainer, the training forward's inputs, the tool images the server returned and the
    vision tower's weights before the step."""
    trl = need("trl")
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    import torch
    from datasets import Dataset
    from trl.chat_template_utils import add_response_schema, qwen3_vl_chat_template

    tools = httpx.get(toolserver.url + "/v1/tools", params={"profile": PROFILE}).json()
    processor = tiny_vlm.processor(qwen3_vl_chat_template, [json.dumps(tool["function"]) for tool in tools])
    add_response_schema(processor)  # from TRL's own Qwen3-VL template, before any template change
    processor.chat_template = template
    tok = processor.tokenizer
    model = tiny_vlm.model(tok)
    model.first_turn = tok(CALL, add_special_tokens=False)["input_ids"]
    model.last_turn = tok("Done.<|im_end|>", add_special_tokens=False)["input_ids"]
    model.response_marker = tok.convert_tokens_to_ids("<tool_response>")
    forwards: list[dict] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: forwards.append(kw) if torch.is_grad_enabled() else None,
                                    with_kwargs=True)
    vision_before = {k: v.clone() for k, v in model.model.visual.state_dict().items()}
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "What colour is the top left?"}],
                                  "images": [picture()]}] * 2)
    args = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                          max_completion_length=1024, max_steps=1, learning_rate=0.1, beta=0.0, report_to=[],
                          save_strategy="no", use_cpu=True, logging_steps=1)

    def reward(completions, **_):  # different rewards, so the advantages (and the gradients) are not zero
        return [float(i) for i in range(len(completions))]

    trainer = snippet("trl_grpo", "trainers").train(toolserver.url, PROFILE, model, processor, dataset, [reward],
                                                   args, tool_images=tool_images)
    environments = [env for pool in trainer._environment_pool.values() for env in pool]
    returned = [Image.open(io.BytesIO(result.images[0].content())).convert("RGB")
                for env in environments for result in env.results]
    return trainer, processor, forwards, returned, vision_before, environments


def check_the_tool_image_reached_training(processor, forwards, returned, model, vision_before):
    import torch

    assert len(returned) == 2, "each of the two rollouts called the tool once"
    crop = returned[0]
    assert crop.size == (200, 150) and crop.getcolors() == [(200 * 150, (200, 30, 30))]  # the red top-left corner
    training = forwards[-1]
    # The rollouts' images in order: the row's picture, then the tool's crop, for each rollout.
    expected = processor.image_processor(images=[picture(), returned[0], picture(), returned[1]], return_tensors="pt")
    assert torch.equal(training["pixel_values"], expected["pixel_values"])
    assert torch.equal(training["image_grid_thw"], expected["image_grid_thw"])
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    per_image = (expected["image_grid_thw"].prod(dim=1) // processor.image_processor.merge_size ** 2).tolist()
    counted = (training["input_ids"] == pad).sum(dim=1).tolist()
    assert counted == [per_image[0] + per_image[1], per_image[2] + per_image[3]]
    vision_after = model.model.visual.state_dict()
    assert any(not torch.equal(vision_before[k], vision_after[k]) for k in vision_before), "the vision tower learned"


def test_one_grpo_step_feeds_the_servers_tool_image_to_the_training_forward(toolserver, tmp_path):
    from trl.chat_template_utils import qwen3_vl_chat_template

    from toolserver.integrations.trl import release_all

    trainer, processor, forwards, returned, before, environments = run_step(
        toolserver, tmp_path, tool_images="tool", template=qwen3_vl_chat_template)
    check_the_tool_image_reached_training(processor, forwards, returned, trainer.model, before)
    assert trainer.state.log_history[0]["tools/call_frequency"] == 1
    sessions = [env.session_id for env in environments]
    assert all(httpx.get(f"{toolserver.url}/v1/sessions/{sid}").status_code == 200 for sid in sessions)
    release_all(environments)  # what the instances' next reset does
    assert all(httpx.get(f"{toolserver.url}/v1/sessions/{sid}").status_code == 404 for sid in sessions)


def test_tool_images_in_a_user_turn_for_a_template_that_drops_them(toolserver, tmp_path):
    from trl.chat_template_utils import qwen3_vl_chat_template

    dropping = dropping_tool_images(qwen3_vl_chat_template)
    with pytest.raises(ValueError, match="image_pad"):  # TRL alone: the tool image has no token (trl#5663)
        run_step(toolserver, tmp_path / "alone", tool_images="tool", template=dropping)
    trainer, processor, forwards, returned, before, _environments = run_step(
        toolserver, tmp_path, tool_images="user", template=dropping)
    check_the_tool_image_reached_training(processor, forwards, returned, trainer.model, before)
    rendered = processor.apply_chat_template([
        {"role": "user", "content": [{"type": "text", "text": "Look."}]},
        {"role": "assistant", "content": [], "tool_calls": [{"type": "function", "function": {
            "name": "image_zoom_in_tool", "arguments": {"bbox_2d": [0, 0, 200, 150]}}}]},
        {"role": "tool", "name": "image_zoom_in_tool", "content": [{"type": "image", "image": returned[0]},
                                                                   {"type": "text", "text": "zoomed"}]}],
        tokenize=False)
    assert "<tool_response>\nzoomed\n</tool_response><|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|>" \
        in rendered
