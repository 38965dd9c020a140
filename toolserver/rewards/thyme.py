"""Thyme's reward (profile `thyme`) is not served: its goldens are recorded (tests/data/rewards/thyme.json, from
yfzhang114/Thyme @ b9285b7a `examples/train/grpo/plugin/agent_rm.py` and its trainer's mask and sum), but its
accuracy term first grades with swift's own math verifier, whose `math_equal` runs Python's `eval` on the model's
answer text (`handle_pi`), which toolserver does not do on model output (docs/rewards-profiles.md)."""

from __future__ import annotations

WITHOUT_REWARD = {
    "thyme": "Thyme's reward (agent_rm.py@b9285b7a: fmt_orm, vqa_orm, cst_orm) is not served yet: its math grader "
             "evaluates the model's answer with Python's eval, which toolserver does not run on model output; its "
             "goldens are recorded (docs/rewards-profiles.md)",
}
