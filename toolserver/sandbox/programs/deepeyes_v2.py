"""DeepEyesV2's code server as a cell runner inside the sandbox: the `/jupyter_sandbox` endpoint of
ChenShawn/MultiModal-Jupyter-Sandbox @ 148d8d89 (`fast_api_server.py`), which DeepEyesV2 (Visual-Agent/DeepEyesV2
@ 0373e6e0) sends each cell to. The confinement is ours; what a cell does and prints is the reference's:

- the cell runs in an IPython shell (`InteractiveShellEmbed`, IPython pinned: from 9.8 on its displayhook numbers
  `Out[0]:` instead of `Out[1]:`), so a last expression is printed as `Out[1]: …` and an error is IPython's
  traceback, colours off, which the reference returns as the cell's stderr;
- a cell that does not compile is not run: its stderr is `SyntaxError - <message>`;
- only stdout is the cell's: what the code writes to stderr, and its warnings, are not shown (the reference
  redirects `sys.stdout` alone);
- `plt.show()` returns every open figure (laid out tight, saved as PNG with a tight bounding box at the figure
  dpi) and closes only the current one, so two open figures shown twice give three images; at the end of the cell
  the current figure is closed;
- a cell past its time gets the reference's alarm: `TimeoutException: Timed out!` raised where the code is, with
  the traceback frame of the reference's handler (its file as the reference's Docker image places it).

The namespace is made by the profile's preamble (`toolserver.profiles.deepeyes_v2.PREAMBLE`), as the env's init
cell makes it.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import re
import signal
from typing import TYPE_CHECKING, Any

from IPython.terminal.embed import InteractiveShellEmbed
from PIL import Image
from traitlets.config import Config

from toolserver.sandbox.child import capped, collect, workdir

if TYPE_CHECKING:
    from toolserver.sandbox.child import Cells, Request

ANSI = re.compile(r"\x1B\[[0-?]*[ -/]*[@-~]")
SERVER_FILE = "/workspace/jupyter_sandbox/fast_api_server.py"  # where the reference's image keeps its server
SERVER_LINES = 107  # its lines before `def time_limit`, so the handler's frame reads `fast_api_server.py:110`


class TimeoutException(Exception):  # the reference's name: the model reads it in its traceback
    pass


def _reference_alarm_handler() -> Any:
    """The reference's SIGALRM handler, compiled under its file name and line numbers, with its source where
    tracebacks look for it."""
    source = ("\n" * SERVER_LINES + "def time_limit(seconds: float):\n"
              "    def signal_handler(signum, frame):\n"
              "        raise TimeoutException(\"Timed out!\")\n"
              "    return signal_handler\n")
    linecache.cache[SERVER_FILE] = (len(source), None, source.splitlines(True), SERVER_FILE)
    namespace: dict[str, Any] = {"TimeoutException": TimeoutException}
    exec(compile(source, SERVER_FILE, "exec"), namespace)  # our own constant source
    return namespace["time_limit"](0)


ALARM = _reference_alarm_handler()


def _shell(cells: Cells) -> InteractiveShellEmbed:
    shell = cells.state.get("shell")
    if shell is None:
        os.environ["IPYTHONDIR"] = os.path.join(workdir(), ".ipython")
        config = Config()
        config.HistoryManager.enabled = False  # nothing on disk; cells are not stored in history upstream either
        shell = InteractiveShellEmbed(config=config, user_ns=cells.namespace, colors="nocolor")
        cells.state["shell"] = shell
    return shell


def run_cell(code: str, request: Request, cells: Cells) -> tuple[str | None, dict[str, Any]]:
    """One `/jupyter_sandbox` call on the session's shell: its stderr is in the details (stdout is the child's)."""
    import matplotlib.pyplot as plt

    shell = _shell(cells)
    try:
        compile(code, "<string>", "exec")
    except SyntaxError as err:
        return None, {"stderr": f"SyntaxError - {err}"}
    tracebacks = io.StringIO()
    show_traceback = shell.showtraceback

    def traceback_to_stderr(*args: Any, **kwargs: Any) -> Any:
        with contextlib.redirect_stdout(tracebacks):
            return show_traceback(*args, **kwargs)

    shell.showtraceback = traceback_to_stderr  # type: ignore[method-assign]
    original_show = plt.show
    plt.show = lambda *args, **kwargs: _show_figures(cells)
    signal.signal(signal.SIGALRM, ALARM)
    signal.setitimer(signal.ITIMER_REAL, float(request.options.get("alarm_s", 200.0)))
    try:
        shell.run_cell(code)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        shell.showtraceback = show_traceback  # type: ignore[method-assign]
        plt.show = original_show
        plt.close()
    return None, {"stderr": capped(ANSI.sub("", tracebacks.getvalue()), request.max_output_bytes, "stderr")}


def _show_figures(cells: Cells) -> None:
    """`plt.show()` as the reference patches it: every open figure, then the current one closed."""
    import matplotlib.pyplot as plt

    for number in plt.get_fignums():
        figure = plt.figure(number)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, bbox_inches="tight", format="png")
        data = buffer.getvalue()
        collect(cells.current, {"kind": "figure", "format": "png", "data": data}, Image.open(io.BytesIO(data)).size)
    plt.close()
