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
