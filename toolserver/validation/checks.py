"""ARM-Thinker's 19 instruction-following checks, with its semantics kept exactly (quirks included).

Each check is a pure function `(response, **params) -> bool`. Text handling follows ARM-Thinker's
`verl/tools/instruction_following_tool.py`:
- *cleaning* strips every line and the whole text (`\\r\\n` and other line breaks count as line ends);
- a *paragraph* is a run of text between blank lines (a line of only whitespace is blank);
- *sentences* come from NLTK's English Punkt model, which does not split on line breaks;
- *normalised* matching (begins/ends checks) lower-cases, trims, and drops runs of `.` and `…` at both ends;
- every range is inclusive: `lower <= n <= upper`.

Behaviour that surprises, kept on purpose because trained policies and rewards depend on it (each pinned by a
test and listed in docs/decisions.md): the substring checks are plain case-insensitive substrings ("gene" is in
"Generative"); keywords are whole words, except that a keyword starting with `#` is matched as a bare prefix
("#AI" counts in "#AIart"), and a keyword that starts or ends with a non-word character such as "C++" can never
match; the number check sees Unicode digits but not "2nd" or "H2O"; both precision checks ignore integers
(despite the description the model sees); and a paragraph is "poetry" only when its lines are short *and*
mostly end in "-".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache

from toolserver.validation.sentences import forget_sentences, sent_tokenize

PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
STANDALONE_NUMBER = re.compile(r"\b\d+\b")
# ARM-Thinker finds decimals with `(\d+\.\d+)%` and `(\d+\.\d+)` and counts the digits after the point. These
# find the same decimal points from the point itself (a literal first: the engine skips ahead to each "."); a
# point whose digit before it ended the previous decimal is not one (`decimal_places`).
FRACTION_BEFORE_PERCENT = re.compile(r"\.(?<=\d\.)(\d+)%")
FRACTION = re.compile(r"\.(?<=\d\.)(\d+)")


# -- text helpers ------------------------------------------------------------------------------
@lru_cache(maxsize=64)  # most checks clean the text first: the checks of one text clean it once
def clean_text(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines()).strip()


def clear_caches() -> None:
    """Forget every text seen (benchmarks measure a text's first sight)."""
    clean_text.cache_clear()
    forget_sentences()


def normalize(text: str) -> str:
    """ARM-Thinker's `strip().lower()`, then `^[.…]+` and `[.…]+$` removed, then `strip()`. Once stripped the
    text cannot end in a line break (where `$` would also match), so removing the runs is `lstrip`/`rstrip`."""
    return text.strip().lower().lstrip(".…").rstrip(".…").strip()


def paragraphs(text: str) -> list[str]:
    return [p for p in PARAGRAPH_BREAK.split(text) if p.strip()]


def keyword_count(text: str, keyword: str) -> int:
    """Case-insensitive count; whole words, except `#tags`, which match anywhere (even inside a longer tag)."""
    if keyword and text.isascii() and keyword.isascii():
        return _ascii_keyword_count(text.lower(), keyword.lower())
    escaped = re.escape(keyword)
    pattern = escaped if keyword.startswith("#") else rf"\b{escaped}\b"
    return len(re.findall(pattern, text, re.IGNORECASE))


def _ascii_keyword_count(text: str, keyword: str) -> int:
    """`keyword_count` where both are ASCII and lower-cased: there, ignoring case is comparing lower cases and
    a word character is `isalnum()` or `_`, so the regular expression's count is the literal's, non-overlapping
    from the left (`str.count` for a tag), each occurrence counted where `\\b` holds at both of its ends."""
    if keyword.startswith("#"):
        return text.count(keyword)
    width, count = len(keyword), 0
    starts_word, ends_word = _is_word(keyword[0]), _is_word(keyword[-1])
    at = text.find(keyword)
    while at >= 0:
        end = at + width
        if ((at > 0 and _is_word(text[at - 1])) != starts_word
                and (end < len(text) and _is_word(text[end])) != ends_word):
            count += 1
            at = text.find(keyword, end)
        else:
            at = text.find(keyword, at + 1)
    return count


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def decimal_places(text: str, *, percent: bool = False) -> list[int]:
    """The digits after the point of each match of `(\\d+\\.\\d+)` (or `(\\d+\\.\\d+)%`) in `text`, in order.
    Such a match starts at its integer part's first digit not inside the previous match, so a point counts
    when the digit before it lies after the previous match; its fraction is every digit after it."""
    found, previous_end = [], 0
    for match in (FRACTION_BEFORE_PERCENT if percent else FRACTION).finditer(text):
        if match.start() > previous_end:
            found.append(len(match.group(1)))
            previous_end = match.end()
    return found


def is_poetry(paragraph: str) -> bool:
    """ARM-Thinker's heuristic: 0.4 * short-line share + 0.4 * share ending "-" + 0.2 * share ending " -" > 0.6."""
    lines = paragraph.split("\n")
    if len(lines) < 2:
        return False
    n = len(lines)
    short = sum(1 for line in lines if len(line.strip()) < 60)
    dash = sum(1 for line in lines if line.strip().endswith("-"))
    space_dash = sum(1 for line in lines if line.strip().endswith(" -"))
    # Summed in this order, as the reference does: 0.4 + 0.2 lands just above 0.6 in floating point.
    return short / n * 0.4 + dash / n * 0.4 + space_dash / n * 0.2 > 0.6


def in_range(value: int, lower: int, upper: int) -> bool:
    return lower <= value <= upper


# -- the 19 checks -----------------------------------------------------------------------------
def paragraph_number_in_range(response: str, lower_bound: int, upper_bound: int) -> bool:
    return in_range(len(paragraphs(clean_text(response))), lower_bound, upper_bound)


def sentence_number_in_range(response: str, lower_bound: int, upper_bound: int) -> bool:
    return in_range(len(sent_tokenize(clean_text(response))), lower_bound, upper_bound)


def each_paragraph_sentence_number_in_range(response: str, lower_bound: int, upper_bound: int) -> bool:
    for paragraph in paragraphs(clean_text(response)):
        if is_poetry(paragraph):  # poetry: count its non-empty lines instead of sentences
            count = sum(1 for line in paragraph.split("\n") if line.strip())
        else:
            count = len(sent_tokenize(paragraph))
        if not in_range(count, lower_bound, upper_bound):
            return False
    return True


def each_paragraph_sentence_number_in_range_list(response: str, ranges: Sequence[Sequence[int]]) -> bool:
    found = paragraphs(clean_text(response))
    if len(found) != len(ranges):
        return False
    for paragraph, bounds in zip(found, ranges, strict=True):
        lower, upper = bounds
        if not in_range(len(sent_tokenize(paragraph)), lower, upper):
            return False
    return True


def word_count_in_range(response: str, lower_bound: int, upper_bound: int) -> bool:
    return in_range(len(clean_text(response).split()), lower_bound, upper_bound)


def each_paragraph_word_count_in_range(response: str, lower_bound: int, upper_bound: int) -> bool:
    return all(in_range(len(p.split()), lower_bound, upper_bound) for p in paragraphs(clean_text(response)))


def not_contain_substring(response: str, substring: str) -> bool:
    return substring.lower() not in clean_text(response).lower()


def not_contain_substrings(response: str, substrings: Sequence[str]) -> bool:
    text = clean_text(response).lower()
    return not any(s.lower() in text for s in substrings)


def each_sentence_begins_with(response: str, substring: str) -> bool:
    prefix = normalize(substring)
    return all(normalize(s).startswith(prefix) for s in sent_tokenize(response))  # raw text, not cleaned


def each_sentence_ends_with(response: str, substring: str) -> bool:
    suffix = normalize(substring)
    return all(normalize(s).endswith(suffix) for s in sent_tokenize(response))


def each_paragraph_begins_with(response: str, substring: str) -> bool:
    prefix = normalize(substring)
    return all(normalize(p).startswith(prefix) for p in paragraphs(response))  # raw paragraphs


def each_paragraph_ends_with(response: str, substring: str) -> bool:
    suffix = normalize(substring)
    return all(normalize(p).endswith(suffix) for p in paragraphs(response))


def response_begins_with(response: str, substring: str) -> bool:
    return normalize(response).startswith(normalize(substring))


def response_ends_with(response: str, substring: str) -> bool:
    return normalize(response).endswith(normalize(substring))


def each_keyword_mentioned_in_range(response: str, keywords: Sequence[str], lower_bound_times: int,
                                    upper_bound_times: int) -> bool:
    text = clean_text(response)
    return all(in_range(keyword_count(text, k), lower_bound_times, upper_bound_times) for k in keywords)


def total_keywords_mentioned_in_range(response: str, keywords: Sequence[str], lower_bound_times: int,
                                      upper_bound_times: int) -> bool:
    text = clean_text(response)
    return in_range(sum(keyword_count(text, k) for k in keywords), lower_bound_times, upper_bound_times)


def percentage_precision(response: str, precision: int) -> bool:
    """Only decimals written directly before "%" are checked ("50%" and "12.50 %" are not)."""
    return all(places == precision for places in decimal_places(clean_text(response), percent=True))


def number_precision(response: str, precision: int) -> bool:
    """Only decimals are checked; integers are ignored whatever `precision` says."""
    return all(places == precision for places in decimal_places(clean_text(response)))


def no_arabic_number(response: str) -> bool:
    return not STANDALONE_NUMBER.search(clean_text(response))


CHECKS: dict[str, Callable[..., bool]] = {
    "check_whether_response_paragraph_number_in_range": paragraph_number_in_range,
    "check_whether_response_sentence_number_in_range": sentence_number_in_range,
    "check_whether_each_paragraph_sentence_number_in_range": each_paragraph_sentence_number_in_range,
    "check_whether_each_paragraph_sentence_number_in_range_list": each_paragraph_sentence_number_in_range_list,
    "check_whether_response_word_count_in_range": word_count_in_range,
    "check_whether_each_paragraph_word_count_in_range": each_paragraph_word_count_in_range,
    "check_whether_whole_response_not_contain_certain_substrings": not_contain_substrings,
    "check_whether_whole_response_not_contain_certain_substring": not_contain_substring,
    "check_whether_each_sentence_begin_with_certain_substring": each_sentence_begins_with,
    "check_whether_each_paragraph_begin_with_certain_substring": each_paragraph_begins_with,
    "check_whether_each_paragraph_end_with_certain_substring": each_paragraph_ends_with,
    "check_whether_each_sentence_end_with_certain_substring": each_sentence_ends_with,
    "check_whether_whole_response_begin_with_certain_substring": response_begins_with,
    "check_whether_whole_response_end_with_certain_substring": response_ends_with,
    "check_whether_each_keyword_in_list_mentioned_in_range": each_keyword_mentioned_in_range,
    "check_whether_total_keyword_in_list_mentioned_in_range": total_keywords_mentioned_in_range,
    "check_percentage_number_precision_in_response": percentage_precision,
    "check_number_precision_in_response": number_precision,
    "check_whether_has_no_arabic_number_in_response": no_arabic_number,
}
