"""The judge prompts of Thyme's reward (yfzhang114/Thyme @ b9285b7a, `examples/train/grpo/plugin/agent_rm.py`:
`vqa_orm_template` for the answer's correctness, `consistency_template` for the agreement of the thinking with the
answer), character for character. The reference fills them by plain text replacement, in this order: VQA
`ref_answer` (the ground truth), `gen_answer` (the extracted answer), `input_question`; consistency `gen_solution`
(the thinking's last 500 characters), `gen_answer`.
"""

from __future__ import annotations

VQA = (
    '\n'
    'You are an expert about question answering. I will provide a question, a generated answer to the question and '
    'the reference answer. Please evaluate the Correctness of the generated answer: If the generated answer is '
    'consistent with the reference answer, rate the Correctness as 1, else rate 0.\n'
    'Here is the question, the generated answer for you to evaluate and the reference answer:\n'
    '\n'
    '\n'
    '#### Question: \n'
    'input_question\n'
    '\n'
    '\n'
    '#### Generated Answer: \n'
    'gen_answer\n'
    '\n'
    '\n'
    '#### Reference Answer: \n'
    'ref_answer\n'
    '\n'
    '\n'
    '### Output Format (strictly follow)\n'
    '\n'
    'Please provide an integer score to indicate the Correctness. Output the score in a JSON dictionary with '
    'nothing else for easy processing, in this form: {"Correctness": score}.\n'
    '\n'
    'Your Evaluation Result:\n'
)

CONSISTENCY = (
    '\n'
    'You are an expert about question answering. I will provide you a solution process and a final answer to the '
    'same question. Please evaluate the Consistency between the solution process and the final anwer: If the '
    'solution process draws the same conclusion with the final answer, rate the Consistency as 1, else rate 0.\n'
    'Here is the solution process and the final answer for you to evaluate:\n'
    '\n'
    '\n'
    '#### Solution Process: \n'
    'gen_solution\n'
    '\n'
    '\n'
    '#### Final Answer: \n'
    'gen_answer\n'
    '\n'
    '\n'
    '### Output Format (strictly follow)\n'
    '\n'
    'Please provide an integer score to indicate the Consistency. Output the score in a JSON dictionary with '
    'nothing else for easy processing, in this form: {"Consistency": score}.\n'
    '\n'
    'Your Evaluation Result:\n'
)
