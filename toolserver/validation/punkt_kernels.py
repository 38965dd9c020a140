"""NLTK's punkt sentence splitting (`PunktSentenceTokenizer.span_tokenize`), step by step, compiled by numba.

Each function names the NLTK method it reproduces; the regular expressions are scanned by hand with the
semantics of NLTK's patterns (lazy and greedy repetitions, lookaheads, alternation order), reading characters
through `punkt_chars`' tables. A text is an array of code points; a model type (a lower-cased token) is found
by hashing its lower-cased code points into `Model`'s open-addressing table and comparing them exactly.
"""

from __future__ import annotations

import numba
import numpy as np

from toolserver.validation.punkt_chars import (
    ALPHA,
    DIGIT,
    LOWER,
    NON_WORD,
    PY_SPACE,
    SPACE,
    UPPER,
    WORD_START,
)

# NLTK's orthographic context bits (nltk.tokenize.punkt._ORTHO_*)
BEG_UC, MID_UC, UNK_UC, BEG_LC, MID_LC, UNK_LC = 1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5, 1 << 6
ORTHO_UC = BEG_UC | MID_UC | UNK_UC
ORTHO_LC = BEG_LC | MID_LC | UNK_LC
PERIOD, QUESTION, BANG, HYPHEN, COMMA, NEWLINE = 46, 63, 33, 45, 44, 10
FNV_OFFSET, FNV_PRIME = 14695981039346656037, 1099511628211
UNKNOWN_CHARS, SPECIAL_CHARS = 1, 2  # statuses of `split_spans` besides 0

# Functions that allocate nothing are compiled without reference counting (numba's `_nrt=False`): each call of
# an array-taking function otherwise increments and decrements every array's count atomically, which made a
# call of a three-line test cost 30 ns, and the splitter 40 times slower than its arithmetic.
leaf = numba.njit(cache=True, nogil=True, _nrt=False)  # type: ignore[call-overload]  # a private option


@leaf
def type_hash(codes: np.ndarray, lower: np.ndarray, a: int, b: int, lowered: bool) -> np.uint64:
    h = np.uint64(FNV_OFFSET)
    for k in range(a, b):
        c = lower[codes[k]] if lowered else codes[k]
        h = (h ^ np.uint64(c)) * np.uint64(FNV_PRIME)
    return h


@numba.njit(cache=True, nogil=True)
def build_slots(vocab: np.ndarray, offsets: np.ndarray, size: int) -> np.ndarray:
    """The open-addressing table: slot → vocabulary id (-1: empty), linear probing."""
    slots = np.full(size, -1, np.int64)
    mask = np.uint64(size - 1)
    for v in range(offsets.size - 1):
        s = type_hash(vocab, vocab, offsets[v], offsets[v + 1], False) & mask
        while slots[s] >= 0:
            s = (s + np.uint64(1)) & mask
        slots[s] = v
    return slots


@leaf
def lookup(codes: np.ndarray, lower: np.ndarray, a: int, b: int, model: tuple) -> int:
    """The vocabulary id of the lower-cased text codes[a:b], or -1."""
    vocab, offsets, slots = model[0], model[1], model[2]
    mask = np.uint64(slots.size - 1)
    s = type_hash(codes, lower, a, b, True) & mask
    while True:
        v = slots[s]
        if v < 0:
            return -1
        lo, hi = offsets[v], offsets[v + 1]
        if hi - lo == b - a:
            same = True
            for t in range(b - a):
                if vocab[lo + t] != lower[codes[a + t]]:
                    same = False
                    break
            if same:
                return v
        s = (s + np.uint64(1)) & mask


