"""The 19 validators: ARM-Thinker's semantics pinned on ordinary and adversarial texts.

Every expected value is worked out by hand from the described semantics (tests/README-style comments say
how), not read back from the implementation.
"""

from __future__ import annotations

import pytest

from toolserver.validation import checks as c
from toolserver.validation.sentences import english_tokenizer, sent_tokenize

POEM_WITH_DASHES = "Roses are red -\nViolets are blue -\nSugar is sweet -\nAnd so are you"
POEM_PLAIN = "Roses are red\nViolets are blue\nSugar is sweet\nAnd so are you"
LONG = " ".join(["word"] * 3000)


# --------------------------------------------------------------------------------------- sentences
def test_punkt_english_model_is_nltks_and_loaded_once():
    assert english_tokenizer() is english_tokenizer()
    # The English model knows these abbreviations; an untrained Punkt would split after each of them.
    assert sent_tokenize("Dr. Smith met Mr. Brown. They talked.") == ["Dr. Smith met Mr. Brown.", "They talked."]
    assert sent_tokenize("He left at 3 p.m. yesterday. Then he slept.") == [
        "He left at 3 p.m. yesterday.", "Then he slept."]
    # Decimals and ellipses stay inside a sentence; line breaks do not end one.
    assert sent_tokenize("Pi is 3.14 today. Wait... what? Yes!") == ["Pi is 3.14 today.", "Wait... what?", "Yes!"]
    assert sent_tokenize("Line one\nLine two") == ["Line one\nLine two"]
    # A known quirk of the English model (nltk#2376): "e.g." is not an abbreviation it knows.
    assert sent_tokenize("Yes. e.g. this one.") == ["Yes.", "e.g.", "this one."]
    assert sent_tokenize("") == []


def test_punkt_agrees_with_the_packaged_tokenizer():
    import punkt

    texts = ["Mrs. Green paid $3.50 at 5 p.m. on Jan. 5. The U.S. economy grew!", "Hi. (Really?) Ok.",
             "He said “Stop.” Then left.", LONG[:500] + ". And more."]
    for text in texts:
        assert sent_tokenize(text) == punkt.sent_tokenize(text), text


# -------------------------------------------------------------------------------------- paragraphs
@pytest.mark.parametrize("text,count", [
    ("A.\n\nB.\n\nC.", 3),
    ("A.\n   \nB.\n\t\nC.", 3),                 # whitespace-only lines separate paragraphs
    ("A.\r\n\r\nB.", 2),                       # CRLF
    ("A.\nB.", 1),                             # one line break is not a paragraph break
    ("A.\n***\nB.", 1),                        # *** dividers are not understood
    ("- one\n- two\n- three", 1),              # a bullet list is one paragraph
    ("\n\n  \n", 0),
    ("", 0),
])
def test_paragraph_number(text, count):
    assert c.paragraph_number_in_range(text, count, count)
    assert not c.paragraph_number_in_range(text, count + 1, count + 5)


@pytest.mark.parametrize("text,count", [
    ("Dr. Smith arrived. He sat down.", 2),
    ("Line one\nLine two", 1),
    ("  The value is 3.14 today.  \n  Done.  ", 2),   # lines are stripped first
    ("Wait... what? Yes!", 2),
    ("", 0),
    (LONG + ".", 1),
])
def test_sentence_number(text, count):
    assert c.sentence_number_in_range(text, count, count)
    assert not c.sentence_number_in_range(text, count + 1, 10_000)


def test_each_paragraph_sentence_number_and_the_poetry_heuristic():
    # Every line short (0.4) + 3/4 end in "-" (0.3) + 3/4 end in " -" (0.15) = 0.85 > 0.6: poetry, 4 lines.
    assert c.is_poetry(POEM_WITH_DASHES)
    assert c.each_paragraph_sentence_number_in_range(POEM_WITH_DASHES, 4, 4)
    assert not c.each_paragraph_sentence_number_in_range(POEM_WITH_DASHES, 1, 1)
    # Short lines alone score 0.4: not poetry, so Punkt counts one sentence (no full stops, no split on lines).
    assert not c.is_poetry(POEM_PLAIN)
    assert c.each_paragraph_sentence_number_in_range(POEM_PLAIN, 1, 1)
    assert not c.each_paragraph_sentence_number_in_range(POEM_PLAIN, 4, 4)
    # Half the lines ending in "-": 0.4 + 0.2 = 0.6000000000000001 > 0.6, poetry only through rounding.
    assert c.is_poetry("aa-\nbb\ncc-\ndd")
    assert not c.is_poetry("aa -\nbb\ncc\ndd\nee\nff")      # 0.4 + 0.4/6 + 0.2/6 = 0.5
    assert not c.is_poetry("one line -")                    # fewer than two lines
    long_line = "x" * 70 + " -"
    # Long lines all ending " -": 0 + 0.4 + 0.2 is again 0.6000000000000001 in floating point, so poetry.
    assert c.is_poetry(f"{long_line}\n{long_line}")
    assert not c.is_poetry(f"{long_line}\n{'x' * 70}")      # 0 + 0.2 + 0.1 = 0.3
    # Mixed: a prose paragraph of 2 sentences and a dashed poem of 4 lines.
    text = "One. Two.\n\n" + POEM_WITH_DASHES
    assert c.each_paragraph_sentence_number_in_range(text, 2, 4)
    assert not c.each_paragraph_sentence_number_in_range(text, 2, 3)
    assert c.each_paragraph_sentence_number_in_range("", 5, 5)  # no paragraphs: vacuously true


