"""A tiny, randomly initialised Qwen2-VL and its processor, built in the test (no hub, no weights): a byte-level BPE
trained here with `tokenizers`, Qwen's special tokens, the PIL image processor (no torchvision), and a model of two
layers a few dozen wide. It learns nothing; it runs the real forward passes and vision tower. A random model never
writes a tool call, so `ScriptedQwen2VL.generate` (the real `generate`) forces the tokens of a scripted turn."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    Qwen2Tokenizer,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
           "<|video_pad|>"]
TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
CORPUS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", '{"name": "zoom_in", "arguments": ',
          '{"image": 0, "bbox_2d": [0, 0, 500, 500]}}', "system user assistant tool Images Zoomed in on image",
          "The result is image observation_1 (index 1), pixels original_image index Done. What colour is it?",
          "# Tools You may call one or more functions to assist with the user query. function signatures XML tags",
          "For each function call, return a json object with function name and arguments within", "0123456789"]


def tokenizer(texts: list[str]) -> Qwen2Tokenizer:
    """A byte-level BPE trained on `texts` (what the prompts will hold: the tools' schemas) and a few phrases."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator((CORPUS + texts) * 20, trainers.BpeTrainer(
        vocab_size=2000, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    state = bpe.model.__getstate__()
    import json

    model = json.loads(state)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Qwen2Tokenizer(vocab=model["vocab"], merges=merges, unk_token=None, bos_token=None,
                         eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": SPECIAL[1:]})
    tok.add_tokens(TAGS)  # one token each, as in Qwen's vocabulary (and not special: decoding keeps them)
    return tok


class _Processor(Qwen2VLProcessor):
    """Qwen2-VL's processor without a video processor (there is no CPU one without torchvision)."""

    def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
        if argument_name == "video_processor" and argument is None:
            return None
        return super().check_argument_for_proper_class(argument_name, argument)


def processor(chat_template: str, texts: list[str]) -> Qwen2VLProcessor:
    images = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=28 * 28 * 64)
    return _Processor(image_processor=images, tokenizer=tokenizer(texts), video_processor=None,
                      chat_template=chat_template)


class Scripted(LogitsProcessor):
    """Forces the next token of `script` (a list of token ids) at each step of one `generate` call."""

    def __init__(self, script: list[int], start: int):
        self.script, self.start = script, start

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.start
        if step >= len(self.script):
            return scores
        forced = torch.full_like(scores, float("-inf"))
        forced[:, self.script[step]] = 0.0
        return forced


class ScriptedQwen2VL(Qwen2VLForConditionalGeneration):
    """`generate` writes `first_turn` the first time a prompt has no tool response, `last_turn` after one."""

    first_turn: ClassVar[list[int]] = []
    last_turn: ClassVar[list[int]] = []
    response_marker = -1  # the id of <tool_response>

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        input_ids = kwargs["input_ids"]
        after_tool = bool((input_ids == self.response_marker).any())
        script = self.last_turn if after_tool else self.first_turn
        kwargs["logits_processor"] = LogitsProcessorList([Scripted(script, input_ids.shape[1])])
        return super().generate(*args, **kwargs)


def model(tok: Qwen2Tokenizer) -> ScriptedQwen2VL:
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL}
    config = Qwen2VLConfig(
        text_config={"vocab_size": len(tok), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
                     "rope_parameters": {"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 10000.0}},
        vision_config={"depth": 2, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    torch.manual_seed(0)
    return ScriptedQwen2VL(config)
