"""Texts that exercise every decision punkt makes, for checking `punkt_native` against NLTK: at start-up
(`sentences.native_punkt`), in the tests, and at any scale by hand.

`tricky_texts(count, seed)` glues pieces at random: known abbreviations and unknown ones, decimals, numbers
and numbered lists, initials, ellipses in every spelling, straight and curly quotes, brackets, runs of `?!`,
hyphens and dashes, frequent sentence starters and words of each orthographic kind, non-Latin letters and
punctuation, and every kind of white space (including those only `str.isspace` or only `regex`'s `\\s` knows).
"""

from __future__ import annotations

import random

WORDS = ["the", "The", "market", "Market", "growth", "and", "And", "but", "But", "however", "However", "it",
         "It", "he", "He", "she", "They", "they", "in", "In", "said", "smith", "Smith", "bach", "Bach", "new",
         "York", "company", "Company", "inc", "Acme", "says", "also", "This", "this", "I", "i", "We", "a", "A",
         "résumé", "Élan", "Ärger", "über", "naïve", "Ωmega", "日本語", "中文", "😀", "x", "X", "ok", "OK",
         "##number##", "#AI", "@user", "C++", "e-mail", "ex-Gov", "mid-Oct", "O'Brien", "don't", "rock'n'roll",
         "straße", "ǅemal", "ﬁle"]
LEFT_TO_NLTK = ["İstanbul", "ΣΟΦΙΑ.", "ΌΣ"]  # lower cases of more than one character, or of the final sigma
# What punkt decides on, by kind; `tricky_text` draws from all of them, `tricky_texts(kinds=...)` from some.
PIECES = {
    "abbreviations": ["Dr.", "dr.", "Mr.", "Mrs.", "Ms.", "Inc.", "Ltd.", "Corp.", "Co.", "Jan.", "Feb.", "Oct.",
                      "Sept.", "U.S.", "u.s.", "U.K.", "e.g.", "i.e.", "etc.", "vs.", "p.m.", "a.m.", "No.", "St.",
                      "Jr.", "Sr.", "Gov.", "Sen.", "Rep.", "Calif.", "Mass.", "Wash.", "Ariz.", "Prof.", "Fig.",
                      "approx.", "Nov.", "Dec.", "ex-Gov.", "mid-Oct.", "S.p.A.", "N.Y.", "Bros.", "Cie."],
    "decimals": ["3.14", "12.5%", "1,000", "1,000.50", "-2.5", ".5", ",5", "5.", "10.", "1.2.3", "5-10", "3.",
                 "$3.50", "50%", "٣", "５", "²", "0.001", "1e-5", "2nd", "3rd", "1990s", "٣.٥", "-.5", "-,5"],
    "numbered lists": ["1.", "2.", "10.", "4)", "(a)", "a)", "ii.", "IV.", "1.1.", "\n1.", "\n2)", "\n- ", "\n* ",
                       "\n•"],
    "initials": ["J.", "S.", "A.", "B.", "K.", "É.", "x.", "J.S.", "J. S.", "Q.", "Ж."],
    "ellipses": ["...", "..", ". . .", ". . . .", "…", "….", "....", ". .", ".\t.\t.", "..."],
    "quotes": ["\"", "'", "“", "”", "‘", "’", "«", "»", "(", ")", "[", "]", "{", "}", "\".", ".\"", ".”", "?”",
               "!'", ".)", "')", "\"'", "``"],
    "punctuation": [".", ". ", "?", "!", "!!!", "?!", ",", ";", ":", "--", "---", "-", "*", "@", "&", "#", "`",
                    "/", "\\", "%", "†", ".,", ".;", ".:", "?.", "!."],
    "unicode punctuation": ["—", "–", "。", "？", "！", "¡", "¿", "、", "·", "‹", "›", "„", "‚", "؟", "।", "…"],
}
SPACES = [" "] * 12 + ["", "", "", "\n", "\n\n", "  ", "\t", "\r\n", "\u00a0", "\u2028", "\u3000", "\x0c",
                       "\x0b", "\x1c", "\x85", "\u200b", "\ufeff", " \n "]


def tricky_text(rng: random.Random, pieces: int, kinds: tuple[str, ...] = tuple(PIECES)) -> str:
    out = []
    for _ in range(pieces):
        draw = rng.random()
        if draw < 0.005:
            out.append(rng.choice(LEFT_TO_NLTK))
        else:
            out.append(rng.choice(WORDS) if draw < 0.4 else rng.choice(PIECES[rng.choice(kinds)]))
        out.append(rng.choice(SPACES))
    return "".join(out)


def tricky_texts(count: int, seed: int = 0, max_pieces: int = 40,
                 kinds: tuple[str, ...] = tuple(PIECES)) -> list[str]:
    rng = random.Random(seed)
    return [tricky_text(rng, rng.randint(1, max_pieces), kinds) for _ in range(count)]


FIXED = [
    "Dr. Smith met Mr. Brown. They talked.", "He left at 3 p.m. yesterday. Then he slept.",
    "Pi is 3.14 today. Wait... what? Yes!", "Line one\nLine two", "Yes. e.g. this one.", "",
    "Mrs. Green paid $3.50 at 5 p.m. on Jan. 5. The U.S. economy grew!", "Hi. (Really?) Ok.",
    "He said “Stop.” Then left.", "Very bad acting!!! I promise.", "(Sent1.) Sent2.",
    "J. S. Bach was here. A. Smith too.", "1. First item.\n2. Second item.\n3. Third.",
    "She said, 'Go.' He went.", "«Non.» Il part.", "Wait . . . really? Yes.", "It cost 5. Then 6.",
    "The U.S. Then the U.K. and the E.U.", "   Leading space. Trailing space.   ", "a.b.c. d.e.f. Ghi.",
    "End with quote.\" Next one.", "Dash.-- Next.", "See Fig. 3. It shows growth.", "no caps. no caps again.",
]
