"""The 19 validators: per-call time on a 2,000-word response, all 19 on a text seen for the first time, NLTK's
punkt against the compiled splitter on that text, and /v1/validate throughput with either splitter (two
servers, `SENTENCE_SPLITTER=native` and `nltk`, alive together, requests alternated, medians).

Run: .venv/bin/python -m bench.bench_validators [--repeats 200] [--requests 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx
import orjson

from bench.common import Server
from toolserver.validation.checks import clear_caches
from toolserver.validation.sentences import english_tokenizer, native_punkt, split
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


def all_first_sight(text: str, repeats: int) -> float:
    """All 19 checks on one text, every cache emptied first (ms, median)."""
    params = {name: BATCH_PARAMS[name].model_validate(PARAMS[name]) for name in SPECS}
    times = []
    for _ in range(repeats):
        clear_caches()
        started = time.perf_counter()
        for name in SPECS:
            run_check(name, text, params[name])
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def splitters(text: str, repeats: int) -> dict[str, float]:
    """NLTK's punkt and the compiled splitter on the same text, alternated (ms, medians), same sentences."""
    assert native_punkt() is not None, "the compiled splitter failed its check here"
    assert split(text) == english_tokenizer().tokenize(text)
    nltk, native = [], []
    for _ in range(repeats):
        for fn, out in ((english_tokenizer().tokenize, nltk), (split, native)):
            started = time.perf_counter()
            fn(text)
            out.append(time.perf_counter() - started)
    a, b = statistics.median(nltk) * 1e3, statistics.median(native) * 1e3
    return {"nltk_ms": round(a, 3), "native_ms": round(b, 4), "ratio": round(a / b, 1)}


def batch_throughput(text: str, requests: int, items_per_request: int = 1900,
                     distinct: bool = False) -> dict[str, dict[str, float]]:
    """All 19 checks per text (`distinct`: every item its own text), on a server per splitter; the body is
    encoded once, so the time is the server's (and the transfer)."""
    items = [{"tool": name, "params": PARAMS[name], "text": f"{text} {i}" if distinct else f"{text} {i // 19}"}
             for i, name in enumerate(list(SPECS) * (items_per_request // 19))]
    body = orjson.dumps({"items": items})
    kinds = ("native", "nltk")
    times: dict[str, list[float]] = {name: [] for name in kinds}
    answers = {}
    with Server({"TOOLSERVER_SENTENCE_SPLITTER": "native"}) as native, \
            Server({"TOOLSERVER_SENTENCE_SPLITTER": "nltk"}) as nltk:
        clients = {name: httpx.Client(base_url=server.url, timeout=600,
                                      headers={"content-type": "application/json"})
                   for name, server in (("native", native), ("nltk", nltk))}
        for client in clients.values():  # warm-up (waits for the splitter's start-up check)
            client.post("/v1/validate", content=orjson.dumps({"items": items[:19]})).raise_for_status()
        for round_ in range(requests):
            for name in kinds if round_ % 2 == 0 else kinds[::-1]:
                started = time.perf_counter()
                r = clients[name].post("/v1/validate", content=body)
                times[name].append(time.perf_counter() - started)
                answers[name] = r.json()["results"]
                assert all(x["ok"] for x in answers[name])
        for client in clients.values():
            client.close()
    assert answers["native"] == answers["nltk"], "the two splitters gave different answers"
    return {name: {"median_s": round(statistics.median(t), 3),
                   "checks_per_s": round(len(items) / statistics.median(t))} for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--requests", type=int, default=5)
    args = parser.parse_args()
    text = response_2000_words()
    calls = per_call(text, args.repeats)
    report = {"words": len(text.split()), "per_call_ms": {k: round(v, 3) for k, v in calls.items()},
              "all_19_first_sight_ms": round(all_first_sight(text, args.repeats), 3),
              "splitting": splitters(text, max(20, args.repeats // 4)),
              "batch": batch_throughput(text, args.requests),
              "batch_distinct_texts": batch_throughput(text, args.requests, distinct=True)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
