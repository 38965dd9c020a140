"""The node's child services (`toolserver.node.services`): what a program the supervisor runs beside its workers
writes, and what a failed start reports."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest

from toolserver.node.services import ChildService, NodeError


def test_a_child_service_that_writes_much_to_stderr_neither_blocks_nor_loses_why_it_failed():
    """A node's service (Redis, Chroma) writes its stderr where nobody has to read it: with a pipe that nobody read
    after the start, a program that wrote more than the pipe holds (64 KB) blocked on its next write. What it wrote
    last is still there to say why a start failed."""
    class Chatty(ChildService):
        name = "chatty"

    chatty = Chatty()
    chatty._spawn([sys.executable, "-c", "import sys\nfor i in range(20000): sys.stderr.write(f'warning {i}\\n')\n"
                                         "sys.stderr.flush(); sys.exit(3)"])
    try:
        assert chatty.process is not None
        assert chatty.process.wait(30) == 3  # blocked for good on a full pipe before
        assert chatty.stderr_tail(40).endswith("warning 19999")
        with pytest.raises(NodeError, match=r"chatty exited at start: x+ no port"):
            chatty._start([sys.executable, "-c", "import sys; sys.stderr.write('x' * 200000 + ' no port'); sys.exit(1)"],
                          lambda: False)
        assert chatty.stderr_tail().endswith("x no port")
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            chatty.stop()
