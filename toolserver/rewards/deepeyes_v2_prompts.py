"""The judge prompts and answer normalization tables of DeepEyesV2's reward (Visual-Agent/DeepEyesV2 @ 0373e6e0,
`reinforcement_learning/verl/utils/reward_score/`: `verify_prompt.md`, `get_prompt`'s user template,
`MATH_VERIFY_PROMPT`, `SUBSTITUTIONS`, `REMOVED_EXPRESSIONS`), character for character: the judge is asked exactly
what the reference asks it, and a math answer is normalized exactly as there.
"""

from __future__ import annotations

SYSTEM = (
    '# 角色\n'
    '你是一个判断专家，专注于判断输入的2个答案是否一致。\n'
    '\n'
    '# 任务\n'
    '你的任务是判断[模型回答]与[参考答案]是否一致，不需要思考[问题]真正的正确答案，以下是详细的判'
    '断步骤：\n'
    '1. 问题理解：仔细阅读[问题]，并按照[判断标准]对问题进行分类，找出问题中包含多少个提问。\n'
    '    - 问题中可能包含占位符“<image_*>”（其中“ * '
    '”为数字），代表问题中有图片输入。注意：此类问题不用进行问题理解。\n'
    '2. 答案对照：按照问题中的提问顺序，将[模型回答]与[参考答案]一一进行判断，对比是否一致。若存'
    '在一处不一致，则视为不一致。\n'
    '\n'
    '# 判断标准\n'
    '\n'
    '## 简答类\n'
    '答案不唯一或不具体，需要根据材料、条件，自行组织语言回答问题或进行解答题目、证明结论。\n'
    '\n'
    '### 简答（描述）\n'
    '简答（描述）类问题，如材料题、写作题、图片描述等，[参考答案]与[模型回答]不需要完全一致，[模'
    '型答案]中包含[参考答案]中的要点，且表意一致（例如：参考答案为神态描写，则模型答案也必须为神'
    '态描写，否则判断为不一致），即判断为一致。\n'
    '\n'
    '### 解答（证明）\n'
    '解答（证明）类问题，如数学、物理解答（证明）题，[模型回答]必须与[参考答案]结论一致，且给出严'
    '格的解答（证明）过程。\n'
    '- 如果[参考答案]包含解答（证明）过程，[模型答案]未给出解答（证明）过程，则判为不一致；反之，'
    '如果[参考答案]不包含解答（证明）过程，[模型答案]也未给出解答（证明）过程，则判为一致。\n'
    '\n'
    '## 客观类\n'
    '存在明确、客观的答案，在多个答案中选择正确答案或通过常识、计算推理直接给出答案，如科学知识、'
    '数学、物理等。\n'
    '- 可以忽略答案组织形式（排版、分隔方式、是否使用Latex、大小写等）。例如：计算题只需要最终结'
    '果数值一致即可（例：“6棵”、“6”、“six”等视为一致）。\n'
    '\n'
    '### 选择题\n'
    '给出答案选项，答案选项可能用字母（A、B、C、D、...）、罗马数字（I、II、III、IV、...）或阿拉伯'
    '数字（1、2、3、4、...）标记，选择其中一个或多个选项。[模型回答]中的答案只需要与[参考答案]中'
    '对应的标记一致，即判断为一致。\n'
    '\n'
    '### 填空题\n'
    '根据[问题]补充完整陈述内容，将合适的内容填入空缺(缺省)中，题目结构通常包含明确的已知条件和需'
    '要填入的数值，或需自行组织语言。[模型回答]必须与[参考答案]中答案顺序需对应且正确，否则判断为'
    '不一致。\n'
    '- 可以忽略答案组织形式（排版、分隔方式、是否使用Latex、大小写等）。例如：计算题只需要最终结'
    '果数值一致即可（例：“6棵”、“6”、“six”等视为一致）。\n'
    '\n'
    '### 分类（判断）题\n'
    '判断[问题]中指定内容是否正确，或对[问题]中给出的元素根据指定类型进行分类。[模型回答]必须给出'
    '明确的判断（或分类），且必须与[参考答案]对应，否则判为不一致。\n'
    '\n'
    '## 图片输入选择类\n'
    '仅判断[模型回答]与[参考答案]是否一致。禁止分析问题中的图片序号。\n'
    '- 可以忽略答案组织形式（如排版、分隔方式、是否使用Latex等）。\n'
    '\n'
    '# 输出\n'
    '1. 在<think></think>标签中输出你的思考过程。\n'
    '2. 结论输出：用一个词（是或否）在最后得出结论，格式为 \\boxed{Yes} 或 \\boxed{No}。\n'
    '3. 注意：你输出的结论必须与思考过程中得到的结论一致。思考过程结论为：一致/yes，则最终结论输'
    '出：\\boxed{Yes}。\n'
    '\n'
    '## 输出示例\n'
    '<最终结果>\n'
    '\\boxed{Yes/No}\n'
    '<\\最终结果>\n'
    '\n'
    '\n'
    '以下是输入内容：'
)

USER = (
    '\n'
    '    [问题]:{question}\n'
    '    [参考答案]:{answer}\n'
    '    [模型回答]:{prediction}\n'
    '    '
)

MATH = (
    '# CONTEXT #\n'
    'I am a teacher, and I have some high-level math problems. I am tasked with evaluating the '
    "correctness of a student's answer. \n"
    "Below, I am provided with a problem and a reference answer. Additionally, a student's "
    "answer is provided. My job is to assess whether the student's answer captures the same "
    'meaning as the reference answer, even when expressed with different wording or format.\n'
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
    ' - The Equivalence Judgement is only TRUE or FALSE. The answer is FALSE even if the '
    "student's final answer almost correct with a minor mistakes.\n"
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

SUBSTITUTIONS = (('an ', ''),
 ('a ', ''),
 ('.$', '$'),
 ('\\$', ''),
 ('\\ ', ''),
 (' ', ''),
 ('mbox', 'text'),
 (',\\text{and}', ','),
 ('\\text{and}', ','),
 ('\\text{m}', '\\text{}'))

REMOVED_EXPRESSIONS = ('square',
 'ways',
 'integers',
 'dollars',
 'mph',
 'inches',
 'hours',
 'km',
 'units',
 '\\ldots',
 'sue',
 'points',
 'feet',
 'minutes',
 'digits',
 'cents',
 'degrees',
 'cm',
 'gm',
 'pounds',
 'meters',
 'meals',
 'edges',
 'students',
 'childrentickets',
 'multiples',
 '\\text{s}',
 '\\text{.}',
 '\\text{\ns}',
 '\\text{}^2',
 '\\text{}^3',
 '\\text{\n}',
 '\\text{}',
 '\\mathrm{th}',
 '^\\circ',
 '^{\\circ}',
 '\\;',
 ',\\!',
 '{,}',
 '"',
 '\\dots')
