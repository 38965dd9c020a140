"""The judge prompts of DeepEyes' reward (Visual-Agent/DeepEyes @ 6c5e796, `verl/utils/reward_score/vl_agent.py`),
character for character: the judge is asked exactly what the reference asks it (texts, typos and spacing kept).
"""

from __future__ import annotations

from typing import Any

# `get_chat_template()` followed by each of `get_gpt4_score_ICE()`'s seven examples and two newlines.
IN_CONTEXT = (
    '\n'
    'Below are two answers to a question. Question is [Question], [Standard Answer] is the standard '
    "answer to the question, and [Model_answer] is the answer extracted from a model's output to "
    'this question.  Determine whether these two answers are consistent.\n'
    'Note that [Model Answer] is consistent with [Standard Answer] whenever they are essentially '
    'the same. If the meaning is expressed in the same way, it is considered consistent, for '
    "example, 'pink' and 'it is pink'.\n"
    'If they are consistent, Judement is 1; if they are different, Judement is 0. Just output '
    "Judement and don't output anything else.\n"
    '\n'
    '\n'
    '\n'
    '[Question]: Is the countertop tan or blue?\n'
    '[Standard Answer]: The countertop is tan.\n'
    '[Model_answer] : tan\n'
    'Judgement: 1\n'
    '\n'
    '\n'
    '\n'
    '[Question]: On which side of the picture is the barrier?\n'
    '[Standard Answer]: The barrier is on the left side of the picture.\n'
    '[Model_answer] : left\n'
    'Judgement: 1\n'
    '\n'
    '\n'
    '\n'
    '[Question]: Is the kite brown and large?\n'
    '[Standard Answer]: Yes, the kite is brown and large.\n'
    '[Model_answer] : Yes\n'
    'Judgement: 1\n'
    '\n'
    '\n'
    '\n'
    '[Question]: Are the spots on a giraffe?\n'
    '[Standard Answer]: No, the spots are on a banana.\n'
    '[Model_answer] : no\n'
    'Judgement: 1\n'
    '\n'
    '\n'
    '\n'
    '[Question]: Who is wearing pants?\n'
    '[Standard Answer]: The boy is wearing pants.\n'
    '[Model_answer] : The person in the picture is wearing pants.\n'
    'Judgement: 1\n'
    '\n'
    '\n'
    '\n'
    '[Question]: Is the man phone both blue and closed?\n'
    '[Standard Answer]: Yes, the man phone is both blue and closed.\n'
    '[Model_answer] : No.\n'
    'Judgement: 0\n'
    '\n'
    '\n'
    '\n'
    '[Question]: What color is the towel in the center of the picture?\n'
    '[Standard Answer]: The towel in the center of the picture is blue.\n'
    '[Model_answer] : The towel in the center of the picture is pink.\n'
    'Judgement: 0\n'
    '\n'
    '\n'
)

COMMON_VERIFY_PROMPT = (
    '# CONTEXT #\n'
    'I am a teacher, and I have some high-level reasoning problems. I am tasked with evaluating the '
    "correctness of a student's answer. \n"
    "Below, I am provided with a problem and a reference answer. Additionally, a student's answer "
    "is provided. My job is to assess whether the student's answer captures the same meaning as the "
    'reference answer, even when expressed with different wording or format.\n'
    '\n'
    '# OBJECTIVE #\n'
    "I need you to judge whether the student's answer is correct given the ground truth answer.\n"
    '\n'
    'Your tasks include:\n'
    '1. Identify Semantic Equivalence: Carefully examine the expression in both answers. Confirm '
    "whether the semantic meaning of student's final answer is equivalent to the reference answer, "
    'even when expressed with different wording or format.\n'
    '\n'
    '# TONE #\n'
    'Professional, scientific.\n'
    '\n'
    '# RESPONSE: MARKDOWN REPORT #\n'
    '## Equivalence Judgement\n'
    "[Whether the student's answer share the same meaning with the reference answer. (TRUE or FALSE)]\n"
    '\n'
    '# ATTENTION #\n'
    ' - The reference answer is ALWAYS correct. You should carefully judge whether the student '
    'gives the same answer as reference answer.\n'
    " - The Equivalence Judgement is only TRUE or FALSE. The answer is FALSE even if the student's "
    'final answer almost correct with a minor mistakes.\n'
    " - Don't give extra explanation.\n"
    '\n'
    '**Question**:\n'
    '{query}\n'
    '\n'
    '**Reference Answer**\n'
    '{gold_ans}\n'
    '\n'
    '## Student Final Answer\n'
    '{pred_ans}'
)

MATH_VERIFY_PROMPT = (
    '# CONTEXT #\n'
    'I am a teacher, and I have some high-level math problems. I am tasked with evaluating the '
    "correctness of a student's answer. \n"
    "Below, I am provided with a problem and a reference answer. Additionally, a student's answer "
    "is provided. My job is to assess whether the student's answer captures the same meaning as the "
    'reference answer, even when expressed with different wording or format.\n'
    '\n'
    '# OBJECTIVE #\n'
    "I need you to judge whether the student's answer is correct given the ground truth answer.\n"
    '\n'
    'Your tasks include:\n'
    '1. Identify Mathematical or Notational Equivalence: Pay special attention to any LaTeX '
    'expressions in both answers. Confirm that the mathematical relationships, variables, and '
    'operations conveyed are equivalent.\n'
    '\n'
    '# TONE #\n'
    'Professional, scientific.\n'
    '\n'
    '# RESPONSE: MARKDOWN REPORT #\n'
    '## Equivalence Judgement\n'
    "[Whether the student's answer share the same meaning with the reference answer. (TRUE or FALSE)]\n"
    '\n'
    '# ATTENTION #\n'
    ' - The reference answer is ALWAYS correct. You should carefully judge whether the student '
    'gives the same answer as reference answer.\n'
    " - The Equivalence Judgement is only TRUE or FALSE. The answer is FALSE even if the student's "
    'final answer almost correct with a minor mistakes.\n'
    " - Don't give extra explanation.\n"
    '\n'
    '**Question**:\n'
    '{query}\n'
    '\n'
    '**Reference Answer**\n'
    '{gold_ans}\n'
    '\n'
    '## Student Final Answer\n'
    '{pred_ans}'
)


def judge_prompt(answer: str, ground_truth: Any, question: Any) -> str:
    """`get_prompt`: the in-context prompt, then the case (each value as an f-string writes it)."""
    return (f"{IN_CONTEXT}\n[Question]: {question}\n[Standard Answer]: {ground_truth}\n"
            f"[Model_answer] : {answer}\nJudgement:")
