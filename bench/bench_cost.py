"""Served cost vs floor, per tool and profile, on a resident 4000x3000 photo; and where the time goes.

Run: .venv/bin/python -m bench.bench_cost [--iterations 30] [--sr-iterations 5] [--skip-sr]

- **Served**: `toolserver serve` in a child process, the photo uploaded once per session; each call's
  server-side time is its `X-Process-Time` header (request parsing, the tool, the encode, the JSON body).
- **Floor**: in this process, the same pixel work done directly with the same libraries and nothing else:
  the crop (of the model's view where the seed crops the view, with the view precomputed, as the server
  holds it after the first call), the resize, then the encode of the result in the session's output
  format (and base64, as inline delivery sends it). For SMFANet tools the floor is the engine's pass on
  the same crop plus the encode; for a validator, the check itself.
- Served and floor alternate call by call (ABAB), so both see the same machine state. Ratios are of
  medians.

Also measured in the same run:
- `zoom_in` PNG inline vs JPEG inline on the same box (server-side);
- ARM-Thinker's and Groundlight's zooms vs the default `zoom_in` PNG call on the same box;
- client-observed `zoom_in` JPEG inline on a resident 4224x3168 photo vs the resend-per-call path (create a
  session with the photo as base64, zoom, release: base64 in, decode, crop, JPEG, base64 out);
- for an inline 1 MP PNG result, where the client-observed time goes beyond `X-Process-Time`.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pybase64
from PIL import Image

from bench.common import PHOTOS, ROOT, Server, photo_4000x3000
from toolserver.imaging import encode_image
from toolserver.profiles.groundlight import WINDOW, upscale_to, window_box
from toolserver.profiles.mgpo import process_image, to_original_f32
from toolserver.profiles.pixel_reasoner import WHOLE_IMAGE, crop_encoded, jpeg_round_trip
from toolserver.profiles.qwen_family import arm_adjust_box, fetch_image_view, qwen3_crop_and_resize, qwen3_expand_box

MODEL_DIR = ROOT.parent / "shared" / "models" / "smfanet"
BOX = [400, 400, 650, 650]  # rel1000: a 1000x750 region of the 4000x3000 photo
CALLS_PER_SESSION = 5  # a rollout's calls on one image (then the session is released, as a trainer does)


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def p99_ms(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1e3


def encode_inline(img: Image.Image, fmt: str = "png") -> str:
    return pybase64.b64encode_as_string(encode_image(img, fmt))  # what the server's inline delivery does


class Caller:
    def __init__(self, http: httpx.Client, photo_b64: str):
        self.http = http
        self.photo_b64 = photo_b64

    def session(self, profile: str = "default", **settings) -> str:
        body = {"profile": profile, "images": [{"data": self.photo_b64}], **settings}
        response = self.http.post("/v1/sessions", json=body)
        response.raise_for_status()
        return response.json()["session_id"]

    def call(self, sid: str, tool: str, args: dict) -> tuple[float, float, dict]:
        """(server-side seconds, client-observed seconds, result)."""
        started = time.perf_counter()
        response = self.http.post(f"/v1/sessions/{sid}/tools/{tool}", json=args)
        observed = time.perf_counter() - started
        result = response.json()
        return float(response.headers["x-process-time"]), observed, result


def photo_views(photo: Image.Image) -> dict[str, Image.Image]:
    fetch = fetch_image_view(photo)
    return {"fetch_image": fetch, "groundlight": photo.resize((1024, 768), Image.Resampling.BICUBIC),
            "pixel-reasoner": jpeg_round_trip(fetch)}  # the model's view as verl-tool's agent loop sends it


def floors(photo: Image.Image, views: dict[str, Image.Image], sr) -> dict[str, Callable[[], object]]:
    """The pixel work of each case, done directly (see the module docstring)."""
    w, h = photo.size
    box = (BOX[0] * w // 1000, BOX[1] * h // 1000, BOX[2] * w // 1000, BOX[3] * h // 1000)
    arm = views["fetch_image"]
    vw, vh = arm.size
    arm_box = arm_adjust_box((BOX[0] / 1000 * vw, BOX[1] / 1000 * vh, BOX[2] / 1000 * vw, BOX[3] / 1000 * vh), vw, vh)
    qbox = qwen3_expand_box(BOX[0] / 1000 * w, BOX[1] / 1000 * h, BOX[2] / 1000 * w, BOX[3] / 1000 * h, w, h)
    qbox_view = qwen3_expand_box(BOX[0] / 1000 * vw, BOX[1] / 1000 * vh, BOX[2] / 1000 * vw, BOX[3] / 1000 * vh,
                                 vw, vh)
    gl = views["groundlight"]
    gl_box = window_box(500, 400, *gl.size)
    kp = window_box(2000, 1500, w, h)  # keypoint [500, 500] rel1000
    mgpo_in = (1222, 816)  # the model-input size of a 4000x3000 photo under MGPO's view rule
    mbox = [to_original_f32(v, s, o) for v, s, o in zip([300, 300, 600, 500], [*mgpo_in, *mgpo_in], [w, h, w, h],
                                                          strict=True)]

    def sr_floor(region, scale=4):
        def run():
            return encode_inline(sr.upscale(photo.crop(region), scale).image)
        return run

    out: dict[str, Callable[[], object]] = {
        "default/zoom_in png": lambda: encode_inline(photo.crop(box)),
        "default/zoom_in jpeg": lambda: encode_inline(photo.crop(box), "jpeg"),
        "default/keypoint_zoom": lambda: encode_inline(upscale_to(photo.crop(kp), max(w, h, WINDOW))),
        "default/lookback_reuse": lambda: pybase64.b64encode_as_string(PHOTO_BYTES),
        "arm-thinker/image_zoom_in_tool": lambda: encode_inline(arm.crop(tuple(arm_box))),
        "arm-thinker-qwen3vl/image_zoom_in_tool": lambda: encode_inline(qwen3_crop_and_resize(arm, qbox_view)),
        "qwen3-vl/image_zoom_in_tool": lambda: encode_inline(qwen3_crop_and_resize(photo, qbox)),
        "groundlight/zoom": lambda: encode_inline(upscale_to(gl.crop(gl_box), 1024)),
        "mgpo/grounding": lambda: encode_inline(process_image(photo.crop(tuple(mbox)))),
        "imagent/zoom_in": lambda: encode_inline(photo.crop(box)),
        "default/rotate": lambda: encode_inline(photo.transpose(Image.Transpose.ROTATE_90)),
        "default/select_frames": lambda: pybase64.b64encode_as_string(PHOTO_BYTES),
        "deepeyes/image_zoom_in_tool": lambda: encode_inline(photo.crop(DEEPEYES_BOX)),
        "deepeyes/image_rotate_tool": lambda: encode_inline(photo.rotate(90)),
        # Pixel-Reasoner's result is the reference's JPEG: those bytes are what is delivered.
        "pixel-reasoner/crop_image": lambda: pybase64.b64encode_as_string(
            crop_encoded(views["pixel-reasoner"], [0.4, 0.4, 0.65, 0.65])[1]),
        "pixel-reasoner/select_frames": lambda: pybase64.b64encode_as_string(
            crop_encoded(views["pixel-reasoner"], WHOLE_IMAGE)[1]),
    }
    if sr is not None:
        out["default/super_resolution"] = sr_floor((1600, 1200, 1800, 1350))
    return out


PHOTO_BYTES = b""
DEEPEYES_BOX = (1600, 1200, 2600, 1950)  # BOX in the photo's pixels: DeepEyes boxes are original pixels


def cases() -> list[tuple[str, str, str, dict, dict]]:
    """(name, profile, tool, args, session settings)."""
    many = {"max_tool_calls": 10**6}
    return [
        ("default/zoom_in png", "default", "zoom_in", {"image": 0, "bbox_2d": BOX}, {}),
        ("default/zoom_in jpeg", "default", "zoom_in", {"image": 0, "bbox_2d": BOX}, {"output": {"format": "jpeg"}}),
        ("default/keypoint_zoom", "default", "keypoint_zoom", {"image": 0, "keypoint": [500, 500]}, {}),
        ("default/lookback_reuse", "default", "lookback_reuse", {"image": 0, "reason": "bench"}, {}),
        ("arm-thinker/image_zoom_in_tool", "arm-thinker", "image_zoom_in_tool",
         {"image": "original_image", "bbox_2d": BOX}, {}),
        ("arm-thinker-qwen3vl/image_zoom_in_tool", "arm-thinker-qwen3vl", "image_zoom_in_tool",
         {"img_idx": 0, "label": "x", "bbox_2d": BOX}, {}),
        ("qwen3-vl/image_zoom_in_tool", "qwen3-vl", "image_zoom_in_tool", {"img_idx": 0, "label": "x", "bbox_2d": BOX},
         {}),
        ("groundlight/zoom", "groundlight", "zoom", {"keypoint": [500, 400]}, {}),
        ("mgpo/grounding", "mgpo", "grounding", {"bbox_2d": [300, 300, 600, 500], "label": "x"}, many),
        ("imagent/zoom_in", "imagent", "zoom_in", {"image_index": 0, "bbox_2d": BOX, "label": "x"}, many),
        ("default/super_resolution", "default", "super_resolution",
         {"image": 0, "bbox_2d": [400, 400, 450, 450], "scale": 4}, {}),
        ("default/rotate", "default", "rotate", {"image": 0, "angle": 90, "expand": True}, {}),
        ("default/select_frames", "default", "select_frames", {"frames": [0]}, {}),
        ("deepeyes/image_zoom_in_tool", "deepeyes", "image_zoom_in_tool", {"bbox_2d": list(DEEPEYES_BOX)}, {}),
        ("deepeyes/image_rotate_tool", "deepeyes", "image_rotate_tool", {"angle": 90}, {}),
        ("pixel-reasoner/crop_image", "pixel-reasoner", "crop_image",
         {"bbox_2d": [0.4, 0.4, 0.65, 0.65], "target_image": 1}, {}),
        ("pixel-reasoner/select_frames", "pixel-reasoner", "select_frames", {"target_frames": [1]}, {}),
    ]


VALIDATOR = ("check_whether_response_word_count_in_range", {"lower_bound": 10, "upper_bound": 400})
ANSWER = ("The ladybird sits on the left leaf. Its shell has seven spots.\n\n"
          "The background is out of focus. No other insect is visible. ") * 8


def served_vs_floor(caller: Caller, photo: Image.Image, sr, iterations: int, sr_iterations: int,
                    skip_sr: bool, only: list[str] | None = None) -> dict:
    """Rollout-shaped: each round opens one session per case (the photo uploaded, one untimed first call that
    computes the model's view where there is one), times CALLS_PER_SESSION calls against the floor, and
    releases it; the cases take turns within a round, so their ratios see the same machine state."""
    views = photo_views(photo)
    floor_fns = floors(photo, views, sr)
    chosen = [c for c in cases() if not ("super_resolution" in c[0] and skip_sr)
              and (not only or any(c[0].startswith(prefix) for prefix in only))]
    times: dict[str, dict[str, list[float]]] = {c[0]: {"served": [], "observed": [], "floor": []} for c in chosen}
    outputs: dict[str, list] = {}
    rounds = max(1, iterations // CALLS_PER_SESSION)
    for r in range(rounds):
        turn = chosen[r % len(chosen):] + chosen[:r % len(chosen)]
        for name, profile, tool, args, settings in turn:
            if "super_resolution" in name and r * CALLS_PER_SESSION >= sr_iterations:
                continue
            sid = caller.session(profile, **settings)
            _, _, first = caller.call(sid, tool, args)
            assert first["ok"], first["text"]
            row, floor_fn = times[name], floor_fns[name]
            for i in range(CALLS_PER_SESSION):
                for step in ("served", "floor") if i % 2 == 0 else ("floor", "served"):
                    if step == "served":
                        server_s, client_s, result = caller.call(sid, tool, args)
                        assert result["ok"], result["text"]
                        row["served"].append(server_s)
                        row["observed"].append(client_s)
                        outputs[name] = [[im["width"], im["height"]] for im in result["images"]]
                    else:
                        t = time.perf_counter()
                        floor_fn()
                        row["floor"].append(time.perf_counter() - t)
            caller.http.delete(f"/v1/sessions/{sid}")
    rows = {}
    for name, row in times.items():
        rows[name] = {"served_p50_ms": median_ms(row["served"]), "served_p99_ms": p99_ms(row["served"]),
                      "client_p50_ms": median_ms(row["observed"]), "floor_p50_ms": median_ms(row["floor"]),
                      "ratio": median_ms(row["served"]) / median_ms(row["floor"]), "n": len(row["served"]),
                      "output": outputs[name]}
    # A validator: served (tool call on a stored text) vs the check alone.
    from toolserver.validation.checks import CHECKS

    sid = caller.http.post("/v1/sessions", json={"texts": {"text_0": ANSWER}}).json()["session_id"]
    served, floor = [], []
    for _ in range(iterations):
        server_s, _, result = caller.call(sid, VALIDATOR[0], {"response": "text_0", **VALIDATOR[1]})
        assert result["ok"], result
        served.append(server_s)
        t = time.perf_counter()
        CHECKS[VALIDATOR[0]](ANSWER, **VALIDATOR[1])
        floor.append(time.perf_counter() - t)
    rows[f"default/{VALIDATOR[0]}"] = {"served_p50_ms": median_ms(served), "served_p99_ms": p99_ms(served),
                                       "floor_p50_ms": median_ms(floor),
                                       "ratio": median_ms(served) / max(median_ms(floor), 1e-3)}
    return rows


def encoders(photo: Image.Image, iterations: int) -> dict:
    """The lossless writers side by side on one 1000x1000 crop (median ms, bytes), JPEG q95 for scale."""
    from toolserver.imaging import encode_png

    crop = photo.crop((1500, 1000, 2500, 2000))
    crop.load()
    candidates: dict[str, Callable[[], bytes]] = {
        "fpng (served default)": lambda: encode_png(crop, encoder="fpng"),
        "Pillow PNG level 1 (before)": lambda: encode_png(crop, level=1, encoder="pillow"),
        "Pillow PNG level 0": lambda: encode_png(crop, level=0, encoder="pillow"),
        "JPEG q95": lambda: encode_image(crop, "jpeg"),
    }
    times: dict[str, list[float]] = {name: [] for name in candidates}
    sizes = {}
    for i in range(iterations):
        for name in list(candidates)[:: 1 if i % 2 == 0 else -1]:
            t = time.perf_counter()
            sizes[name] = len(candidates[name]())
            times[name].append(time.perf_counter() - t)
    return {name: {"ms": median_ms(v), "bytes": sizes[name]} for name, v in times.items()}


def resident_vs_resend(server_url: str, iterations: int) -> dict:
    """Client-observed zoom_in JPEG inline on a resident 4224x3168 photo vs resending it with every call.

    Resident: the photo uploaded once per rollout-shaped session (CALLS_PER_SESSION calls, then released;
    the upload is not timed). Resend: every call creates a session with the photo as base64, zooms and
    releases it (base64 in, decode, crop, JPEG, base64 out). The two alternate call by call."""
    raw = (PHOTOS / "Dragonfly_by_Bolly.jpg").read_bytes()
    photo_b64 = base64.b64encode(raw).decode()
    args = {"image": 0, "bbox_2d": BOX}
    body = {"images": [{"data": photo_b64}], "output": {"format": "jpeg"}}
    with httpx.Client(base_url=server_url, timeout=120) as http:
        resident_sid: list[str] = []

        def zoom(sid: str) -> None:
            result = http.post(f"/v1/sessions/{sid}/tools/zoom_in", json=args).json()
            assert result["ok"]
            pybase64.b64decode(result["images"][0]["data"])

        def resend() -> None:
            sid = http.post("/v1/sessions", json=body).json()["session_id"]
            zoom(sid)
            http.delete(f"/v1/sessions/{sid}")

        times: dict[str, list[float]] = {"resident": [], "resend": []}
        for i in range(iterations + 2):
            if i % CALLS_PER_SESSION == 0:  # a new rollout: its photo goes up once, untimed
                if resident_sid:
                    http.delete(f"/v1/sessions/{resident_sid.pop()}")
                resident_sid.append(http.post("/v1/sessions", json=body).json()["session_id"])
            pair = (("resident", lambda: zoom(resident_sid[0])), ("resend", resend))
            for name, fn in pair[:: 1 if i % 2 == 0 else -1]:
                t = time.perf_counter()
                fn()
                if i >= 2:
                    times[name].append(time.perf_counter() - t)
    return {"resident_p50_ms": median_ms(times["resident"]), "resend_p50_ms": median_ms(times["resend"]),
            "speed-up": median_ms(times["resend"]) / median_ms(times["resident"]), "photo_bytes": len(raw),
            "n": len(times["resident"])}


def where_time_goes(caller: Caller, iterations: int) -> dict:
    """For an inline 1 MP PNG result: the client-observed time minus X-Process-Time, split into the client's
    JSON parse and base64 decode and what remains (transport and HTTP framing on both sides)."""
    sid = caller.session()
    parts: dict[str, list[float]] = {"client": [], "server": [], "json_parse": [], "b64decode": []}
    body_bytes = 0
    for _ in range(iterations):
        started = time.perf_counter()
        response = caller.http.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": BOX})
        received = time.perf_counter()
        t = time.perf_counter()
        result = json.loads(response.content)
        parsed = time.perf_counter()
        pybase64.b64decode(result["images"][0]["data"])
        decoded = time.perf_counter()
        parts["client"].append(received - started)
        parts["server"].append(float(response.headers["x-process-time"]))
        parts["json_parse"].append(parsed - t)
        parts["b64decode"].append(decoded - parsed)
        body_bytes = len(response.content)
    caller.http.delete(f"/v1/sessions/{sid}")
    out = {name: median_ms(v) for name, v in parts.items()}
    out["transport_and_framing"] = out["client"] - out["server"]
    out["body_bytes"] = body_bytes
    return out


def print_rows(rows: dict) -> None:
    print(f"{'case':44}{'served p50':>12}{'p99':>9}{'floor':>9}{'ratio':>8}  output")
    for name, row in rows.items():
        print(f"{name:44}{row['served_p50_ms']:>10.1f}ms{row['served_p99_ms']:>7.1f}ms{row['floor_p50_ms']:>7.2f}ms"
              f"{row['ratio']:>8.2f}  {row.get('output', '')}")


def main() -> None:
    global PHOTO_BYTES
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--sr-iterations", type=int, default=5)
    parser.add_argument("--skip-sr", action="store_true", help="leave out the SMFANet rows")
    parser.add_argument("--out", type=Path, help="also write the report as JSON here")
    parser.add_argument("--cases", nargs="*", help="only the cases whose names start so (e.g. deepeyes/ "
                        "default/zoom_in); the served-vs-floor table alone")
    args = parser.parse_args()

    PHOTO_BYTES = photo_4000x3000()
    photo = Image.open(io.BytesIO(PHOTO_BYTES)).convert("RGB")
    sr = None
    env = {"TOOLSERVER_QUEUE_LIMIT": "1024", "TOOLSERVER_SR_MODEL_DIR": str(MODEL_DIR)}
    if not args.skip_sr:
        from toolserver.sr.engine import SREngine

        sr = SREngine(MODEL_DIR)
    with Server(env) as server, httpx.Client(base_url=server.url, timeout=300) as http:
        caller = Caller(http, base64.b64encode(PHOTO_BYTES).decode())
        rows = served_vs_floor(caller, photo, sr, args.iterations, args.sr_iterations, args.skip_sr, args.cases)
        if args.cases:
            print_rows(rows)
            return
        report = {
            "served_vs_floor": rows,
            "png_over_jpeg": rows["default/zoom_in png"]["served_p50_ms"]
            / rows["default/zoom_in jpeg"]["served_p50_ms"],
            "arm_over_zoom_png": rows["arm-thinker/image_zoom_in_tool"]["served_p50_ms"]
            / rows["default/zoom_in png"]["served_p50_ms"],
            "groundlight_over_zoom_png": rows["groundlight/zoom"]["served_p50_ms"]
            / rows["default/zoom_in png"]["served_p50_ms"],
            "where_time_goes_1mp_png": where_time_goes(caller, args.iterations),
            "resident_vs_resend": resident_vs_resend(server.url, max(10, args.iterations)),
            "encoders_1mp": encoders(photo, 9),
        }
    if sr is not None:
        sr.close()
    print_rows(report["served_vs_floor"])
    for key in ("png_over_jpeg", "arm_over_zoom_png", "groundlight_over_zoom_png"):
        print(f"{key}: {report[key]:.2f}")
    print("where the time goes (1 MP PNG inline, ms):", json.dumps(report["where_time_goes_1mp_png"]))
    print("encoders on a 1000x1000 crop:", json.dumps(report["encoders_1mp"]))
    print("resident vs resend (4224x3168 JPEG inline, client-observed):", json.dumps(report["resident_vs_resend"]))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
