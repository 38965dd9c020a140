"""What NLTK's punkt asks of each character, as tables indexed by code point, for `punkt_native`'s kernels.

Punkt's decisions read characters through three engines: the `regex` module that NLTK compiles its patterns
with (`\\s`, `\\d`, `[^\\W\\d]` and the character classes of `PunktLanguageVars`), Python's `str` methods
(`isupper`, `islower`, `lower`, and `strip`'s idea of whitespace) and `string.whitespace`. Each property is
taken from the engine punkt uses for it, one character at a time, so a table entry is that engine's answer,
never a re-derivation of the Unicode database. Entries are learned on first sight of a character (all of
Unicode would take a second at start-up) and never change.

A character whose lower case is not one character (`İ`), or depends on its neighbours (`Σ`, whose lower case
is final or not), is marked SPECIAL: a text holding one is split by NLTK itself.
"""

from __future__ import annotations

import string
import threading

import numpy as np
import regex

TABLE_SIZE = 0x110000

KNOWN = 1 << 0
SPACE = 1 << 1  # regex `\s` (punkt's patterns)
PY_SPACE = 1 << 2  # str.isspace (`strip`, `rstrip`)
ASCII_SPACE = 1 << 3  # string.whitespace (`_get_last_whitespace_index`)
ALPHA = 1 << 4  # regex `[^\W\d]` (an initial's letter)
DIGIT = 1 << 5  # regex `\d` (numbers)
UPPER = 1 << 6  # str.isupper
LOWER = 1 << 7  # str.islower
SPECIAL = 1 << 8  # its lower case is not one character, or depends on context
NON_WORD = 1 << 9  # punkt's `_re_non_word_chars`
WORD_START = 1 << 10  # punkt's `_re_word_start`
CLOSING = 1 << 11  # the class of punkt's `re_boundary_realignment` (quotes and brackets that close a sentence)


class CharTables:
    """`flags[cp]` (the bits above) and `lower[cp]` (the code point of `chr(cp).lower()`), learned lazily."""

    def __init__(self, non_word: str, word_start: str, closing: str):
        self.flags = np.zeros(TABLE_SIZE, np.uint16)
        self.lower = np.zeros(TABLE_SIZE, np.int32)
        self._patterns = [(SPACE, regex.compile(r"\s", regex.UNICODE)),
                          (ALPHA, regex.compile(r"[^\W\d]", regex.UNICODE)),
                          (DIGIT, regex.compile(r"\d", regex.UNICODE)),
                          (NON_WORD, regex.compile(non_word, regex.UNICODE | regex.VERBOSE)),
                          (WORD_START, regex.compile(word_start, regex.UNICODE | regex.VERBOSE)),
                          (CLOSING, regex.compile(closing, regex.UNICODE))]
        self._lock = threading.Lock()
        self.learn("".join(map(chr, range(0x250))) + "".join(map(chr, range(0x2000, 0x2070))))

    def learn(self, text: str) -> None:
        """Fill the entries of every character of `text` (and of their lower cases) not known yet."""
        flags = self.flags
        with self._lock:
            new = {ch for ch in set(text) if not flags[ord(ch)] & KNOWN}
            new |= {low for ch in new if len(low := ch.lower()) == 1 and not flags[ord(low)] & KNOWN}
            for ch in new:
                self._learn_one(ch)

    def _learn_one(self, ch: str) -> None:
        bits = KNOWN
        for bit, pattern in self._patterns:
            if pattern.fullmatch(ch):
                bits |= bit
        bits |= PY_SPACE if ch.isspace() else 0
        bits |= ASCII_SPACE if ch in string.whitespace else 0
        bits |= UPPER if ch.isupper() else 0
        bits |= LOWER if ch.islower() else 0
        low = ch.lower()
        if len(low) != 1 or ch == "Σ":  # CPython's only context-dependent lower case is the capital sigma's
            bits |= SPECIAL
        self.lower[ord(ch)] = ord(low) if len(low) == 1 else ord(ch)
        self.flags[ord(ch)] = bits  # last: a reader that sees KNOWN sees the rest
