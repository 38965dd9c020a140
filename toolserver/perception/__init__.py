"""The perception models (GroundingDINO, SAM2, GOT-OCR2, Molmo2) behind the node's model service: transformers
architectures loaded from a local directory or the HF cache (never downloaded), batched across sessions like SMFANet
and the encoders."""
