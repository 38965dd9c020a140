"""Records tests/data/longvt_golden.json by running LongVT's own MCP server (EvolvingLMMs-Lab/LongVT @ 08d755b9,
`examples/video_tools/mcp_server.py`, its `crop_video` tool on its FastMCP app) over tests/data/longvt_clip.mp4.

Two steps, one command (from a toolserver checkout, with toolserver's venv):

    PYTHONPATH=$PWD /work/main/.venv/bin/python scripts/goldens/record_longvt.py <LongVT checkout> [venv dir]

1. With toolserver's PyAV it writes the test clip (12 s at 10 fps, 320x240, moving coloured squares on a
   gradient: every frame differs) unless tests/data/longvt_clip.mp4 is already there; the clip is committed, so
   the goldens do not hang on an encoder's version.
2. It builds a throwaway venv (default /tmp/longvt-golden-venv) with the reference's pins from
   `requirements_reproduce.txt` that matter here (qwen-vl-utils 0.0.11, decord 0.6.0, mcp 1.12.1, pydantic
   2.11.7, opencv-python-headless 4.11.0.86, av 15.0.0, torchvision 0.21.0 without its dependencies) over the
   torch of toolserver's venv, reached through a .pth file (PyPI has only CUDA builds of the reference's torch
   2.6; what runs here is torchvision's Python: `io.read_video` over PyAV, and `resize`, torch's uint8 bicubic
   resize with antialias). torchvision's compiled ops need CUDA libraries and are not loadable beside a CPU
   torch, so its meta registrations for detection ops (nms, roi_align) are emptied in that venv: nothing here
   uses them. Inside that venv it imports the server module from the checkout and calls the tool over an
   in-memory MCP client session, the way the trainer's `MCPClientManager.call_tool` does (`call_tool` of the
   client session, the raw `CallToolResult`), and records, per case, what the trainer's `VideoTools` makes of it:
   the text the model is shown and the frames (count, size, SHA-256 of RGB bytes).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIP = ROOT / "tests" / "data" / "longvt_clip.mp4"
OUT = ROOT / "tests" / "data" / "longvt_golden.json"
COMMIT = "08d755b9"
PINS = ["qwen-vl-utils==0.0.11", "decord==0.6.0", "mcp==1.12.1", "opencv-python-headless==4.11.0.86", "av==15.0.0",
        "pydantic==2.11.7"]
MISSING = "/data/videos/missing.mp4"  # a path no machine has

ABSENT = "<absent>"  # the argument left out (None is sent as JSON null)
# (start_time, end_time) as the model writes them; `video_path` is the clip's unless given. The clip lasts 12 s.
CASES: list[dict[str, object]] = [
    {"start_time": 0, "end_time": 12},
    {"start_time": 0.0, "end_time": 12.0},
    {"start_time": 2.5, "end_time": 7.25},
    {"start_time": 3, "end_time": 4},
    {"start_time": 0.05, "end_time": 0.3},
    {"start_time": 11.85, "end_time": 12},
    {"start_time": 1.01, "end_time": 1.19},
    {"start_time": 0.25, "end_time": 0.3},
    {"start_time": 0.3, "end_time": 0.35},
    {"start_time": 0.31, "end_time": 0.39},
    {"start_time": 0, "end_time": 0.05},
    {"start_time": 7.04, "end_time": 7.16},
    {"start_time": 5, "end_time": 5},
    {"start_time": 6, "end_time": 5.5},
    {"start_time": -1, "end_time": 3},
    {"start_time": 12, "end_time": 13},
    {"start_time": 13, "end_time": 14},
    {"start_time": 4, "end_time": 12.5},
    {"start_time": 4},
    {"end_time": 4},
    {},
    {"start_time": "2", "end_time": "3.5"},
    {"video_path": MISSING, "start_time": 1, "end_time": 2},
    {"video_path": "", "start_time": 1, "end_time": 2},
    {"video_path": "   ", "start_time": 1, "end_time": 2},
    {"video_path": ABSENT, "start_time": 1, "end_time": 2},
    {"video_path": None, "start_time": 1, "end_time": 2},
    {"start_time": None, "end_time": 2},
    {"start_time": "abc", "end_time": 2},
    {"start_time": 1, "end_time": [2]},
    {"video_path": 5, "start_time": 1, "end_time": 2},
    {"start_time": True, "end_time": 2},
    {"start_time": 1, "end_time": 2, "fps": 4},
]


def make_clip() -> bytes:
    """12 s at 10 fps, 320x240 H.264: a gradient with a red square moving right and a blue one moving down."""
    import av
    import numpy as np

    width, height, fps = 320, 240, 10
    ys, xs = np.mgrid[0:height, 0:width]
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "18", "preset": "ultrafast"}
        for k in range(12 * fps):
            pixels = np.zeros((height, width, 3), np.uint8)
            pixels[..., 1] = (xs * 255 // (width - 1)).astype(np.uint8)
            pixels[..., 2] = ((ys + 2 * k) % height * 255 // (height - 1)).astype(np.uint8)
            x, y = (5 + 2 * k) % (width - 40), (3 + k) % (height - 40)
            pixels[60:100, x:x + 40] = (230, 30, 30)
            pixels[y:y + 40, 200:240] = (30, 30, 230)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def build_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "torchvision==0.21.0"], check=True)
        site = Path(subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
        import torch as host_torch

        (site / "zz_host_torch.pth").write_text(str(Path(host_torch.__file__).parents[1]) + "\n")
        (site / "torchvision" / "_meta_registrations.py").write_text("# emptied: detection ops' meta kernels\n")
    return python


def record_inside(checkout: Path, clip: Path, out: Path) -> None:
    """Runs in the throwaway venv: the reference's server module and its tool over an MCP client session."""
    import importlib.util

    import numpy as np
    from mcp.shared.memory import create_connected_server_and_client_session
    from PIL import Image

    spec = importlib.util.spec_from_file_location("longvt_mcp_server", checkout / "examples/video_tools/mcp_server.py")
    assert spec is not None and spec.loader is not None
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)

    def shown(result) -> dict[str, object]:
        # custom_tools/video_tools.py: `_parse_tool_result` then `execute`, as the trainer runs them.
        texts = [part.text for part in result.content if part.type == "text"]
        for text in texts:
            if any(word in text.lower() for word in ["error", "failed", "exception", "validation error"]):
                return {"text": f"Tool execution failed: {text.strip()}", "frames": []}
        frames = []
        for part in result.content:
            if part.type == "image":
                import base64

                image = Image.open(io.BytesIO(base64.b64decode(part.data))).convert("RGB")
                pixels = np.asarray(image)
                frames.append({"size": list(image.size), "sha256": hashlib.sha256(pixels.tobytes()).hexdigest()})
        return {"text": "The tool executed successfully. Here are the processed result", "frames": frames}

    async def run() -> list[dict[str, object]]:
        records = []
        async with create_connected_server_and_client_session(server.app._mcp_server) as client:
            for case in CASES:
                args = {"video_path": str(clip), **case}
                args = {k: v for k, v in args.items() if v != ABSENT}
                result = await client.call_tool("crop_video", args)
                given = {k: ("<clip>" if k == "video_path" and v == str(clip) else v) for k, v in args.items()}
                record = shown(result)  # the clip's path as "<clip>" in the texts too
                record["text"] = str(record["text"]).replace(str(clip), "<clip>")
                records.append({"arguments": given, "is_error": bool(result.isError), **record})
        return records

    import decord
    import qwen_vl_utils
    import torch

    data = {"reference": f"EvolvingLMMs-Lab/LongVT @ {COMMIT}: examples/video_tools/mcp_server.py crop_video, "
                         "custom_tools/video_tools.py VideoTools",
            "versions": {"qwen_vl_utils": "0.0.11", "decord": decord.__version__, "torch": torch.__version__,
                         "backend": qwen_vl_utils.vision_process.get_video_reader_backend()},
            "clip_sha256": hashlib.sha256(clip.read_bytes()).hexdigest(), "cases": asyncio.run(run())}
    out.write_text(json.dumps(data, indent=1) + "\n")


def main() -> None:
    if sys.argv[1] == "--inside":
        record_inside(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        return
    checkout = Path(sys.argv[1]).resolve()
    venv = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/longvt-golden-venv")
    if not CLIP.exists():
        CLIP.write_bytes(make_clip())
    python = build_venv(venv)
    env = {**os.environ, "PYTHONPATH": ""}
    subprocess.run([str(python), __file__, "--inside", str(checkout), str(CLIP), str(OUT)], check=True, env=env)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