def test_each_paragraph_sentence_number_list():
    text = "One. Two.\n\nThree."
    assert c.each_paragraph_sentence_number_in_range_list(text, [[2, 2], [1, 1]])
    assert not c.each_paragraph_sentence_number_in_range_list(text, [[2, 2]])          # 2 paragraphs, 1 range
    assert not c.each_paragraph_sentence_number_in_range_list(text, [[1, 1], [1, 1]])
    # No poetry mode here: the dashed poem is one Punkt sentence.
    assert c.each_paragraph_sentence_number_in_range_list(POEM_WITH_DASHES, [[1, 1]])
    assert c.each_paragraph_sentence_number_in_range_list("", [])


# ----------------------------------------------------------------------------------------- words
@pytest.mark.parametrize("text,count", [
    ("Hello — world ! 3.14", 5),      # whitespace tokens: punctuation-only tokens count
    ("A well-known fact", 3),         # hyphenated words are one
    ("It's 1,000 km", 3),
    ("COVID-19 #AI C++", 3),
    ("a\r\nb\r\n\r\nc", 3),
    ("", 0),
    (LONG, 3000),
])
def test_word_count(text, count):
    assert c.word_count_in_range(text, count, count)
    assert not c.word_count_in_range(text, 0, count - 1) if count else not c.word_count_in_range(text, 1, 9)


def test_each_paragraph_word_count():
    assert c.each_paragraph_word_count_in_range("a b\n\nc d e", 2, 3)
    assert not c.each_paragraph_word_count_in_range("a b\n\nc d e", 3, 3)
    assert c.each_paragraph_word_count_in_range("", 1, 1)


# ------------------------------------------------------------------------------------ substrings
def test_not_contain_substrings_are_plain_case_insensitive_substrings():
    assert not c.not_contain_substring("Generative models", "gene")   # substring, not a whole word
    assert not c.not_contain_substring("GENERATIVE", "gene")
    assert c.not_contain_substring("no commas here", ",")
    assert not c.not_contain_substring("one, two", ",")
    assert not c.not_contain_substring("I have known it", "no")
    assert c.not_contain_substring("", "x")
    assert not c.not_contain_substrings("Large MODELS", ["xyz", "model"])
    assert c.not_contain_substrings("Large models", ["xyz", "abc"])
    assert c.not_contain_substrings("anything", [])


# ----------------------------------------------------------------------------------- begins/ends
def test_each_sentence_begins_and_ends():
    assert c.each_sentence_begins_with("The cat sat. The dog ran.", "the")
    assert not c.each_sentence_begins_with("The cat sat. A dog ran.", "the")
    assert not c.each_sentence_begins_with("“The cat sat.” The dog ran.", "the")    # curly quote comes first
    assert c.each_sentence_begins_with("...The end. The start.", "the")           # leading dots dropped
    assert c.each_sentence_begins_with("", "anything")                            # no sentences
    assert c.each_sentence_ends_with("I like apple. You like apple.", "apple")     # trailing "." dropped
    assert c.each_sentence_ends_with("I like apple… You like apple...", "APPLE")   # and "…"
    assert not c.each_sentence_ends_with("I like apple!", "apple")                # "!" is kept
    assert c.each_sentence_ends_with("I like apple!", "apple!")


def test_each_paragraph_begins_and_ends_use_raw_paragraphs():
    assert c.each_paragraph_begins_with("  Note: a.\n\nNote: b.", "note:")
    assert not c.each_paragraph_begins_with("Note: a.\n\nAlso: b.", "note:")
    assert c.each_paragraph_ends_with("End here.\r\n\r\nAlso end here.", "here")   # CRLF paragraphs
    assert not c.each_paragraph_ends_with("End here.\n\nEnd now.", "here")
    assert c.each_paragraph_ends_with("End here.\n\nEnd there.", "here")       # "there" ends with "here"
    assert c.each_paragraph_begins_with("", "x")


