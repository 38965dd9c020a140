"""Records tests/data/vrag_rl_golden.json by running VRAG-RL's own rollout code (Alibaba-NLP/VRAG @ 24f8d055,
`VRAG-RL/vrag_agent/generation.py`) over the sessions of tests/profiles/vrag_sessions.py: `LLMGenerationManager`'s
`_postprocess_responses`, `postprocess_predictions`, `execute_predictions` and `_process_next_obs` and the module's
`process_image`, taken from that file as they are and compiled on their own (the module imports the trainer), run
as its training loop runs them (`is_validation=False`) for one trajectory, turn after turn: the response's tags kept,
the action read, the search sent to `search_url`, the observation made (the text appended and its images), each
image appended to the trajectory's `multi_modal_data` (`_concat_multi_modal_data`'s effect).

The search engine is this server's (the retriever is ours, by design): `search_url` is toolserver's `GET
/vrag/search` on a library holding the sessions' corpus, reached through FastAPI's test client. Stand-ins, and only
these: the tokenizer (`batch_decode` hands back the text, `eos_token` is Qwen2.5-VL's `<|im_end|>`; token ids are
not recorded), the processor (`image_token` `<|image_pad|>`, one token a grid, so each image reads as the rollout's
unexpanded `<|vision_start|><|image_pad|><|vision_end|>`), `BatchFeature` (a dict), `requests` (the test client).

    PYTHONPATH=<toolserver checkout> HF_HUB_OFFLINE=1 <toolserver venv python> scripts/goldens/record_vrag_rl.py \\
        <VRAG checkout> <out.json>
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import platform
import re
import sys
import tempfile
from pathlib import Path
from types import MethodType, SimpleNamespace
from typing import Any

import numpy as np
import PIL
import torch
from fastapi.testclient import TestClient
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.conftest import PHOTOS
from tests.profiles.vrag_sessions import DOCUMENT, LIBRARY_SETTINGS, PAGES, SESSIONS, make_corpus_pdf
from toolserver.api import create_app
from toolserver.config import Settings

COMMIT = "24f8d055989cf6ee1a348646bca6d947b4409b26"
METHODS = ["_postprocess_responses", "postprocess_predictions", "execute_predictions", "_process_next_obs"]


class Grid:
    def prod(self) -> int:
        return 4  # merge_size ** 2: one image token a grid


class Tokenizer:
    eos_token = "<|im_end|>"
    pad_token = "<|endoftext|>"

    def batch_decode(self, responses: list[str], skip_special_tokens: bool = True) -> list[str]:
        return list(responses)

    def __call__(self, texts: Any, **kwargs: Any) -> dict[str, Any]:
        return {"input_ids": None}


def reference(root: Path, client: TestClient) -> tuple[Any, Any]:
    path = root / "VRAG-RL/vrag_agent/generation.py"
    tree = ast.parse(path.read_text())
    process_image = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "process_image")
    manager = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LLMGenerationManager")
    methods = [n for n in manager.body if isinstance(n, ast.FunctionDef) and n.name in METHODS]
    requests = SimpleNamespace(get=lambda url, params: client.get(url, params=params))
    namespace: dict[str, Any] = {"re": re, "json": json, "math": math, "np": np, "torch": torch, "Image": Image,
                                 "List": list, "Dict": dict, "Any": Any, "Tuple": tuple, "BatchFeature": dict,
                                 "requests": requests}
    exec(compile(ast.Module([process_image, *methods], []), str(path), "exec"), namespace)
    processor = SimpleNamespace(tokenizer=Tokenizer(), image_token="<|image_pad|>", image_processor=ImageProcessor())
    self = SimpleNamespace(processor=processor, tokenizer=processor.tokenizer, is_validation=False,
                           config=SimpleNamespace(search_url="/vrag/search"), _batch_tokenize=lambda texts: None)
    for name in METHODS:
        setattr(self, name, MethodType(namespace[name], self))
    return self, namespace["process_image"]


class ImageProcessor:
    merge_size = 2

    def __call__(self, images: list[Any], return_tensors: str = "pt") -> dict[str, Any]:
        return {"image_grid_thw": [Grid() for _ in images]}


def pixels_of(image: Image.Image) -> dict[str, Any]:
    return {"size": list(image.size), "mode": image.mode, "sha256": hashlib.sha256(image.tobytes()).hexdigest()}


def run_session(manager: Any, turns: list[str], pages: dict[str, list[Any]]) -> list[dict[str, Any]]:
    manager.retrievaled_images = [[]]
    rollings = SimpleNamespace(non_tensor_batch={"multi_modal_data": [{"image": []}]})
    recorded = []
    for text in turns:
        _, responses = manager._postprocess_responses([text])
        next_obs, dones = manager.execute_predictions(responses, "<|endoftext|>", [True])
        _, obs_str, multi_modal_data, _ = manager._process_next_obs(next_obs, rollings)
        images = multi_modal_data[0]["image"]
        rollings.non_tensor_batch["multi_modal_data"][0]["image"].extend(images)
        record: dict[str, Any] = {"action": text, "kept": responses[0], "done": bool(dones[0]),
                                  "appended": obs_str[0], "images": [pixels_of(image) for image in images]}
        if manager.retrievaled_images[0]:
            record["last_retrieved"] = pages[manager.retrievaled_images[0][-1]]
        recorded.append(record)
        if dones[0]:
            break
    return recorded


def main(root: Path, out: Path) -> None:
    import nltk.stem.porter  # noqa: F401 - before the server's start-up check imports nltk in a thread beside ours
    tmp = Path(tempfile.mkdtemp())
    pdf = make_corpus_pdf(tmp / f"{DOCUMENT}.pdf", PHOTOS)
    settings = Settings(data_dir=tmp / "data", allowed_roots=[tmp], sr_model_dir=tmp / "none", **LIBRARY_SETTINGS)
    with TestClient(create_app(settings)) as client:
        ingested = client.post("/v1/documents?wait=true", json={"path": str(pdf)})
        assert ingested.status_code == 200, ingested.text
        library = client.app.state.core.documents  # type: ignore[attr-defined]
        pages = {str(path): [DOCUMENT, page] for page in range(1, len(PAGES) + 1)
                 for path in library.page_candidates(DOCUMENT, page) if path.exists()}
        manager, _ = reference(root, client)
        sessions = [{"name": name, "turns": run_session(manager, turns, pages)} for name, turns in SESSIONS.items()]
    out.write_text(json.dumps({
        "source": f"github Alibaba-NLP/VRAG@{COMMIT} (VRAG-RL/vrag_agent/generation.py)",
        "produced_by": ("the reference's own LLMGenerationManager methods and process_image over toolserver's "
                        f"/vrag/search; Python {platform.python_version()}, Pillow {PIL.__version__}"),
        "sessions": sessions}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
