"""Instruction-following checks (ARM-Thinker's 19 validators): pure functions over text, no HTTP."""
