"""The perception toolsets' tools (OpenThinkIMG @ 45d295f0): one module per tool worker, each reproducing what that
worker computes and what OpenThinkIMG's GRPO rollout (`r1_v/open_r1/trainer/tool_generation.py`) makes of its
answer; `worker.py` holds what they share (the image a worker is handed, the texts the rollout writes back).
The `openthinkimg` profile (`toolserver/profiles/openthinkimg.py`) lists them under the workers' names.
"""