@leaf
def multi_char(codes: np.ndarray, flags: np.ndarray, i: int, end: int) -> int:
    """Length of `_re_multi_char_punct` (`-{2,}|\\.{2,}|(?:\\.\\s){2,}\\.`) matched at i, else 0."""
    c = codes[i]
    if c != HYPHEN and c != PERIOD:
        return 0
    run = i
    while run < end and codes[run] == c:
        run += 1
    if run - i >= 2:
        return run - i
    if c == HYPHEN:
        return 0
    reps = 0  # greedy (?:\.\s){2,}, then a period; one repetition given back if that period is missing
    while i + 2 * reps + 1 < end and codes[i + 2 * reps] == PERIOD and flags[codes[i + 2 * reps + 1]] & SPACE:
        reps += 1
    if reps >= 2 and i + 2 * reps < end and codes[i + 2 * reps] == PERIOD:
        return 2 * reps + 1
    return 2 * reps - 1 if reps >= 3 else 0


@leaf
def word_end(codes: np.ndarray, flags: np.ndarray, i: int, end: int) -> int:
    """End of the lazy `\\S+?` of `_word_tokenize_fmt` from i: the first j > i where a word may end
    (white space, the line's end, a non-word character, multi-character punctuation, or a comma before one
    of those)."""
    j = i + 1
    while j < end:
        c = codes[j]
        if flags[c] & (SPACE | NON_WORD) or multi_char(codes, flags, j, end):
            return j
        if c == COMMA and (j + 1 == end or flags[codes[j + 1]] & (SPACE | NON_WORD)
                           or multi_char(codes, flags, j + 1, end)):
            return j
        j += 1
    return end


@leaf
def tokenize_line(codes: np.ndarray, flags: np.ndarray, start: int, end: int, toks: np.ndarray, n: int) -> int:
    """`PunktLanguageVars.word_tokenize` (the findall) of codes[start:end], appended to toks[n:]."""
    i = start
    while i < end:
        f = flags[codes[i]]
        length = multi_char(codes, flags, i, end)
        if length:
            stop = i + length
        elif f & SPACE:
            i += 1
            continue
        elif f & WORD_START:
            stop = word_end(codes, flags, i, end)
        else:
            stop = i + 1  # `\S`: a lone character that cannot start a word
        toks[n, 0], toks[n, 1] = i, stop
        n += 1
        i = stop
    return n


@leaf
def tokenize_words(codes: np.ndarray, flags: np.ndarray, start: int, end: int, toks: np.ndarray) -> int:
    """`PunktBaseClass._tokenize_words`: lines split at "\\n", blank lines (`strip()` empty) skipped."""
    n = 0
    line = start
    while line <= end:
        stop = line
        while stop < end and codes[stop] != NEWLINE:
            stop += 1
        for k in range(line, stop):
            if not flags[codes[k]] & PY_SPACE:
                n = tokenize_line(codes, flags, line, stop, toks, n)
                break
        line = stop + 1
    return n


@leaf
def is_number(codes: np.ndarray, flags: np.ndarray, lower: np.ndarray, a: int, b: int) -> bool:
    """`PunktToken._RE_NUMERIC` (`^-?[\\.,]?\\d[\\d,\\.-]*\\.?$`) on the lower-cased token."""
    k = a
    if k < b and lower[codes[k]] == HYPHEN:
        k += 1
    if k < b and (lower[codes[k]] == PERIOD or lower[codes[k]] == COMMA):
        k += 1
    if k >= b or not flags[lower[codes[k]]] & DIGIT:
        return False
    while k < b:
        c = lower[codes[k]]
        if not (flags[c] & DIGIT or c in (COMMA, PERIOD, HYPHEN)):
            return False
        k += 1
    return True


@leaf
def first_pass(codes: np.ndarray, lower: np.ndarray, a: int, b: int, model: tuple) -> int:
    """`_first_pass_annotation`: 1 sentence break, 2 abbreviation, 3 ellipsis, 0 none."""
    length = b - a
    if length == 1 and (codes[a] == PERIOD or codes[a] == QUESTION or codes[a] == BANG):
        return 1
    if length >= 2:
        dots = True
        for k in range(a, b):
            if codes[k] != PERIOD:
                dots = False
                break
        if dots:
            return 3
    if codes[b - 1] != PERIOD or (length >= 2 and codes[b - 2] == PERIOD):
        return 0
    abbrev = model[3]
    v = lookup(codes, lower, a, b - 1, model)
    if v >= 0 and abbrev[v]:
        return 2
    last = b - 2
    while last >= a and codes[last] != HYPHEN:
        last -= 1
    if last >= a:  # the part after the last hyphen
        v = lookup(codes, lower, last + 1, b - 1, model)
        if v >= 0 and abbrev[v]:
            return 2
    return 1


