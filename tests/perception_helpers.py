"""Tiny randomly initialised perception models the tests build and save with `save_pretrained`, so the server's
loading code (`from_pretrained` from a local directory, offline) runs for real; only the weights are tiny."""

from __future__ import annotations

from pathlib import Path

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "a", "the", "cat", "dog", "red", "car", "person",
         "tree", "sky", "box", "line", "chart", "bar", "x", "y", "axis", "label", "title", "point", "of", "and"]


def _bert_tokenizer(directory: Path):  # type: ignore[no-untyped-def]
    import transformers

    directory.mkdir(parents=True, exist_ok=True)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(WORDS) + "\n")
    return transformers.BertTokenizer(str(vocab), do_lower_case=True)


def build_tiny_grounding_dino(directory: Path) -> Path:
    """GroundingDINO (Swin image backbone, BERT text backbone) with a few thousand parameters."""
    import torch
    import transformers

    torch.manual_seed(0)
    tokenizer = _bert_tokenizer(directory / "vocab")
    backbone = transformers.SwinConfig(image_size=64, patch_size=4, embed_dim=8, depths=[1, 1, 1, 1],
                                       num_heads=[1, 1, 1, 1], window_size=2, out_indices=[2, 3, 4])
    text = transformers.BertConfig(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=32, max_position_embeddings=64)
    config = transformers.GroundingDinoConfig(
        backbone_config=backbone, text_config=text, num_queries=20, encoder_layers=1, decoder_layers=2,
        encoder_ffn_dim=32, decoder_ffn_dim=32, encoder_attention_heads=2, decoder_attention_heads=2, d_model=32,
        num_feature_levels=4, encoder_n_points=2, decoder_n_points=2, max_text_len=64)
    model = transformers.GroundingDinoForObjectDetection(config).eval()
    model.save_pretrained(directory)
    image_processor = transformers.GroundingDinoImageProcessorPil(size={"shortest_edge": 96, "longest_edge": 128})
    transformers.GroundingDinoProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(directory)
    return directory


def build_tiny_sam2(directory: Path) -> Path:
    """SAM2 (Hiera image encoder, prompt encoder, mask decoder) at 64x64 pixels with a few thousand parameters."""
    import torch
    import transformers

    torch.manual_seed(0)
    hiera = transformers.Sam2HieraDetConfig(
        hidden_size=8, image_size=[64, 64], blocks_per_stage=[1, 1, 2, 1], embed_dim_per_stage=[8, 16, 32, 64],
        num_attention_heads_per_stage=[1, 1, 1, 1], window_size_per_stage=[2, 2, 2, 2], global_attention_blocks=[3],
        window_positional_embedding_background_size=[2, 2])
    vision = transformers.Sam2VisionConfig(backbone_config=hiera, backbone_channel_list=[64, 32, 16, 8],
                                           backbone_feature_sizes=[[16, 16], [8, 8], [4, 4]], fpn_hidden_size=32)
    config = transformers.Sam2Config(
        vision_config=vision,
        prompt_encoder_config=dict(hidden_size=32, image_size=64, patch_size=16, mask_input_channels=4),
        mask_decoder_config=dict(hidden_size=32, mlp_dim=64, num_attention_heads=2, iou_head_hidden_dim=32))
    transformers.Sam2Model(config).eval().save_pretrained(directory)
    return directory


def _byte_tokenizer(specials: list[str]):  # type: ignore[no-untyped-def]
    """A byte-level BPE tokenizer without merges (each byte one token) and the given special tokens."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from tests.docs_helpers import _bytes_to_unicode

    vocab = {ch: i for i, ch in enumerate(_bytes_to_unicode().values())}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>",
                                                     pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    return tokenizer


def build_tiny_got_ocr2(directory: Path) -> Path:
    """GOT-OCR2 (SAM-style image encoder, Qwen2 decoder) over 64x64 pixels with a byte-level tokenizer."""
    import torch
    import transformers

    torch.manual_seed(0)
    tokenizer = _byte_tokenizer(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<img>", "</img>", "<imgpad>"])
    vision = dict(hidden_size=16, output_channels=8, num_hidden_layers=2, num_attention_heads=2, image_size=64,
                  patch_size=16, window_size=2, global_attn_indexes=[1], mlp_dim=32, initializer_range=0.5)
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, initializer_range=0.5)
    config = transformers.GotOcr2Config(vision_config=vision, text_config=text,
                                        image_token_index=tokenizer.convert_tokens_to_ids("<imgpad>"),
                                        image_seq_length=1)
    model = transformers.GotOcr2ForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    image_processor = transformers.GotOcr2ImageProcessorPil(size={"height": 64, "width": 64})
    transformers.GotOcr2Processor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(directory)
    return directory


MOLMO2_TOKENS = ["<|image|>", "<|video|>", "<im_patch>", "<im_col>", "<im_start>", "<low_res_im_start>",
                 "<frame_start>", "<im_end>", "<frame_end>", "<im_low>"]
# A chat template in the shape of Molmo2's (the image first, then the user's text, then the assistant's turn).
MOLMO2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['content'] is string %}{{ message['role'] }}: {{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}{% if item['type'] == 'image' %}<|image|>{% endif %}{% endfor %}"
    "{{ message['role'] }}: {% for item in message['content'] %}{% if item['type'] == 'text' %}{{ item['text'] }}"
    "{% endif %}{% endfor %}{% endif %} {% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


def build_tiny_molmo2(directory: Path) -> Path:
    """Molmo2 (a ViT, the pooling adapter, a Qwen3-style decoder) over 28x28 crops of 4x4 patches, at most 4 crops,
    with a byte-level tokenizer; the image processor's settings written as its `preprocessor_config.json`."""
    import json

    import torch
    import transformers

    torch.manual_seed(0)
    tokenizer = _byte_tokenizer(["<|im_start|>", "<|im_end|>", "<|endoftext|>", *MOLMO2_TOKENS])
    tokenizer.chat_template = MOLMO2_CHAT_TEMPLATE
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in MOLMO2_TOKENS}
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=8, image_size=[28, 28], patch_size=4, initializer_range=0.5)
    adapter = dict(vision_feature_layer=[-1, 0], hidden_size=16, num_attention_heads=2, num_key_value_heads=2,
                   head_dim=8, intermediate_size=32, text_hidden_size=32, initializer_range=0.5)
    text = dict(vocab_size=len(tokenizer), additional_vocab_size=0, hidden_size=32, intermediate_size=64,
                num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                max_position_embeddings=1024, initializer_range=0.5)
    config = transformers.Molmo2Config(
        vision_config=vision, adapter_config=adapter, text_config=text,
        image_start_token_id=ids["<im_start>"], low_res_image_start_token_id=ids["<low_res_im_start>"],
        image_end_token_id=ids["<im_end>"], image_patch_id=ids["<im_patch>"],
        frame_start_token_id=ids["<frame_start>"], frame_end_token_id=ids["<frame_end>"])
    model = transformers.Molmo2ForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Molmo2ImageProcessor", "size": {"height": 28, "width": 28}, "max_crops": 4,
        "overlap_margins": [1, 1], "patch_size": 4, "pooling_size": [2, 2], "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5], "resample": 2, "rescale_factor": 1 / 255}))
    return directory
