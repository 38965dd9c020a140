"""The compiled punkt (`toolserver.validation.punkt_native`) gives NLTK's own spans: on every text of the
validator tests, on generated texts of each kind punkt decides on, and it hands NLTK what it cannot split."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from toolserver.validation import sentences
from toolserver.validation.punkt_corpus import FIXED, PIECES, tricky_texts
from toolserver.validation.punkt_native import NativePunkt
from toolserver.validation.sentences import english_tokenizer, native_punkt, split

ROOT = Path(__file__).resolve().parents[1]
VALIDATOR_TESTS = ["tests/test_validators.py", "tests/test_validate_api.py", "tests/profiles/test_arm_thinker.py"]


def nltk_spans(text: str) -> list[list[int]]:
    return [list(span) for span in english_tokenizer().span_tokenize(text)]


def string_constants(path: str) -> list[str]:
    tree = ast.parse((ROOT / path).read_text())
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_the_native_splitter_is_in_use_here() -> None:
    assert native_punkt() is not None


@pytest.mark.parametrize("path", VALIDATOR_TESTS)
def test_every_text_of_the_validator_tests(path: str) -> None:
    """Every string written in the validator tests (their sentence-counting texts among them), alone and as
    the sentence checks see it, with its paragraphs' and the whole text's white space trimmed."""
    from toolserver.validation.checks import clean_text, paragraphs

    native = native_punkt()
    assert native is not None
    texts = [*string_constants(path), " ".join(["The quick brown fox jumps over the lazy dog."] * 20)]
    for text in texts:
        for variant in [text, clean_text(text), *paragraphs(clean_text(text))]:
            assert native.spans(variant) == nltk_spans(variant), variant


@pytest.mark.parametrize("kind", list(PIECES))
def test_generated_texts_of_each_kind(kind: str) -> None:
    native = native_punkt()
    assert native is not None
    left = 0
    for text in tricky_texts(600, seed=list(PIECES).index(kind), kinds=(kind,)):
        spans = native.spans(text)
        if spans is None:
            left += 1
            continue
        assert spans == nltk_spans(text), text
    assert left < 120  # the few with an İ or a Σ (one piece in 200)


@pytest.mark.slow
def test_generated_texts_of_every_kind_at_once() -> None:
    native = native_punkt()
    assert native is not None
    for text in FIXED + tricky_texts(2000, seed=12345, max_pieces=80):
        spans = native.spans(text)
        assert spans is None or spans == nltk_spans(text), text


@pytest.mark.parametrize("text", ["Bye.\ud800 Then.", "İstanbul. It is big.", "ΣΟΦΙΑ. Next one.",
                                  "The word ΌΣ. And then."])
def test_what_it_cannot_split_goes_to_nltk(text: str) -> None:
    native = native_punkt()
    assert native is not None and native.spans(text) is None
    assert split(text) == english_tokenizer().tokenize(text)


def test_characters_are_learned_on_first_sight() -> None:
    native = native_punkt()
    assert native is not None
    text = "ꙮ. Ꙭ. ꙭ! 𝔄. 𝔞 done."  # code points above those learned at start
    assert native.spans(text) == nltk_spans(text)
    assert all(native.chars.flags[ord(ch)] for ch in text)


def test_a_failed_self_check_falls_back_to_nltk(monkeypatch: pytest.MonkeyPatch) -> None:
    real = NativePunkt.spans

    def one_more(self: NativePunkt, text: str) -> list[list[int]] | None:
        spans = real(self, text)
        return None if spans is None else [[start, end + 1] for start, end in spans]

    monkeypatch.setattr(NativePunkt, "spans", one_more)
    monkeypatch.setattr(sentences, "_checked", False)
    monkeypatch.setattr(sentences, "_native", None)
    assert native_punkt() is None
    text = "He said “Stop.” Then left."
    assert split(text) == english_tokenizer().tokenize(text) == ["He said “Stop.”", "Then left."]


def test_another_nltks_patterns_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = english_tokenizer()
    monkeypatch.setattr(type(tokenizer._lang_vars), "_re_multi_char_punct", r"(?:\-{2,}|\.{2,})")
    with pytest.raises(ValueError, match="patterns"):
        NativePunkt(tokenizer)
