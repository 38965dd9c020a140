"""NLTK's punkt over a whole text, compiled: the candidate sentence ends, their contexts, the decisions and the
realignment of closing quotes (`PunktSentenceTokenizer.span_tokenize`), plus the model as arrays.

`NativePunkt(tokenizer)` is built from a `PunktSentenceTokenizer`'s own parameters and language variables;
`spans(text)` gives what `tokenizer.span_tokenize(text)` gives, or None for a text it leaves to NLTK (a lone
surrogate, a character whose lower case is not one character). Whether it agrees with NLTK here is for
`toolserver.validation.sentences` to check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numba
import numpy as np

from toolserver.validation.punkt_chars import (
    ASCII_SPACE,
    CLOSING,
    KNOWN,
    NON_WORD,
    PY_SPACE,
    SPACE,
    SPECIAL,
    CharTables,
)
from toolserver.validation.punkt_kernels import (
    BANG,
    HYPHEN,
    PERIOD,
    QUESTION,
    SPECIAL_CHARS,
    UNKNOWN_CHARS,
    build_slots,
    contains_sentbreak,
    leaf,
)

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

# The patterns the kernels implement, as NLTK writes them; another NLTK's patterns leave splitting to NLTK.
WORD_TOKENIZE_FMT = r"""(
        %(MultiChar)s
        |
        (?=%(WordStart)s)\S+?  # Accept word characters until end is found
        (?= # Sequences marking a word's end
            \s|                                 # White-space
            $|                                  # End-of-string
            %(NonWord)s|%(MultiChar)s|          # Punctuation
            ,(?=$|\s|%(NonWord)s|%(MultiChar)s) # Comma if at end of word
        )
        |
        \S
    )"""
PERIOD_CONTEXT_FMT = r"""
        %(SentEndChars)s             # a potential sentence ending
        (?=(?P<after_tok>
            %(NonWord)s              # either other punctuation
            |
            \s+(?P<next_tok>\S+)     # or whitespace and some other token
        ))"""
MULTI_CHAR_PUNCT = r"(?:\-{2,}|\.{2,}|(?:\.\s){2,}\.)"
REALIGNMENT_TAIL = r"+?(?:\s+|(?=--)|$)"


@leaf
def period_context(codes: np.ndarray, flags: np.ndarray, p: int) -> tuple[int, int]:
    """`period_context_re` at a sentence-end character p: (end of `after_tok`, start of `next_tok` or -1), or
    (-1, -1) where it does not match."""
    n = codes.size
    if p + 1 < n and flags[codes[p + 1]] & NON_WORD:
        return p + 2, -1
    j = p + 1
    while j < n and flags[codes[j]] & SPACE:
        j += 1
    if j == p + 1 or j == n:
        return -1, -1
    k = j
    while k < n and not flags[codes[k]] & SPACE:
        k += 1
    return k, j


@leaf
def word_start(codes: np.ndarray, flags: np.ndarray, p: int, prev_start: int, prev_stop: int) -> int:
    """`_match_potential_end_contexts`' start of the word before p: after the last `string.whitespace`
    character of text[prev_stop:p], unless there is none or it is that text's first character."""
    i = p - 1
    while i >= prev_stop:
        if flags[codes[i]] & ASCII_SPACE:
            return i + 1 if i > prev_stop else prev_start
        i -= 1
    return prev_start


@numba.njit(cache=True, nogil=True)
def slices_from_text(codes: np.ndarray, flags: np.ndarray, lower: np.ndarray, model: tuple,
                     out: np.ndarray) -> int:
    """`_slices_from_text` (with `_match_potential_end_contexts`): the sentences before realignment."""
    n = codes.size
    toks = np.empty((n + 1, 2), np.int64)
    count, last_break = 0, 0
    prev_start, prev_stop = 0, 0
    prev_p, prev_after, prev_next = -1, 0, 0  # the pending match
    start, after, next_tok = 0, 0, 0
    for p in range(n + 1):
        if p < n:
            c = codes[p]
            if c != PERIOD and c != QUESTION and c != BANG:
                continue
            after, next_tok = period_context(codes, flags, p)
            if after < 0:
                continue
            start = word_start(codes, flags, p, prev_start, prev_stop)
        if (prev_p >= 0 and (p == n or prev_stop <= start)
                and contains_sentbreak(codes, flags, lower, prev_start, prev_after, toks, model)):
            out[count, 0], out[count, 1] = last_break, prev_p + 1
            count += 1
            last_break = next_tok_or_end(prev_next, prev_p)
        if p < n:
            prev_p, prev_after, prev_next = p, after, next_tok
            prev_start, prev_stop = start, p
    end = n
    while end > 0 and flags[codes[end - 1]] & PY_SPACE:
        end -= 1
    out[count, 0], out[count, 1] = last_break, end
    return count + 1


@leaf
def next_tok_or_end(next_tok: int, p: int) -> int:
    return next_tok if next_tok >= 0 else p + 1


