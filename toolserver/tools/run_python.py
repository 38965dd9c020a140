"""`run_python`: run model-written Python over the session's images in the sandbox (`toolserver.sandbox`).

Each call is a fresh, confined process forked from a zygote that has numpy, Pillow and matplotlib imported: no
state carries from one call to the next (the code-as-tool profiles keep state where their systems do). The
images are PIL images under three kinds of names: `images[i]` in the order given, `image_1`… (1-based, as
DeepEyesV2 names them) and each image's key where it is a Python identifier (`original_image`,
`observation_2`). What the code shows with `plt.show()` or passes to `display()` joins the session as new
images; stdout and stderr come back as text, each cut at `SANDBOX_MAX_OUTPUT_BYTES` with a marker that says
how much was cut.
"""

from __future__ import annotations

import keyword

from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.sandbox.executor import Execution, SandboxImage, SandboxUnavailable
from toolserver.tools.args import ImageRef
from toolserver.tools.base import Tool, ToolContext, ToolOutput

MAX_CODE_CHARS = 100_000
MAX_IMAGES_IN = 16
RESERVED = {"images", "display", "plt", "np", "Image"}


class RunPythonArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    code: str = Field(min_length=1, max_length=MAX_CODE_CHARS,
                      description="Python 3 source. numpy, PIL and matplotlib are installed; use print() for text, "
                                  "plt.show() or display(image) for images.")
    images: list[ImageRef] | None = Field(default=None, max_length=MAX_IMAGES_IN,
                                          description="The images to load (keys or 0-based indices), in order; "
                                                      "default: every image of the session (at most 16).")


class RunPython(Tool):
    name = "run_python"
    description = ("Run Python code on the session's images in an isolated sandbox (no network, no files kept, "
                   "a time limit). The images are PIL images: `images[i]` in the order given, `image_1`, "
                   "`image_2`, … and each image's key (e.g. `original_image`). Print text with print(); show an "
                   "image with display(img) or a matplotlib figure with plt.show(): each becomes a new image. "
                   "Nothing is kept between calls.")
    Args = RunPythonArgs
    lane = "code"

    def run(self, ctx: ToolContext, args: RunPythonArgs) -> ToolOutput:
        if ctx.sandbox is None:
            raise ToolFailure("Error: code execution is not available on this server.", "sandbox_unavailable")
        entries = [ctx.image(ref) for ref in args.images] if args.images is not None else list(ctx.images)
        if len(entries) > MAX_IMAGES_IN:
            raise ToolFailure(f"Error: this session has {len(entries)} images; name at most {MAX_IMAGES_IN} of them "
                              "in `images`.", "too_many_images")
        named = []
        for i, entry in enumerate(entries, 1):
            names = [f"image_{i}"]
            if entry.key.isidentifier() and not keyword.iskeyword(entry.key) and entry.key not in RESERVED:
                names.append(entry.key)
            named.append(SandboxImage(names, entry.pixels))  # sent to the zygote once, then named by a token
        try:
            execution = ctx.sandbox.run(args.code, named)
        except SandboxUnavailable as exc:
            raise ToolFailure(f"Error: {exc}.", "sandbox_unavailable") from None
        return self._output(ctx, execution)

    def _output(self, ctx: ToolContext, execution: Execution) -> ToolOutput:
        assert ctx.sandbox is not None
        meta = {"status": execution.status, "seconds": round(execution.seconds, 4)}
        if execution.status == "timeout":
            limit = ctx.sandbox.config.timeout_s
            return ToolOutput.failure(f"Error: the code did not finish within {limit:g} s and was stopped.",
                                      "timeout", **meta)
        if execution.status == "disk_quota":
            quota_mb = ctx.sandbox.config.limits.disk_bytes / 2**20
            return ToolOutput.failure(f"Error: the code's files (its working directory and /tmp) reached the disk "
                                      f"quota of {quota_mb:g} MiB and it was stopped; nothing was kept.",
                                      "disk_quota", **meta)
        if execution.status in ("cpu_limit", "output_too_large", "crashed", "confinement_failed", "busy"):
            return ToolOutput.failure(f"Error: {_KILLED[execution.status]}", execution.status, **meta)
        parts = [_stream("stdout", execution.stdout, execution.stdout_dropped),
                 _stream("stderr", execution.stderr, execution.stderr_dropped)]
        text = "\n".join(p for p in parts if p)
        if execution.error:
            return ToolOutput.failure("\n".join(p for p in (text, execution.error.rstrip()) if p), "code_error",
                                      **meta)
        shown = []
        for offset, image in enumerate(execution.images):
            shown.append(f"`{ctx.observation_key(offset)}` (index {len(ctx.images) + offset}), "
                         f"{image.width}x{image.height} pixels")
        summary = f"The code showed {len(shown)} image{'s' if len(shown) != 1 else ''}: {'; '.join(shown)}." \
            if shown else ""
        if execution.images_dropped:
            summary += (f" {execution.images_dropped} more were not kept (at most {ctx.sandbox.config.max_images} "
                        "images a call, each within the pixel limit).")
        body = text if text else "The code ran and printed nothing."
        return ToolOutput(text=f"{body}\n{summary.strip()}".strip(), images=execution.images, meta=meta)


_KILLED = {
    "cpu_limit": "the code used up its CPU time and was stopped.",
    "output_too_large": "the code's output (text and images) was too large; it was stopped and nothing was kept.",
    "crashed": "the code's process died (for example out of memory, or a crash in a library); nothing was kept.",
    "confinement_failed": "the sandbox could not be set up for this call; nothing was run.",
    "busy": "the sandbox is at capacity; retry shortly.",
}


def _stream(name: str, text: str, dropped: int) -> str:
    if not text and not dropped:
        return ""
    body = text if text.endswith("\n") or not text else text + "\n"
    marker = f"[{name} truncated: {dropped} more bytes not shown]\n" if dropped else ""
    return f"{name}:\n{body}{marker}".rstrip("\n")
