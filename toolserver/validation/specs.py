"""ARM-Thinker's 19 instruction-following checks as specifications: names, descriptions and parameters (one table,
`SPECS`), the pydantic arguments models built from it, and `run_check`. The tools (`toolserver.tools.validators`)
and the batch endpoint (`validation.batch`) share them.

Two forms of each arguments model:
- `arm` (profile `arm-thinker`): ARM-Thinker's contract exactly: types are checked, values are not, so
  `lower_bound > upper_bound` simply yields `Check result: False`, as it does there;
- `strict` (profile `default` and the batch endpoint): values are checked too (bounds ordered and not
  negative, precision not negative, `ranges` made of [lower, upper] pairs), and a bad value is an error
  that names the parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from toolserver.validation.checks import CHECKS

RESPONSE_DESCRIPTION = "Text name to be checked (e.g., 'text_0', 'text_1', 'text_2', etc.)"


@dataclass(frozen=True)
class Param:
    name: str
    type: Any
    description: str


def _bounds(noun: str, lower: str = "The minimum allowed", upper: str = "The maximum allowed") -> tuple[Param, ...]:
    return (Param("lower_bound", int, f"{lower} {noun}."), Param("upper_bound", int, f"{upper} {noun}."))


_SUBSTRING_START = "Checks if every {what} in the response begins with a specific substring (case-insensitive)."
_SUBSTRING_END = "Checks if every {what} in the response ends with a specific substring (case-insensitive)."
_KEYWORDS = (
    Param("keywords", list[str], "A list of keywords to count."),
)

# name -> (description, parameters after `response`), in ARM-Thinker's tool-config order.
SPECS: dict[str, tuple[str, tuple[Param, ...]]] = {
    "check_whether_response_paragraph_number_in_range": (
        "Checks if the total number of paragraphs in the response is within a specified range "
        "[lower_bound, upper_bound].", _bounds("number of paragraphs")),
    "check_whether_response_sentence_number_in_range": (
        "Checks if the total number of sentences in the response is within a specified range "
        "[lower_bound, upper_bound].", _bounds("number of sentences")),
    "check_whether_each_paragraph_sentence_number_in_range": (
        "Checks if the sentence count of each paragraph in the response is within a specified range "
        "[lower_bound, upper_bound].", _bounds("sentences per paragraph")),
    "check_whether_each_paragraph_sentence_number_in_range_list": (
        "Checks if each paragraph's sentence count matches a corresponding range in a list. The number of "
        "paragraphs must equal the number of ranges.",
        (Param("ranges", list[list[int]], "A list of [lower_bound, upper_bound] pairs, one for each paragraph."),)),
    "check_whether_response_word_count_in_range": (
        "Checks if the total word count of the response is within a specified range [lower_bound, upper_bound].",
        _bounds("word count")),
    "check_whether_each_paragraph_word_count_in_range": (
        "Checks if the word count of each paragraph in the response is within a specified range "
        "[lower_bound, upper_bound].", _bounds("word count per paragraph")),
    "check_whether_whole_response_not_contain_certain_substrings": (
        "Checks if the response does not contain any of the substrings from a given list.",
        (Param("substrings", list[str], "A list of substrings that should not appear in the response."),)),
    "check_whether_whole_response_not_contain_certain_substring": (
        "Checks if the response does not contain a specific substring.",
        (Param("substring", str, "The substring that should not appear in the response."),)),
    "check_whether_each_sentence_begin_with_certain_substring": (
        _SUBSTRING_START.format(what="sentence"),
        (Param("substring", str, "The substring that each sentence must start with."),)),
    "check_whether_each_paragraph_begin_with_certain_substring": (
        _SUBSTRING_START.format(what="paragraph"),
        (Param("substring", str, "The substring that each paragraph must start with."),)),
    "check_whether_each_paragraph_end_with_certain_substring": (
        _SUBSTRING_END.format(what="paragraph"),
        (Param("substring", str, "The substring that each paragraph must end with."),)),
    "check_whether_each_sentence_end_with_certain_substring": (
        _SUBSTRING_END.format(what="sentence"),
        (Param("substring", str, "The substring that each sentence must end with."),)),
    "check_whether_whole_response_begin_with_certain_substring": (
        "Checks if the entire response begins with a specific substring (case-insensitive).",
        (Param("substring", str, "The substring that the response must start with."),)),
    "check_whether_whole_response_end_with_certain_substring": (
        "Checks if the entire response ends with a specific substring (case-insensitive).",
        (Param("substring", str, "The substring that the response must end with."),)),
    "check_whether_each_keyword_in_list_mentioned_in_range": (
        "Checks if the count of each individual keyword from a list falls within a specified range. Matches "
        "whole words, case-insensitively.",
        (*_KEYWORDS, Param("lower_bound_times", int, "The minimum number of times each keyword must appear."),
         Param("upper_bound_times", int, "The maximum number of times each keyword must appear."))),
    "check_whether_total_keyword_in_list_mentioned_in_range": (
        "Checks if the total count of all keywords from a list falls within a specified range. Matches whole "
        "words, case-insensitively.",
        (*_KEYWORDS, Param("lower_bound_times", int, "The minimum total number of times the keywords must appear."),
         Param("upper_bound_times", int, "The maximum total number of times the keywords must appear."))),
    "check_percentage_number_precision_in_response": (
        "Checks if all numbers followed by a '%' sign have a specific number of decimal places.",
        (Param("precision", int, "The required number of decimal places for percentages."),)),
    "check_number_precision_in_response": (
        "Checks if all numeric values have a specific number of decimal places. Integers are considered to have 0 "
        "precision.",
        (Param("precision", int, "The required number of decimal places for all numbers."),)),
    "check_whether_has_no_arabic_number_in_response": (
        "Checks if the response contains no standalone Arabic numbers (e.g., 123, 3.14, 1,000).", ()),
}
assert list(SPECS) == list(CHECKS)


class _ValidatorArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _StrictValidatorArgs(_ValidatorArgs):
    """Values checked too: what a reward pipeline wants to hear about rather than score as False."""

    @model_validator(mode="after")
    def _check_values(self) -> _StrictValidatorArgs:
        for lower, upper in (("lower_bound", "upper_bound"), ("lower_bound_times", "upper_bound_times")):
            if hasattr(self, lower):
                lo, hi = getattr(self, lower), getattr(self, upper)
                if lo < 0 or hi < 0:
                    raise ValueError(f"{lower} and {upper} must not be negative (got {lo} and {hi})")
                if lo > hi:
                    raise ValueError(f"{lower} ({lo}) must not be above {upper} ({hi})")
        precision = getattr(self, "precision", 0)
        if precision < 0:
            raise ValueError(f"precision must not be negative (got {precision})")
        for i, pair in enumerate(getattr(self, "ranges", ())):
            if len(pair) != 2 or pair[0] < 0 or pair[0] > pair[1]:
                raise ValueError(f"ranges[{i}] must be a [lower_bound, upper_bound] pair with "
                                 f"0 <= lower_bound <= upper_bound, got {pair}")
        return self


@cache  # one class per form, shared by the profiles that list the validator
def args_model(name: str, *, strict: bool, with_response: bool = True) -> type[BaseModel]:
    _description, params = SPECS[name]
    fields: dict[str, Any] = {}
    if with_response:
        text = RESPONSE_DESCRIPTION if not strict else RESPONSE_DESCRIPTION + " or the text itself"
        fields["response"] = (str, Field(description=text))
    for p in params:
        fields[p.name] = (p.type, Field(description=p.description))
    base = _StrictValidatorArgs if strict else _ValidatorArgs
    suffix = "Strict" if strict else "Arm"
    camel = "".join(part.title() for part in name.split("_"))
    return create_model(f"{camel}{suffix}Args", __base__=base, **fields)


# The batch endpoint validates parameters without `response` (the text comes separately).
BATCH_PARAMS: dict[str, type[BaseModel]] = {name: args_model(name, strict=True, with_response=False)
                                            for name in SPECS}


def run_check(name: str, text: str, params: BaseModel) -> bool:
    return bool(CHECKS[name](text, **params.model_dump(exclude={"response"})))
