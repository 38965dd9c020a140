"""Thyme's strict math check (yfzhang114/Thyme @ b9285b7a, `swift/plugin/strict_math_verify.py` `evaluate_math`, with
`swift/plugin/math_normalize.py`), reimplemented rule for rule with the libraries it uses (pylatexenc's
`LatexNodes2Text`, sympy's `parse_expr` with implicit multiplication, `sympy.simplify`).

`evaluate_math(model_output, truth)`:
1. the answer is cut out of the text (`extract`): after the last "answer:"/"answer is"/"answers are", before the
   last "is answer"/"is the answer"/"are answers"/"are the answers", the last `\\boxed{}`/`\\fbox{}` content, before
   the last ". ", then after the last of "be ", "is ", "are ", "=", ": ", "get " (and their newline forms), each
   marker looked up in the lower-cased text and cut from the original;
2. PRM800K's grader (`grade`): equal under the MATH normalisation (`mathd`); else equal under the grader's own
   normalisation (`normalize`: units, percentages, dollars, "million", LaTeX to text, mixed numbers, lower case,
   integers); else element by element (tuples and intervals, same brackets): two fractions must be the same string,
   an integer only matches an integer, anything else must simplify to a zero difference under sympy, when the
   difference names at most two distinct letters and no `^{`, `^(` or long exponent;
3. the reference then calls `math_equal` (the Qwen-Math grader, whose `handle_pi` would `eval` the answer text), but
   at b9285b7a `from swift.plugin import math_equal` binds the *module* `swift/plugin/math_equal.py` (the plugin
   package is swift's `_LazyModule`, which does not export a function of that name, so the import system falls back
   to the submodule): calling it raises `TypeError`, which `evaluate_math` catches and reads as "not equal". So
   step 3 is always False, for every input: no model text ever reaches `handle_pi`'s `eval` or the matrix branch's
   `eval` (recorded: `scripts/goldens/record_rewards_thyme.py` checks the binding and the goldens' \\pi cases).
"""

from __future__ import annotations

import contextlib
import functools
import re
from types import SimpleNamespace

__all__ = ["evaluate_math", "extract", "grade", "mathd", "normalize"]

LEADS = ("answer:", "answer is", "answers are")
TRAILS = ("is answer", "is the answer", "are answers", "are the answers")
CUTS = ("be ", "is ", "are ", "=", ": ", "get ", "be\n", "is\n", "are\n", ":\n", "get\n")
UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month", "year",
         "foot", "feet", "inch", "yard", "liter")