def test_whole_response_begins_and_ends():
    assert c.response_begins_with("...Once upon a time, there was", "once upon a time")
    # Only dots are stripped, and only at the two ends of the whole string: the comma stays.
    assert not c.response_begins_with("Once upon a time... there", "once upon a time,")
    assert c.response_begins_with("…Hello world…", "hello") and c.response_ends_with("…Hello world…", "WORLD")
    assert c.response_ends_with("Any questions?", "questions?")
    assert not c.response_ends_with("Any questions?", "questions")
    assert c.response_ends_with("abc", "...")        # "..." normalises to "" and matches everything
    assert c.response_begins_with('"Quoted"', '"')
    assert not c.response_begins_with("", "x") and c.response_begins_with("", "")


# -------------------------------------------------------------------------------------- keywords
def test_keyword_counting():
    text = "AI is here. ai? #AI #AIart"
    # Whole word, case-insensitive: "AI", "ai" and the AI in "#AI" ("#" is not a word character); not "#AIart".
    assert c.keyword_count(text, "AI") == 3
    # A "#" keyword is a bare prefix match: "#AI" and "#AIart".
    assert c.keyword_count(text, "#AI") == 2
    assert c.keyword_count("C++ is great, I love C++", "C++") == 0   # no word boundary after "+": never matches
    assert c.keyword_count("I bought SNEAKERS", "sneaker") == 0
    assert c.keyword_count("COVID-19 cases", "covid") == 1
    assert c.keyword_count("", "x") == 0
    assert c.each_keyword_mentioned_in_range("cat dog cat", ["cat", "dog"], 1, 2)
    assert not c.each_keyword_mentioned_in_range("cat dog cat", ["cat", "dog"], 2, 2)
    assert c.total_keywords_mentioned_in_range("cat dog cat", ["cat", "dog"], 3, 3)
    assert not c.total_keywords_mentioned_in_range("I love C++", ["C++"], 1, 10)
    assert c.each_keyword_mentioned_in_range("anything", [], 5, 5)      # no keywords: vacuously true
    assert c.total_keywords_mentioned_in_range("anything", [], 0, 0)


# ------------------------------------------------------------------------------------- numbers
def test_percentage_precision_sees_only_decimals_directly_before_percent():
    assert not c.percentage_precision("Growth was 12.50% and 3.1%", 2)
    assert c.percentage_precision("Growth was 12.50% and 3.10%", 2)
    assert c.percentage_precision("Integers 50% and spaced 12.5 % are ignored", 3)
    assert c.percentage_precision("1,234.56% of target", 2)           # matches "234.56"
    assert c.percentage_precision("", 4)


def test_number_precision_ignores_integers():
    text = "Pi is 3.14 and e is 2.72, with 1,000 items and 50% off"
    assert c.number_precision(text, 2)
    assert not c.number_precision(text, 0)
    assert c.number_precision("version 1.2.3", 1)                      # "1.2" then ".3" has no leading digit
    assert c.number_precision("only 7 integers 42", 5)
    assert not c.number_precision("12.50 % and 3.1", 2)


@pytest.mark.parametrize("text,clean", [
    ("I have 2.", False),
    ("3.14", False),
    ("1,000 people", False),
    ("50% off", False),
    ("12.50 %", False),
    ("COVID-19", False),
    ("٣ apples", False),        # Arabic-Indic digit: \d is Unicode
    ("５ apples", False),       # fullwidth digit
    ("2nd place, H2O and v2", True),   # no word boundary between digit and letter
    ("no numbers at all", True),
    ("", True),
])
def test_no_arabic_number(text, clean):
    assert c.no_arabic_number(text) is clean


def test_a_3000_word_response_runs_every_check():
    text = "\n\n".join(" ".join(["The quick brown fox jumps over the lazy dog."] * 20) for _ in range(33))
    assert c.word_count_in_range(text, 5940, 5940)
    assert c.paragraph_number_in_range(text, 33, 33)
    assert c.sentence_number_in_range(text, 660, 660)
    assert c.each_paragraph_sentence_number_in_range(text, 20, 20)
    assert c.each_sentence_begins_with(text, "the quick")
    assert c.total_keywords_mentioned_in_range(text, ["fox", "dog"], 1320, 1320)
    assert c.no_arabic_number(text)
