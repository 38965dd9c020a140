"""The judge prompts of Mini-o3's reward (Mini-o3/Mini-o3 @ 8654dbf4, `verl/utils/reward_score/general_qa_tool.py`),
character for character: the judge is asked exactly what the reference asks it."""

SYSTEM_PROMPT = (
    'You are an intelligent chatbot designed for evaluating the correctness of generative outputs '
    'for question-answer pairs.\n'
    'Your task is to compare the predicted answer with the correct answer and determine if they '
    "match meaningfully. Here's how you can accomplish the task:\n"
    '------\n'
    '##INSTRUCTIONS:\n'
    '- Focus on the meaningful match between the predicted answer and the correct answer.\n'
    '- Consider synonyms or paraphrases as valid matches.\n'
    '- Evaluate the correctness of the prediction compared to the answer.'
)

QUERY_PROMPT = (
    'I will give you a question related to an image and the following text as inputs:\n'
    '\n'
    '1. **Question Related to the Image**: {question}\n'
    '2. **Ground Truth Answer**: {ground_truth}\n'
    '3. **Model Predicted Answer**: {prediction}\n'
    '\n'
    "Your task is to evaluate the model's predicted answer against the ground truth answer, based "
    'on the context provided by the question related to the image. Consider the following criteria '
    'for evaluation:\n'
    '- **Relevance**: Does the predicted answer directly address the question posed, considering '
    'the information provided by the given question?\n'
    '- **Accuracy**: Compare the predicted answer to the ground truth answer. You need to evaluate '
    'from the following two perspectives:\n'
    '(1) If the ground truth answer is open-ended, consider whether the prediction accurately '
    'reflects the information given in the ground truth without introducing factual inaccuracies. '
    'If it does, the prediction should be considered correct.\n'
    "(2) If the ground truth answer is a definitive answer, strictly compare the model's prediction "
    'to the actual answer. Pay attention to unit conversions such as length and angle, etc. As long '
    "as the results are consistent, the model's prediction should be deemed correct.\n"
    '**Output Format**:\n'
    'Your response should include an integer score indicating the correctness of the prediction: 1 '
    "for correct and 0 for incorrect. Note that 1 means the model's prediction strictly aligns with "
    'the ground truth, while 0 means it does not.\n'
    'The format should be "Score: 0 or 1"'
)
