"""The validators' faster text handling gives ARM-Thinker's regular expressions' answers: `normalize`, the
keyword count and the decimal places, each against the expression it replaces, on random texts built from the
characters where they could differ."""

from __future__ import annotations

import random
import re

from toolserver.validation import checks as c

ALPHABET = [*list("aAbB_ 1234567890.%,-#…\n\t"), "٣", "５", "²", "é", "É", "ſ", "K", "İ", "ß", "\xa0", "\u2028"]
KEYWORDS = ["a", "ab", "A_b", "1", "12", "#a", "#", "#AB", "a.b", "-", "a-", "é", "_", "ß", "k", "s", ".", "…", "a b"]


def texts(count: int, seed: int, *, ascii_only: bool = False) -> list[str]:
    rng = random.Random(seed)
    alphabet = [ch for ch in ALPHABET if ch.isascii()] if ascii_only else ALPHABET
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(count)]


def arm_normalize(text: str) -> str:
    text = text.strip().lower()
    text = re.sub(r"[.…]+$", "", re.sub(r"^[.…]+", "", text))
    return text.strip()


def arm_keyword_count(text: str, keyword: str) -> int:
    escaped = re.escape(keyword)
    pattern = escaped if keyword.startswith("#") else rf"\b{escaped}\b"
    return len(re.findall(pattern, text, re.IGNORECASE))


def arm_places(text: str, percent: bool) -> list[int]:
    return [len(m.split(".")[1]) for m in re.findall(r"(\d+\.\d+)%" if percent else r"(\d+\.\d+)", text)]


def test_normalize_is_arm_thinkers() -> None:
    for text in [*texts(20000, 1), "...", "…a…", " ..x.. ", ".\n.", "a.\n", "\n…\n"]:
        assert c.normalize(text) == arm_normalize(text), repr(text)


def test_keyword_count_is_arm_thinkers() -> None:
    rng = random.Random(2)
    for text in texts(20_000, 2, ascii_only=True) + texts(5_000, 3):  # ASCII: the fast path
        keyword = rng.choice(KEYWORDS)
        assert c.keyword_count(text, keyword) == arm_keyword_count(text, keyword), (text, keyword)
    assert c.keyword_count("#AIart #ai #A", "#AI") == 2
    assert c.keyword_count("Market, market; MARKETS", "market") == 2


def test_decimal_places_are_arm_thinkers() -> None:
    for text in [*texts(40000, 3), "1.2.3.4", "1.2%.3%", "12.34%5.6%", "1.2.3%", "٣.٥%", "a1.5b"]:
        assert c.decimal_places(text) == arm_places(text, False), repr(text)
        assert c.decimal_places(text, percent=True) == arm_places(text, True), repr(text)
