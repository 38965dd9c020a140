"""Groundlight's reward (profile `groundlight`): the rubric of its TextVQA zoom environment, weighted and summed as its
trainer sums it (float32).

Source: groundlight/r1_vlm @ d87e650, `src/r1_vlm/environments/tool_use_text_vqa_env/tool_use_text_vqa_env.py`
(`TextVQAToolEnv.get_rubric`, `get_reward_weights`), its parser verifiers' `XMLParser` (groundlight/verifiers @
58b872a), its trainer groundlight/trl's `QwenGRPOTrainer` (`(rewards_per_func * weights).sum(dim=1)`, float32).

The conversation: `extra.messages` (the completion's messages as the trainer holds them: role, content parts), else
the turns, each but the last followed by a user turn holding its call's text (the zoom's result, or its
"Error: …"). Messages from the first assistant turn on, consecutive text-only messages of one role merged.

- format (0.1): per assistant turn, 0.4 for `<think>` and exactly one of `<tool>`/`<answer>`, 0.2 always (the
  parser's stripped and unstripped fields coincide), 0.2 when it starts with `<think>`, 0.2 when it ends with the
  closing tag of the tool or answer it holds; the mean over the turns.
- tool execution (0.0): the share of tool turns whose next (user) message holds no "Error:".
- correctness (0.5): the last message's `<answer>`, normalized as the VQA evaluation normalizes (its punctuation,
  number words, articles, contractions), matched against the ten labelers' answers: min(1, matches / 3).
- soft correctness (0.5): 1 − normalized edit distance to each labeler's answer, the best three averaged, at most 1.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from toolserver.rewards.base import Episode, RewardInputError, RewardResult, RuleReward
from toolserver.rewards.groundlight_tables import ARTICLES, CONTRACTIONS, NUMBER_WORDS, PUNCTUATION

WEIGHTS = MappingProxyType({"format": 0.1, "tool_execution": 0.0, "correctness": 0.5, "soft_correctness": 0.5})
FIELDS = ("think", "answer", "tool")
PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
COMMA = re.compile(r"(\d)(\,)(\d)")
PERIOD_LIMIT = 32  # the reference passes re.UNICODE (32) where `sub` takes its count


def field(text: str, name: str) -> str | None:
    """verifiers' XMLParser: the first `<name>…</name>`, stripped; None when absent."""
    match = re.search(rf"<{name}>\s*(.*?)\s*</{name}>", text, re.DOTALL)
    return match.group(1).strip() if match else None


def turn_format(text: str) -> float:
    think, answer, tool = (field(text, name) is not None for name in ("think", "answer", "tool"))
    stripped = text.strip()
    score = 0.0
    if think and tool != answer:
        score += 0.4
    score += 0.2  # "correct spacing": the unstripped parse finds whatever the stripped one finds
    if stripped.startswith("<think>"):
        score += 0.2
    if (tool and stripped.endswith("</tool>")) or (answer and stripped.endswith("</answer>")):
        score += 0.2
    return score


def _punctuation(text: str) -> str:
    out = text
    for mark in PUNCTUATION:
        if mark + " " in text or " " + mark in text or COMMA.search(text) is not None:
            out = out.replace(mark, "")
        else:
            out = out.replace(mark, " ")
    return PERIOD.sub("", out, PERIOD_LIMIT)


def _words(text: str) -> str:
    words = [NUMBER_WORDS.get(word, word) for word in text.lower().split()]
    words = [word for word in words if word not in ARTICLES]
    return " ".join(CONTRACTIONS.get(word, word) for word in words)


def normalize(answer: str) -> str:
    return _words(_punctuation(answer.replace("\n", " ").replace("\t", " ").strip()))


def edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def merged(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    start = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if start is None:
        return []
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for message in messages[start:]:
        if any(part["type"] != "text" for part in message["content"]):
            if current:
                out.append(current)
                current = None
            out.append(message)
        elif current and current["role"] == message["role"]:
            current["content"][0]["text"] += message["content"][0]["text"]
        else:
            if current:
                out.append(current)
            current = {"role": message["role"], "content": [{"type": "text", "text": message["content"][0]["text"]}]}
    if current:
        out.append(current)
    return out


def _text(message: dict[str, Any]) -> str:
    return str(message["content"][0]["text"])


def conversation_of(episode: Episode) -> list[dict[str, Any]]:
    messages = episode.extra.get("messages")
    if messages is None:
        messages = []
        for i, turn in enumerate(episode.turns):
            messages.append({"role": "assistant", "content": [{"type": "text", "text": turn}]})
            if i < len(episode.turns) - 1 and i < len(episode.calls):
                result = f"<result>\n{episode.calls[i].text}\n</result>"
                messages.append({"role": "user", "content": [{"type": "text", "text": result}]})
    return merged([{"role": m["role"], "content": [dict(part) for part in m["content"]]} for m in messages])


def scores(conversation: list[dict[str, Any]], labels: list[str]) -> dict[str, float]:
    turns = [m for m in conversation if m["role"] == "assistant"]
    texts = ["".join(part.get("text", "") for part in m["content"]) for m in turns]
    form = sum(turn_format(text) for text in texts) / len(texts) if texts else 0.0
    attempts = succeeded = 0
    for i, message in enumerate(conversation):
        if message["role"] == "assistant" and field(_text(message), "tool") is not None:
            attempts += 1
            following = conversation[i + 1] if i + 1 < len(conversation) else None
            if following is not None and following["role"] == "user" and "Error:" not in _text(following):
                succeeded += 1
    answer = field(_text(conversation[-1]), "answer") if conversation else None
    hard = soft = 0.0
    if answer is not None:
        given, wanted = normalize(answer), [normalize(label) for label in labels]
        hard = min(1, sum(1 for label in wanted if label == given) / 3)
        closeness = []
        for label in wanted:
            longest = max(len(given), len(label))
            closeness.append(1 - (edit_distance(given, label) / longest if longest else 1.0))
        soft = min(1, sum(sorted(closeness, reverse=True)[:3]) / 3)
    return {"format": form, "tool_execution": 0.0 if attempts == 0 else succeeded / attempts,
            "correctness": hard, "soft_correctness": soft}


class GroundlightReward(RuleReward):
    profile = "groundlight"
    source = ("groundlight/r1_vlm/src/r1_vlm/environments/tool_use_text_vqa_env/tool_use_text_vqa_env.py@d87e650"
              ":TextVQAToolEnv.get_rubric")
    terms = tuple(WEIGHTS)
    weights = WEIGHTS
    description = ("0.1·format + 0.0·tool execution + 0.5·VQA-score correctness + 0.5·edit-distance correctness "
                   "(float32, as its trainer sums)")

    def rule(self, episode: Episode) -> RewardResult:
        labels = episode.ground_truth
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise RewardInputError("the groundlight reward needs the labelers' answers (a list of strings) as the "
                                   "ground truth")
        terms = scores(conversation_of(episode), labels)
        values = np.array([terms[name] for name in WEIGHTS], dtype=np.float32)
        weights = np.array(list(WEIGHTS.values()), dtype=np.float32)
        products = values * weights
        total = np.float32(0)
        for product in products:
            total = np.float32(total + product)
        return RewardResult(total=float(total), terms=terms, weights=dict(WEIGHTS))


REWARDS = (GroundlightReward(),)
