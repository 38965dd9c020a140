"""ARM-Thinker's rewards (profiles `arm-thinker`, `arm-thinker-qwen3vl`): InternLM/ARM-Thinker @ 96b1baf,
`verl/utils/reward_score/`, picked by `data_source` as its `default_compute_score` picks it (with the reward
versions its environment variables default to):

- a `data_source` holding `mmif` (the default: the instruction-following task, answered with the 19 validators):
  `mmif.compute_score`. The first `<answer>Overall Judgment: True|False</answer>` of the text (any case) against
  `str(ground_truth).lower()`: 1.0 when they agree, else 0.0 (none found: 0.0).
- `deepeyes_crop` (`REWARD_MODEL_VERSION` v8): `pair_rm_with_tool_reward_v8`; `llava_critic` with
  `LC_REWARD_VERSION=v4` uses it too. The last assistant turn (after the last `assistant\\n`) must be exactly
  `<think>…</think><answer>…</answer>` without `<tool_call>` tags, else 0.0; the answer's last "Answer 1|2 is
  (the) (slightly) better|preferred|correct", else the answer itself lowercased, against the ground truth:
  right 1.0, or 1.5 when a tool result says "This is the zoom-in image"; wrong 0.3, or 0.4 when the text holds a
  `<tool_response>`.
- `llava_critic` (`LC_REWARD_VERSION` v3, the default): `llava_critic_reward_v3`: 1.0 when that choice (from the
  strict answer, or from the whole last turn when the shape is off) is the ground truth, else 0.0.
- `mp_docvqa` (`MP_DOCVQA_REWARD_VERSION` v1): `mp_docvqa_reward_v1`, v8's shape and scores with the choice read
  by `eval_utils.utils`' `extract_choice_from_resp_single_rm` or `…_pair_rm` (`extra.rm_tag`), ground truths -2
  and -1 meaning "false" and "true", and successful tools "Concatenated page images for query" / "Here is page
  image #".

The text these read is the decoded response (verl decodes without special tokens): `response` as given, or,
when the turns are given, each turn followed by the tool turn of its calls (from the call log, matched to the turns
by the profile's call format) as Qwen's chat template renders tool messages without its special tokens,
`\\nuser\\n<tool_response>\\n{text}\\n</tool_response>\\nassistant\\n` for each (`terms` count those).
"""

from __future__ import annotations

import re
from typing import Any

from toolserver.profiles import get_profile
from toolserver.rewards.base import Episode, RewardInputError, RewardResult, RuleReward
from toolserver.rewards.text import with_tool_turns

SOURCE = "InternLM/ARM-Thinker/verl/utils/reward_score@96b1baf"
JUDGMENT = re.compile(r"<answer>Overall Judgment:\s*(True|False)</answer>", re.IGNORECASE)
STRICT = re.compile(r"^\s*<think>\s*(?P<think>.*?)\s*</think>\s*<answer>\s*(?P<answer>.*?)\s*</answer>\s*$",
                    re.DOTALL | re.IGNORECASE)
BANNED = re.compile(r"</?tool_call>", re.IGNORECASE)
PAIR_CHOICE = re.compile(r"Answer\s*([12])\s*is\s*(?:the\s*)?(?:slightly\s*)?(?:better|preferred|correct)",
                         re.IGNORECASE)
DOC_PAIR = re.compile(r"Answer\s*(\d+)\s*is\s*(?:the\s*)?(?:slightly\s*)?(?:better|preferred)", re.IGNORECASE)
DOC_PAIR_TAG = re.compile(r"<answer>\s*(\d+)\s*</answer>", re.IGNORECASE)
SINGLE_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
SINGLE_WORD = re.compile(r"\b(True|False)\b", re.IGNORECASE)
# The reference's fallback: a pattern without a group, so the last (empty) match is what it returns.
SINGLE_FALLBACK = re.compile(r"(?:Overall\s*Judgment\s*[:：\-]?\s*)?(?:The\s*answer\s*is\s*)?", re.IGNORECASE)
ZOOM_DONE = "This is the zoom-in image"
PAGES_DONE = ("Concatenated page images for query", "Here is page image #")
VARIANTS = ("mmif", "deepeyes_crop", "llava_critic", "mp_docvqa")


def decoded(episode: Episode) -> str:
    return with_tool_turns(episode, get_profile(episode.profile).format)


def last_turn(text: str) -> str:
    parts = text.split("assistant\n")
    return parts[-1].strip() if len(parts) > 1 else text.strip()


def strict_answer(text: str) -> str | None:
    """The answer of a last turn of the strict shape, or None."""
    turn = last_turn(text)
    found = STRICT.match(turn)
    return found.group("answer").strip() if found and not BANNED.search(turn) else None


