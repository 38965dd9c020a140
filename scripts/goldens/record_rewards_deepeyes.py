"""Records tests/data/rewards/deepeyes.json by running DeepEyes' own reward code (Visual-Agent/DeepEyes @ 6c5e796,
`verl/utils/reward_score/vl_agent.py`) against a local judge server that records each request and answers with the
verdict the case scripts.

- `vl_agent.py` is loaded from the checkout by its path (it needs openai, requests and math-verify: record from a
  throwaway venv, e.g. `python -m venv /tmp/rv && /tmp/rv/bin/pip install openai requests math-verify==0.8.0 pillow
  numpy`); its judge base is `LLM_AS_A_JUDGE_BASE`, its model the first of the server's `/models`.
- The function is picked by `data_source` as `verl/utils/reward_score/__init__.py` picks it (that file imports
  torch; its table is restated here).
- The decoded response of the multi-turn cases is built as DeepEyes' rollout builds it: each turn followed by the
  `prompt` its `VisualToolBoxV5.execute` returns for it (`verl/workers/agent/envs/mm_process_engine/`, loaded from
  the checkout with empty stand-ins for the `verl`, `verl.workers` and `verl.workers.agent` packages, whose
  `__init__`s import the trainer), `<image>` replaced by Qwen-VL's vision tokens as `parallel_env.py` does. The
  calls it ran are recorded with the episode, as toolserver's call log would hold them.

    /tmp/rv/bin/python scripts/goldens/record_rewards_deepeyes.py <deepeyes checkout> tests/data/rewards/deepeyes.json
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reward_recording import Judge, load

SOURCE = "Visual-Agent/DeepEyes/verl/utils/reward_score/vl_agent.py@6c5e796"
FUNCTION = {"vstar": "compute_score", "vl_agent": "compute_score", "chart": "compute_score",
            "geoguessr": "compute_common_reasoning", "thinklite_eureka": "compute_score_math",
            "xince": "compute_score_math"}
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
IMAGE_SIZE = (640, 480)


def toolbox(checkout: Path) -> Any:
    for package in ("verl", "verl.workers", "verl.workers.agent", "verl.workers.agent.envs",
                    "verl.workers.agent.envs.mm_process_engine"):
        sys.modules[package] = types.ModuleType(package)
    load(checkout / "verl/workers/agent/tool_envs.py", "verl.workers.agent.tool_envs")
    engine = checkout / "verl/workers/agent/envs/mm_process_engine"
    load(engine / "prompt.py", "verl.workers.agent.envs.mm_process_engine.prompt")
    return load(engine / "visual_toolbox_v5.py", "verl.workers.agent.envs.mm_process_engine.visual_toolbox_v5")


def rollout(module: Any, turns: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """The decoded response of `turns` as DeepEyes' rollout builds it, and the calls its toolbox ran."""
    box = module.VisualToolBoxV5("visual_toolbox_v5", "", {})
    box.reset(raw_prompt=[], multi_modal_data={}, origin_multi_modal_data={"image": [Image.new("RGB", IMAGE_SIZE)]})
    response, calls = "", []
    for turn in turns[:-1]:
        obs, _, done, info = box.execute(turn)
        assert not done, turn
        prompt = obs["prompt"] if isinstance(obs, dict) else obs
        images = len(obs["multi_modal_data"]["image"]) if isinstance(obs, dict) else 0
        calls += turn_calls(turn, info, images, prompt)
        response += turn + prompt.replace("<image>", VISION)
    return response + turns[-1], calls


def turn_calls(turn: str, info: dict[str, Any], images: int, prompt: str) -> list[dict[str, Any]]:
    """What toolserver's call log holds for a turn of these cases: each call read, a failed one with its text."""
    blocks = [json.loads(b.split("</tool_call>")[0].strip()) for b in turn.split("<tool_call>")[1:]][:3]
    if info.get("status") == "success":
        return [{"tool": b["name"], "ok": True, "images": 1} for b in blocks]
    text = prompt.split("user\n", 1)[1].split("<|im_end|>")[0]
    return [{"tool": b["name"], "ok": False, "text": text, "error_code": "invalid_box"} for b in blocks[:1]]


def main() -> None:
    checkout, out = Path(sys.argv[1]), Path(sys.argv[2])
    judge = Judge()
    os.environ["LLM_AS_A_JUDGE_BASE"] = judge.url
    vl_agent = load(checkout / "verl/utils/reward_score/vl_agent.py", "vl_agent")
    tools = toolbox(checkout)
    from deepeyes_reward_cases import CASES

    cases = []
    for case in CASES:
        episode = dict(case["episode"])
        if "turns" in episode:
            episode["response"], episode["calls"] = rollout(tools, episode["turns"])
        source = episode.get("extra", {}).get("data_source", "vl_agent")
        judge.answers, judge.requests = list(case.get("answers", [])), []
        total = getattr(vl_agent, FUNCTION[source])(episode["response"], episode["ground_truth"],
                                                    {"question": episode.get("question")})
        assert not judge.answers, (case["name"], "verdicts left unasked")
        cases.append({"name": case["name"], "episode": episode, "judge": judge.requests,
                      "expected": {"total": float(total)}})
    out.write_text(json.dumps({"profile": "deepeyes", "source": SOURCE, "image_size": list(IMAGE_SIZE),
                               "recorded_with": "record_rewards_deepeyes.py, math-verify 0.8.0, openai client",
                               "cases": cases}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
