"""The 19 validators: per-call time on a 2,000-word response, and /v1/validate throughput.

Run: .venv/bin/python -m bench.bench_validators [--repeats 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx

from bench.common import Server
from toolserver.validation.checks import clear_caches
from toolserver.validation.specs import BATCH_PARAMS, SPECS, run_check

PARAMS = {
    "check_whether_response_paragraph_number_in_range": {"lower_bound": 1, "upper_bound": 50},
    "check_whether_response_sentence_number_in_range": {"lower_bound": 1, "upper_bound": 500},
    "check_whether_each_paragraph_sentence_number_in_range": {"lower_bound": 1, "upper_bound": 50},
    "check_whether_each_paragraph_sentence_number_in_range_list": {"ranges": [[1, 50]] * 14},
    "check_whether_response_word_count_in_range": {"lower_bound": 1500, "upper_bound": 2500},
    "check_whether_each_paragraph_word_count_in_range": {"lower_bound": 1, "upper_bound": 500},
    "check_whether_whole_response_not_contain_certain_substrings": {"substrings": ["foo", "bar", "baz"]},
    "check_whether_whole_response_not_contain_certain_substring": {"substring": ","},
    "check_whether_each_sentence_begin_with_certain_substring": {"substring": "the"},
    "check_whether_each_paragraph_begin_with_certain_substring": {"substring": "in"},
    "check_whether_each_paragraph_end_with_certain_substring": {"substring": "end"},
    "check_whether_each_sentence_end_with_certain_substring": {"substring": "today"},
    "check_whether_whole_response_begin_with_certain_substring": {"substring": "in the"},
    "check_whether_whole_response_end_with_certain_substring": {"substring": "the end"},
    "check_whether_each_keyword_in_list_mentioned_in_range": {"keywords": ["market", "growth", "#AI"],
                                                               "lower_bound_times": 1, "upper_bound_times": 200},
    "check_whether_total_keyword_in_list_mentioned_in_range": {"keywords": ["market", "growth", "#AI"],
                                                               "lower_bound_times": 1, "upper_bound_times": 500},
    "check_percentage_number_precision_in_response": {"precision": 1},
    "check_number_precision_in_response": {"precision": 2},
    "check_whether_has_no_arabic_number_in_response": {},
}


def response_2000_words() -> str:
    """14 paragraphs of 10 sentences, about 2,000 words, with numbers, percentages, abbreviations, hashtags."""
    sentences = [
        "In the third quarter the market grew by 12.5% while costs rose only 3.25 points.",
        "Dr. Smith of Acme Inc. said the growth came from new customers in the U.S. and abroad.",
        "Analysts expect about 1,000 new accounts per month, e.g. from the #AI campaign.",
        "Still, the team warns that supply is tight and prices may rise again soon.",
        "Nobody knows whether the trend will hold... but most are hopeful.",
    ]
    paragraphs = [" ".join(sentences[(p + i) % 5] for i in range(10)) for p in range(14)]
    return "\n\n".join(paragraphs)


def per_call(text: str, repeats: int) -> dict[str, float]:
    """After warm-up, with the sentence cache emptied before every call: the cost of a text seen the first time."""
    out = {}
    for name in SPECS:
        params = BATCH_PARAMS[name].model_validate(PARAMS[name])
        for _ in range(5):  # warm-up (the Punkt model loads on the first sentence check)
            run_check(name, text, params)
        times = []
        for _ in range(repeats):
            clear_caches()
            started = time.perf_counter()
            run_check(name, text, params)
            times.append(time.perf_counter() - started)
        out[name] = statistics.median(times) * 1e3
    return out


def batch_throughput(text: str, items_per_request: int = 1900, requests: int = 3,
                     distinct: bool = False) -> dict[str, float]:
    """All 19 checks per text; `distinct` gives every item its own text (no sentence reuse at all)."""
    items = [{"tool": name, "params": PARAMS[name], "text": f"{text} {i}" if distinct else f"{text} {i // 19}"}
             for i, name in enumerate(list(SPECS) * (items_per_request // 19))]
    with Server() as server, httpx.Client(base_url=server.url, timeout=300) as client:
        client.post("/v1/validate", json={"items": items[:19]}).raise_for_status()
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            r = client.post("/v1/validate", json={"items": items})
            times.append(time.perf_counter() - started)
            assert all(x["ok"] for x in r.json()["results"])
    best = min(times)
    return {"items_per_request": len(items), "texts": len({x["text"] for x in items}), "best_s": round(best, 2),
            "checks_per_s": round(len(items) / best)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    text = response_2000_words()
    calls = per_call(text, args.repeats)
    report = {"words": len(text.split()), "per_call_ms": {k: round(v, 3) for k, v in calls.items()},
              "batch": batch_throughput(text), "batch_distinct_texts": batch_throughput(text, distinct=True)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