UNIT_RES = tuple(re.compile(unit + r"(es)?(s)? *(\^[0-9]+)?") for unit in UNITS)
TEXT_WRAP = re.compile(r"^\\text\{(?P<text>.+?)\}$")
THOUSANDS = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
MIXED = re.compile("([0-9]) +([0-9])")
FRACTION = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")
BAD_PARTS = ("^{", "^(")
BAD_POWERS = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))
BRACKETS = "()[]"
LATEX_SYMBOLS = (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*"))


@functools.cache
def libraries() -> SimpleNamespace:
    """sympy and pylatexenc, imported on the first grade (the `rewards` extra; the server starts without them)."""
    import sympy
    from pylatexenc import latex2text
    from sympy.parsing import sympy_parser

    transforms = (*sympy_parser.standard_transformations, sympy_parser.implicit_multiplication_application)
    return SimpleNamespace(simplify=sympy.simplify, latex2text=latex2text, parse_expr=sympy_parser.parse_expr,
                           transforms=transforms)


def _after_last(text: str, marker: str) -> str | None:
    at = text.lower().rfind(marker)
    return None if at == -1 else text[at + len(marker):].strip()


def last_boxed(text: str) -> str | None:
    """The stripped content of the last `\\boxed` (else `\\fbox`), braces balanced from its first `{`."""
    at = text.rfind("\\boxed")
    if at < 0:
        at = text.rfind("\\fbox")
        if at < 0:
            return None
    depth, opened = 0, None
    for i in range(at, len(text)):
        if text[i] == "{":
            depth += 1
            opened = i if opened is None else opened
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return None if opened is None else text[opened + 1:i].strip()
    return None


def extract(response: str) -> str:
    """The answer `evaluate_math` grades (`match_answer`'s second value)."""
    for marker in LEADS:
        response = cut if (cut := _after_last(response, marker)) is not None else response
    for marker in TRAILS:
        at = response.lower().rfind(marker)
        if at != -1:
            response = response[:at].strip()
    boxed = last_boxed(response)
    if boxed:
        response = boxed
    if ". " in response and (dot := response.lower().rfind(". ")) != -1:
        response = response[:dot].strip()
    for marker in CUTS:
        response = cut if (cut := _after_last(response, marker)) is not None else response
    return response


class _Kept(Exception):
    """MATH's normalisation failed part way: the answer is kept as it was before it."""


def _sqrt_braced(text: str) -> str:
    if "\\sqrt" not in text:
        return text
    head, *rest = text.split("\\sqrt")
    for part in rest:
        if not part:
            raise _Kept
        head += "\\sqrt" + (part if part[0] == "{" else "{" + part[0] + "}" + part[1:])
    return head


def _fracs_braced(text: str) -> str:
    head, *rest = text.split("\\frac")
    for part in rest:
        head += "\\frac"
        if not part:
            raise _Kept
        if part[0] == "{":
            head += part
        elif len(part) < 2:
            return text
        elif part[1] != "{":
            head += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
        else:
            head += "{" + part[0] + "}" + part[1] + part[2:]
    return head


def _slash_as_frac(text: str) -> str:
    parts = text.split("/")
    if len(parts) != 2:
        return text
    try:
        top, bottom = int(parts[0]), int(parts[1])
    except ValueError:
        return text
    return "\\frac{" + str(top) + "}{" + str(bottom) + "}" if text == f"{top}/{bottom}" else text


def _mathd_strip(text: str) -> str:
    text = text.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac").replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "")
    if "\\text{ " in text:  # units on the right
        pieces = text.split("\\text{ ")
        if len(pieces) != 2:
            raise _Kept
        text = pieces[0]
    text = text.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        text = sides[1]
    text = _fracs_braced(_sqrt_braced(text).replace(" ", ""))
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _slash_as_frac(text)


def mathd(answer: str) -> str:
    """The MATH dataset's normalisation (`math_normalize.normalize_answer`)."""
    answer = answer.strip()
    wrapped = TEXT_WRAP.search(answer)
    if wrapped is not None:
        answer = wrapped.group("text").strip()
    try:
        return _mathd_strip(answer)
    except _Kept:
        return answer


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _near_int(value: float) -> bool:
    try:
        return abs(value - round(value)) <= 1e-7
    except (OverflowError, ValueError):
        return False


def without_thousands(text: str) -> str:
    """`1,234,567` → `1234567`, tuple commas kept."""
    while True:
        stripped = THOUSANDS.sub("\\1\\3\\4", text)
        if stripped == text:
            return stripped
        text = stripped


def is_int_text(text: str) -> bool:
    value = _float_or_none(without_thousands(text))
    return value is not None and _near_int(value)


def latex_to_text(expr: str) -> str:
    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = libraries().latex2text.LatexNodes2Text().latex_to_text(expr)
    for symbol, name in LATEX_SYMBOLS:
        expr = expr.replace(symbol, name)
    return expr.strip()


def normalize(expr: str) -> str:
    """The grader's own normalisation (`_normalize`)."""
    wrapped = TEXT_WRAP.search(expr)
    if wrapped is not None:
        expr = wrapped.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    expr = expr.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    for unit in UNIT_RES:
        expr = unit.sub("", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    value = _float_or_none(expr)
    if value is not None and _near_int(value):
        expr = str(round(value))
    if "\\" in expr:
        with contextlib.suppress(Exception):  # the reference keeps the text as it is when pylatexenc fails
            expr = latex_to_text(expr)
    expr = MIXED.sub("\\1+\\2", re.sub("- *", "-", expr)).lower()
    if is_int_text(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def may_simplify(expr: str) -> bool:
    """PRM800K's guard before sympy: at most two distinct letters (besides `sqrt`, `frac`), no `^{`, `^(`, no
    exponent of two digits or chained."""
    letters = {ch for ch in expr.replace("sqrt", "").replace("frac", "") if ch.isalpha()}
    if len(letters) > 2 or any(part in expr for part in BAD_PARTS):
        return False
    return not any(power.search(expr) for power in BAD_POWERS)


def sympy_equal(truth: str, given: str) -> bool:
    difference = f"({truth})-({given})"
    try:
        if may_simplify(difference):
            libs = libraries()
            parsed = libs.parse_expr(difference.replace("^", "**"), transformations=libs.transforms)
            return bool(libs.simplify(parsed) == 0)
    except BaseException as exc:  # the reference's bare `except`: any failure is "not equal"
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
    return False


def elements(expr: str) -> list[str]:
    """A tuple's or interval's elements (brackets at both ends, none inside), else the expression alone."""
    expr = without_thousands(expr)
    if not expr:
        return []
    if len(expr) > 2 and expr[0] in BRACKETS and expr[-1] in BRACKETS and not any(
            ch in expr[1:-1] for ch in BRACKETS):
        return [part.strip() for part in expr[1:-1].split(",")]
    return [expr]


def _element_equal(truth: str, given: str) -> bool:
    if FRACTION.search(truth) and FRACTION.search(given):
        return truth == given  # unreduced fractions do not pass
    if is_int_text(truth) != is_int_text(given):
        return False  # an integer answer must match strictly
    return sympy_equal(truth, given)


def grade(given: str, truth: str) -> bool:
    """PRM800K's `grade_answer` as the reference ships it."""
    if mathd(truth) == mathd(given):
        return True
    truth_n, given_n = normalize(truth), normalize(given)
    if truth_n == given_n:
        return True
    if not given_n:
        return False
    truth_parts, given_parts = elements(truth_n), elements(given_n)
    if len(truth_parts) > 1 and (truth_n[0] != given_n[0] or truth_n[-1] != given_n[-1]):
        return False
    if len(truth_parts) != len(given_parts):
        return False
    return all(_element_equal(t, g) for t, g in zip(truth_parts, given_parts, strict=True))


def evaluate_math(model_output: str, truth: str) -> bool:
    """`strict_math_verify.evaluate_math`: the grader on the extracted answer; the `math_equal` fallback is always
    False at this commit (see the module's docstring)."""
    return grade(extract(str(model_output)), str(truth))
