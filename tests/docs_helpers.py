"""Documents the tests build themselves: PDFs with a text layer (reportlab) and a tiny CLIP model."""

from __future__ import annotations

from pathlib import Path

# Six pages on distinct subjects; each has an identifier that appears on no other page.
PAGES = [
    "Installing the package. Run pip install toolserver and start the server with toolserver serve.",
    "Reading data files. The function read_csv_table loads comma separated values into a data frame.",
    "Drawing plots. Call draw_scatter_plot to show points; the colour of each marker is configurable.",
    "Linear regression. The fit_linear_model routine estimates coefficients by least squares.",
    "Figure 5: Histogram of residuals after fitting, with the normal density curve overlaid.",
    "Table 6: Keyboard shortcuts of the interactive console, such as Ctrl-L to clear the screen.",
]


def make_pdf(path: Path, texts: list[str] = PAGES, *, encrypt: str | None = None) -> Path:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=A4, encrypt=encrypt)
    for number, text in enumerate(texts, start=1):
        pdf.setFont("Helvetica", 14)
        pdf.drawString(60, 780, f"Page {number}")
        y = 740
        words = text.split()
        for start in range(0, len(words), 10):  # wrap at ten words a line
            pdf.drawString(60, y, " ".join(words[start:start + 10]))
            y -= 22
        pdf.rect(60, 200, 300, 150 + 40 * number)  # a shape, so pages differ as images too
        pdf.showPage()
    pdf.save()
    return path


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2/CLIP byte-level alphabet: printable bytes map to themselves, the rest to code points above 255.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, codes), strict=True))


def build_tiny_clip(directory: Path) -> Path:
    """A randomly initialised CLIP (about 60k parameters) saved as a sentence-transformers folder.

    The layout is what `SentenceTransformer(path)` loads for the real clip-ViT-B-32, so the server's
    loading code runs for real; only the weights are tiny.
    """
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer

    hf_dir, st_dir = directory / "hf", directory / "st"
    alphabet = list(_bytes_to_unicode().values())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab.update({ch + "</w>": i + len(alphabet) for i, ch in enumerate(alphabet)})
    bos, eos = len(vocab), len(vocab) + 1
    vocab.update({"<|startoftext|>": bos, "<|endoftext|>": eos})
    tokenizer = transformers.CLIPTokenizer(vocab=vocab, merges=[], model_max_length=32)
    torch.manual_seed(0)
    config = transformers.CLIPConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=32, bos_token_id=bos, eos_token_id=eos,
                         pad_token_id=eos),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8, num_channels=3),
        projection_dim=16)
    transformers.CLIPModel(config).eval().save_pretrained(hf_dir)
    processor = transformers.CLIPProcessor(
        image_processor=transformers.CLIPImageProcessorPil(size={"shortest_edge": 32},
                                                           crop_size={"height": 32, "width": 32}),
        tokenizer=tokenizer)
    processor.save_pretrained(hf_dir)
    SentenceTransformer(modules=[Transformer(str(hf_dir))], device="cpu").save(str(st_dir))
    return st_dir