@leaf
def type_id(codes: np.ndarray, flags: np.ndarray, lower: np.ndarray, a: int, b: int, no_period: bool,
            model: tuple) -> int:
    """The vocabulary id of the token's type (`##number##` for numbers), without its final period if asked."""
    if is_number(codes, flags, lower, a, b):
        return model[7]
    if no_period and b - a > 1 and codes[b - 1] == PERIOD:
        b -= 1
    return lookup(codes, lower, a, b, model)


@leaf
def ortho_heuristic(codes: np.ndarray, flags: np.ndarray, a: int, b: int, typ: int, model: tuple) -> int:
    """`_ortho_heuristic` of the next token: 1 True, 0 False, 2 "unknown"."""
    c = codes[a]
    if b - a == 1 and (c == 59 or c == 58 or c in (COMMA, PERIOD, BANG, QUESTION)):
        return 0
    ortho = model[5][typ] if typ >= 0 else 0
    if flags[c] & UPPER and ortho & ORTHO_LC and not ortho & MID_UC:
        return 1
    if flags[c] & LOWER and (ortho & ORTHO_UC or not ortho & BEG_LC):
        return 0
    return 2


@leaf
def is_collocation(typ: int, next_typ: int, model: tuple) -> bool:
    if typ < 0 or next_typ < 0:
        return False
    pairs = model[6]
    key = typ * (model[1].size - 1) + next_typ
    i = np.searchsorted(pairs, key)
    return i < pairs.size and pairs[i] == key


@leaf
def breaks_after(codes: np.ndarray, flags: np.ndarray, lower: np.ndarray, a1: int, b1: int, a2: int, b2: int,
                 model: tuple) -> bool:
    """Whether token 1 is a sentence break once `_second_pass_annotation` has seen token 2 after it."""
    first = first_pass(codes, lower, a1, b1, model)
    if codes[b1 - 1] != PERIOD:
        return first == 1
    typ = type_id(codes, flags, lower, a1, b1, True, model)
    next_typ = type_id(codes, flags, lower, a2, b2, first_pass(codes, lower, a2, b2, model) == 1, model)
    initial = b1 - a1 == 2 and flags[codes[a1]] & ALPHA != 0
    if is_collocation(typ, next_typ, model):
        return False
    upper = flags[codes[a2]] & UPPER != 0
    if (first == 2 or first == 3) and not initial:
        if ortho_heuristic(codes, flags, a2, b2, next_typ, model) == 1:
            return True
        if upper and next_typ >= 0 and model[4][next_typ]:
            return True
    if initial or typ == model[7]:
        starter = ortho_heuristic(codes, flags, a2, b2, next_typ, model)
        if starter == 0:
            return False
        ortho = model[5][next_typ] if next_typ >= 0 else 0
        if starter == 2 and initial and upper and not ortho & ORTHO_LC:
            return False
    return first == 1


@leaf
def contains_sentbreak(codes: np.ndarray, flags: np.ndarray, lower: np.ndarray, start: int, end: int,
                       toks: np.ndarray, model: tuple) -> bool:
    """`text_contains_sentbreak(text[start:end])`: some token but the last is a sentence break."""
    n = tokenize_words(codes, flags, start, end, toks)
    for i in range(n - 1):
        if breaks_after(codes, flags, lower, toks[i, 0], toks[i, 1], toks[i + 1, 0], toks[i + 1, 1], model):
            return True
    return False
