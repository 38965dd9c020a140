"""Records tests/data/mmsearch_r1_golden.json by running MMSearch-R1's own rollout code
(EvolvingLMMs-Lab/multimodal-search-r1 @ 583c6b49, `mmsearch_r1/workers/multimodal/rollout/vllm_rollout_spmd.py`)
over the sessions of tests/profiles/mmsearch_sessions.py, against the FVQA-format cache that module builds from the
photographs in ../shared/data/photos.

What runs as the reference wrote it:
- the rollout's three loops of `generate_sequences`, taken from the file and compiled on their own (the module
  imports vLLM and the trainer): the search trigger (`for i_gen, response_ in zip(to_generate, response)`: the
  end-anchored patterns, the limits, the last text query), the sequential search calls, and the processing of the
  results (`for i_gen_, search_result_ in …`: the question cut from the context, the `<information>` message, the
  chat markup appended, the images added to the trajectory), driven round after round as its `while` loop does with
  the training script's limits (`max_gen_round=3`, `image_search_limit=1`, `text_search_limit=2`);
- the after-search prompts, unpickled from the reference's `mmsearch_r1/prompts/*.pkl`;
- the cache's reading: DeepEyesV2's `image_search` (Visual-Agent/DeepEyesV2 @ 0373e6e0,
  `reinforcement_learning/verl/workers/agent/envs/deepeyesv2/search_utils.py`, the one public reader of FVQA's
  cache) over the cache as its `cache_convert.py` (run as a program) rewrites it, paths made absolute;
- the tools' texts: MMSearch-R1's `call_image_search` and `call_text_search` are stubs that render three dummy
  results; their source is run with the dummies replaced by the cached results (the loop's range, the dummy image,
  the dummy title, the three literal lines of the text stub, and the success flag: a key or query the cache does
  not hold is the stub's failure branch). The replacements are checked to match exactly once each.

Stand-ins, and only these: the tokenizer (a token is a special token or one character; `decode` leaves the special
tokens out when asked), vLLM (the responses are the session's), the text cache's lookup (the query as written, else
stripped: there is no public text-search cache).

    PYTHONPATH=<toolserver checkout> <toolserver venv python> scripts/goldens/record_mmsearch_r1.py \\
        <MMSearch-R1 checkout> <DeepEyesV2 checkout> <out.json>
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.conftest import PHOTOS
from tests.profiles.mmsearch_sessions import IMAGE_ENTRIES, PROMPT, SESSIONS, TEXT_ENTRIES, make_cache

COMMIT = "583c6b49bb6c99db81aab56f64dbbfb8c8e1a9a3"
DEEPEYES_V2_COMMIT = "0373e6e0c923110fd6ff807b30474d8184785562"
ROLLOUT = "mmsearch_r1/workers/multimodal/rollout/vllm_rollout_spmd.py"
SEARCH_UTILS = "reinforcement_learning/verl/workers/agent/envs/deepeyesv2/search_utils.py"
SPECIAL = re.compile(r"(<\|[a-z_]+\|>)")
IMAGE_STUB = {
    "    # Init\n": "    _cached = _image_lookup(image_url)\n    # Init\n",
    "for i in range(3):": "for i in range(len(_cached[0]) if _cached is not None else 0):",
    "Image.fromarray(np.full((64, 64, 3), fill_value=100 + i * 30, dtype=np.uint8))": "_cached[1][i]",
    "title: example webpage title {i+1}": "title: {_cached[0][i]}",
    "tool_success = True": "tool_success = _cached is not None",
}
TEXT_STUB = {
    "    tool_success = True": "    _cached = _text_lookup(text_query)\n    tool_success = _cached is not None",
    ('            "1. (webpage link) Summary of webpage content...\\n"\n'
     '            "2. (webpage link) Summary of webpage content...\\n"\n'
     '            "3. (webpage link) Summary of webpage content...\\n"\n'):
        '            + "".join(f"{i+1}. ({r[\'link\']}) {r[\'snippet\']}\\n" for i, r in enumerate(_cached))\n',
}


class Tokenizer:
    """A token is a special token or one character."""

    def encode(self, text: str) -> list[str]:
        return [piece for part in SPECIAL.split(text) for piece in ([part] if SPECIAL.fullmatch(part) else part)]

    def decode(self, tokens: list[str], skip_special_tokens: bool = False) -> str:
        return "".join(t for t in tokens if not (skip_special_tokens and SPECIAL.fullmatch(t)))


def substituted(source: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert source.count(old) == 1, f"expected exactly one {old!r} in the stub"
        source = source.replace(old, new)
    return source


def rollout_loops(root: Path) -> dict[str, Any]:
    """The trigger, sequential-search and processing loops of `generate_sequences`, compiled."""
    path = root / ROLLOUT
    tree = ast.parse(path.read_text())
    loops: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.For):
            target = ast.unparse(node.target)
            name = {"(i_gen, response_)": "trigger", "i_todo": "search", "(i_gen_, search_result_)": "process"}
            if target in name and name[target] not in loops:
                loops[name[target]] = compile(ast.Module([node], []), str(path), "exec")
    assert set(loops) == {"trigger", "search", "process"}, loops
    return loops


def deepeyes_image_search(de2: Path, cache_file: Path, work: Path) -> Any:
    """DeepEyesV2's `image_search`, over the image entries as its `cache_convert.py` rewrites them."""
    converted = work / "converted.json"
    converted.write_text(json.dumps(IMAGE_ENTRIES))
    subprocess.run([sys.executable, str(de2 / "reinforcement_learning/cache_convert.py"), "--input_json_path",
                    str(converted), "--data_path", str(cache_file.parent)], check=True)
    tree = ast.parse((de2 / SEARCH_UTILS).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "mmsearch_r1_cache_json_path_list":
            node.value = ast.List([ast.Constant(str(converted))], ast.Load())
    namespace: dict[str, Any] = {}
    exec(compile(ast.fix_missing_locations(tree), str(de2 / SEARCH_UTILS), "exec"), namespace)
    return namespace["image_search"]


def tools(root: Path, image_search: Any) -> tuple[Any, Any]:
    def image_lookup(key: str) -> tuple[list[str], list[Image.Image]] | None:
        found = image_search(None, key)
        if found == "Error":
            return None
        return found["tool_returned_web_title"], [Image.open(p) for p in found["cached_images_path"]]

    def text_lookup(query: str) -> list[dict[str, Any]] | None:
        found = TEXT_ENTRIES.get(query)
        return found if found is not None else TEXT_ENTRIES.get(query.strip())

    namespace: dict[str, Any] = {"_image_lookup": image_lookup, "_text_lookup": text_lookup, "print": lambda *a: None}
    for stub, replacements in (("image_search.py", IMAGE_STUB), ("text_search.py", TEXT_STUB)):
        path = root / "mmsearch_r1/utils/tools" / stub
        exec(compile(substituted(path.read_text(), replacements), str(path), "exec"), namespace)
    return namespace["call_image_search"], namespace["call_text_search"]


def pixels_of(image: Image.Image) -> dict[str, Any]:
    return {"size": list(image.size), "mode": image.mode,
            "sha256": hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()}


def run_session(root: Path, loops: dict[str, Any], calls: tuple[Any, Any], session: dict[str, Any]) -> list[Any]:
    tokenizer = Tokenizer()
    prompts = {}
    for kind in ("image", "text"):
        with open(root / f"mmsearch_r1/prompts/after_{kind}_search_prompt_qwenvl.pkl", "rb") as file:
            prompts[kind] = pickle.load(file)
    search = SimpleNamespace(image_search_limit=1, text_search_limit=2, parallel_tool_call=False,
                             user_prompt_after_image_search=prompts["image"],
                             user_prompt_after_text_search=prompts["text"])
    self = SimpleNamespace(tokenizer=tokenizer, config=SimpleNamespace(search=search, max_gen_round=3),
                           user_prompt_after_image_search=prompts["image"],
                           user_prompt_after_text_search=prompts["text"])
    vllm_inputs = [{"prompt_token_ids": tokenizer.encode(PROMPT), "multi_modal_data": {"image": []}}]
    ns: dict[str, Any] = {
        "self": self, "re": re, "torch": torch, "tqdm": lambda it, **kw: it, "print": lambda *a, **kw: None,
        "call_image_search": calls[0], "call_text_search": calls[1], "vllm_inputs": vllm_inputs,
        "non_tensor_batch": {"image_urls": np.array([session["search_key"]], dtype=object)},
        "to_generate": [0], "id_image_gen_cnt": [0], "id_text_gen_cnt": [0], "max_image_gen_round": 1,
        "max_text_gen_round": 2, "max_iterations": 3, "multi_turn_response_mask": [[]],
        "attention_mask": torch.ones(1, 4, dtype=torch.int64), "search_tool_return_images": [[]],
        "threading": None}
    turns = []
    for current_iteration, text in enumerate(session["responses"]):
        assert ns["to_generate"], f"{session['name']}: a response after the trajectory ended"
        ns.update(current_iteration=current_iteration, response=[tokenizer.encode(text)], idx_to_remove=[],
                  id_search_query_mapping={})
        with contextlib.redirect_stdout(io.StringIO()):
            exec(loops["trigger"], ns)
            for x in ns["idx_to_remove"]:
                ns["to_generate"].remove(x)
            start, shown = len(vllm_inputs[0]["prompt_token_ids"]), len(vllm_inputs[0]["multi_modal_data"]["image"])
            if ns["to_generate"]:
                ns["search_result"] = []
                exec(loops["search"], ns)
                ns["to_generate_"] = ns["to_generate"].copy()
                exec(loops["process"], ns)
        turns.append({"action": text, "done": not ns["to_generate"],
                      "appended": tokenizer.decode(vllm_inputs[0]["prompt_token_ids"][start:]),
                      "images": [pixels_of(i) for i in vllm_inputs[0]["multi_modal_data"]["image"][shown:]]})
    assert not ns["to_generate"], f"{session['name']}: the trajectory did not end"
    return turns


def main(root: Path, de2: Path, out: Path) -> None:
    loops = rollout_loops(root)
    with tempfile.TemporaryDirectory() as tmp:
        cache_file = make_cache(Path(tmp) / "cache", PHOTOS)
        calls = tools(root, deepeyes_image_search(de2, cache_file, Path(tmp)))
        sessions = [{"name": s["name"], "search_key": s["search_key"], "turns": run_session(root, loops, calls, s)}
                    for s in SESSIONS]
    golden = {"reference": f"EvolvingLMMs-Lab/multimodal-search-r1@{COMMIT}",
              "cache_reader": f"Visual-Agent/DeepEyesV2@{DEEPEYES_V2_COMMIT}", "pillow": Image.__version__,
              "sessions": sessions}
    out.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