def pair_choice(text: str) -> int | None:
    found = list(PAIR_CHOICE.finditer(text))
    return int(found[-1].group(1)) if found else None


def single_rm_choice(text: str) -> str:
    tagged = SINGLE_TAG.search(text)
    if tagged:
        word = SINGLE_WORD.search(tagged.group(1))
        if word:
            return word.group(1).capitalize()
    return SINGLE_FALLBACK.findall(text)[-1].capitalize()


def doc_pair_choice(text: str) -> int | None:
    for pattern in (DOC_PAIR, DOC_PAIR_TAG):
        found = list(pattern.finditer(text))
        if found:
            return int(found[-1].group(1))
    return None


class ArmThinkerReward(RuleReward):
    source = SOURCE
    terms = ("score", "correct", "format", "tool_bonus")
    description = ("By data_source: the instruction-following judgment (mmif, default), the pairwise critic with "
                   "its tool bonus (deepeyes_crop), llava_critic v3, mp_docvqa v1.")

    def __init__(self, profile: str):
        self.profile = profile

    def check(self, episode: Episode) -> None:
        if self._variant(episode) == "mp_docvqa" and episode.extra.get("rm_tag") not in ("single_rm", "pair_rm"):
            raise RewardInputError(f"mp_docvqa needs extra.rm_tag `single_rm` or `pair_rm` (its reward raises "
                                   f"ValueError: Invalid rm_tag: {episode.extra.get('rm_tag')})")

    def _variant(self, episode: Episode) -> str:
        source = str(episode.extra.get("data_source", "mmif"))
        if "mmif" in source:
            return "mmif"
        if source == "llava_critic" and episode.extra.get("reward_version") == "v4":
            return "deepeyes_crop"
        if source not in VARIANTS:
            raise RewardInputError(f"ARM-Thinker has no reward for data_source {source!r} (its reward_score "
                                   f"raises NotImplementedError); one of {', '.join(VARIANTS)}")
        return source

    def rule(self, episode: Episode) -> RewardResult:
        self.check(episode)
        text = decoded(episode)
        variant = self._variant(episode)
        if variant == "mmif":
            found = JUDGMENT.search(text)
            judged = found.group(1).lower() if found else None
            correct = judged is not None and judged == str(episode.ground_truth).lower()
            return self._result(1.0 if correct else 0.0, correct, found is not None, 0.0, episode,
                                {"judgment": judged, "variant": variant})
        if variant == "llava_critic":
            answer = strict_answer(text)
            choice = pair_choice(answer if answer is not None else last_turn(text))
            correct = choice is not None and str(choice) == str(episode.ground_truth).strip().lower()
            return self._result(1.0 if correct else 0.0, correct, answer is not None, 0.0, episode,
                                {"choice": choice, "variant": variant})
        return self._tool_shaped(episode, text, variant)

    def _tool_shaped(self, episode: Episode, text: str, variant: str) -> RewardResult:
        answer = strict_answer(text)
        details: dict[str, Any] = {"variant": variant}
        if answer is None:
            return self._result(0.0, False, False, 0.0, episode, details, violation="format")
        truth = episode.ground_truth
        if variant == "mp_docvqa":
            truth = "false" if truth == -2 else "true" if truth == -1 else truth
            chosen = str(single_rm_choice(answer) if episode.extra["rm_tag"] == "single_rm"
                         else doc_pair_choice(answer))
            predicted = chosen.strip().lower()
            successes = sum(text.count(marker) for marker in PAGES_DONE)
        else:
            choice = pair_choice(answer)
            predicted = str(choice) if choice is not None else answer.strip().lower()
            successes = text.count(ZOOM_DONE)
        correct = predicted == str(truth).strip().lower()
        used = text.count("<tool_response>") > 0
        bonus = 0.5 if correct and successes > 0 else 0.0
        score = (1.0 + bonus) if correct else (0.4 if used else 0.3)
        details |= {"predicted": predicted, "tool_responses": text.count("<tool_response>"), "successes": successes}
        return self._result(score, correct, True, bonus, episode, details)

    def _result(self, score: float, correct: bool, format_ok: bool, bonus: float, episode: Episode,
                details: dict[str, Any], violation: str | None = None) -> RewardResult:
        terms = {"score": score, "correct": 1.0 if correct else 0.0, "format": 1.0 if format_ok else 0.0,
                 "tool_bonus": bonus}
        return RewardResult(total=score, terms=terms, finished=not episode.truncated, violation=violation,
                            details=details)


REWARDS = (ArmThinkerReward("arm-thinker"), ArmThinkerReward("arm-thinker-qwen3vl"))