@leaf
def realignment(codes: np.ndarray, flags: np.ndarray, start: int, stop: int) -> int:
    """End of `re_boundary_realignment.match(text[start:stop])` (closing characters, lazily, then white space,
    "--" or the end), or -1."""
    q = start
    while q < stop and flags[codes[q]] & CLOSING:
        q += 1
        if q < stop and flags[codes[q]] & SPACE:
            while q < stop and flags[codes[q]] & SPACE:
                q += 1
            return q
        if q == stop or (q + 1 < stop and codes[q] == HYPHEN and codes[q + 1] == HYPHEN):
            return q
    return -1


@leaf
def realign_boundaries(codes: np.ndarray, flags: np.ndarray, slices: np.ndarray, count: int,
                       out: np.ndarray) -> int:
    """`_realign_boundaries`: closing quotes and brackets after a sentence's end move into it."""
    n = codes.size
    kept, realign, next_start = 0, 0, 0
    for t in range(count):
        start, stop = slices[t, 0] + realign, slices[t, 1]
        matched = -1
        if t + 1 < count:
            next_start = slices[t + 1, 0]
            matched = realignment(codes, flags, next_start, min(slices[t + 1, 1], n))
        if matched >= 0:
            end = matched
            while end > next_start and flags[codes[end - 1]] & PY_SPACE:
                end -= 1
            out[kept, 0], out[kept, 1] = start, end
            kept += 1
            realign = matched - next_start
        else:
            realign = 0
            if start < min(stop, n):
                out[kept, 0], out[kept, 1] = start, stop
                kept += 1
    return kept


@numba.njit(cache=True, nogil=True)
def split_spans(codes: np.ndarray, flags: np.ndarray, lower: np.ndarray, model: tuple) -> tuple[int, np.ndarray]:
    """(0, the sentences' (start, end)), or (UNKNOWN_CHARS or SPECIAL_CHARS, nothing)."""
    for c in codes:
        f = flags[c]
        if not f & KNOWN:
            return UNKNOWN_CHARS, np.empty((0, 2), np.int64)
        if f & SPECIAL:
            return SPECIAL_CHARS, np.empty((0, 2), np.int64)
    slices = np.empty((codes.size + 1, 2), np.int64)
    count = slices_from_text(codes, flags, lower, model, slices)
    out = np.empty((count, 2), np.int64)
    return 0, out[:realign_boundaries(codes, flags, slices, count, out)]


def _model(params: PunktParameters) -> tuple[Any, ...]:
    """The parameters as arrays: the vocabulary (every type the model knows) and, by vocabulary id, whether it
    is an abbreviation or a frequent sentence starter and its orthographic context; collocations as sorted
    pairs of ids."""
    abbrevs, starters = params.abbrev_types, params.sent_starters
    ortho, collocations = params.ortho_context, params.collocations
    words = sorted(set(ortho) | abbrevs | starters | {w for pair in collocations for w in pair} | {"##number##"})
    ids = {w: i for i, w in enumerate(words)}
    codes = [np.frombuffer(w.encode("utf-32-le"), np.uint32) for w in words]
    offsets = np.zeros(len(words) + 1, np.int64)
    offsets[1:] = np.cumsum([c.size for c in codes])
    vocab = np.concatenate(codes).astype(np.int64)
    size = 1 << (2 * len(words)).bit_length()
    pairs = np.array(sorted(ids[a] * len(words) + ids[b] for a, b in collocations), np.int64)
    return (vocab, offsets, build_slots(vocab, offsets, size),
            np.array([w in abbrevs for w in words], np.uint8), np.array([w in starters for w in words], np.uint8),
            np.array([ortho.get(w, 0) for w in words], np.int64), pairs, ids["##number##"])


class NativePunkt:
    def __init__(self, tokenizer: PunktSentenceTokenizer):
        lang = tokenizer._lang_vars
        realignment = lang.re_boundary_realignment.pattern
        if (lang._word_tokenize_fmt != WORD_TOKENIZE_FMT or lang._period_context_fmt != PERIOD_CONTEXT_FMT
                or lang._re_multi_char_punct != MULTI_CHAR_PUNCT or tuple(lang.sent_end_chars) != (".", "?", "!")
                or not realignment.endswith(REALIGNMENT_TAIL)
                or tuple(type(tokenizer).PUNCTUATION) != tuple(";:,.!?")):
            raise ValueError("this NLTK's punkt patterns are not those punkt_native implements")
        self.chars = CharTables(lang._re_non_word_chars, lang._re_word_start,
                                realignment[:-len(REALIGNMENT_TAIL)])
        self.model = _model(tokenizer._params)

    def spans(self, text: str) -> list[list[int]] | None:
        try:
            codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
        except UnicodeEncodeError:  # a lone surrogate
            return None
        chars = self.chars
        status, spans = split_spans(codes, chars.flags, chars.lower, self.model)
        if status == UNKNOWN_CHARS:
            chars.learn(text)
            status, spans = split_spans(codes, chars.flags, chars.lower, self.model)
        return spans.tolist() if status == 0 else None

