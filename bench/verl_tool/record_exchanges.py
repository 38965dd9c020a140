"""Record exchanges with verl-tool's own pixel_reasoner tool server into tests/data/verl_tool_exchanges.json.

    bench/verl_tool/setup.sh                      # once
    python bench/verl_tool/record_exchanges.py   # any python: re-runs itself with the bench venv's

Starts one verl-tool backend (`python -m verl_tool.servers.tool_server --tool_type pixel_reasoner`, its
defaults otherwise, enable_hashing included) through bench.verl_tool.launch and sends a fixed list of
request bodies to POST /get_observation, one at a time, in order.

Requests are built as verl-tool's agent loop builds them (verltool_agent_loop.py @ 980962b):
  * a tool call: interact_with_tool_server -> {"trajectory_ids": [id], "actions": [text], "finish": [False],
    "is_last_step": [bool], "extra_fields": [extra_info + {"images": [input data URL]}]}, the input images
    sent with EVERY call (VerlToolAgentLoop.run);
  * the end of a trajectory: close_traj_tool_threads -> {"trajectory_ids": [id], "actions": [""],
    "finish": [True], "is_last_step": [True]} (no extra_fields).
The extra_info copied into extra_fields is what its Pixel-Reasoner data prep writes (split, index, qid,
is_video; "images" there is replaced by the encoded images). Trajectory ids are uuid hex like the loop's
uuid4().hex, but derived (uuid5) from the scenario names so that the file is reproducible.

The input image: /work/shared/data/photos/Dragonfly_by_Bolly.jpg (4224x3168) resized to 644x476 (a size
qwen smart_resize with factor 28 can produce) with Pillow BICUBIC, encoded by verl-tool's own
vision_utils.encode_image_url (JPEG, Pillow's default quality). To keep the file small it is stored ONCE, in
the first entry (name "input_image", field "data_url"); every request holds the placeholder string
INPUT_IMAGE ("$INPUT_IMAGE") where the data URL was sent: substitute it back before replaying.

File: a JSON list of {"name", "scenario", "endpoint", "request", "status", "response"}; response is the JSON
answer minus the volatile processing_time_ms and queue_time_ms (for GET /health: only its sorted keys).
Crops in responses are kept (JPEG data URLs), so pixels can be checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from bench.verl_tool.launch import VENV_PYTHON, VerlToolServer, activate_shim_in_this_process  # noqa: E402

if Path(sys.prefix).resolve() != VENV_PYTHON.parent.parent.resolve():
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])

OUT = HERE.parents[1] / "tests" / "data" / "verl_tool_exchanges.json"
PHOTO = Path("/work/shared/data/photos/Dragonfly_by_Bolly.jpg")
SIZE = (644, 476)
INPUT_IMAGE = "$INPUT_IMAGE"
VOLATILE = ("processing_time_ms", "queue_time_ms")


def input_image_data_url() -> str:
    activate_shim_in_this_process()
    from PIL import Image
    from verl_tool.agent_loop.vision_utils import encode_image_url  # verl-tool's own encoder

    image = Image.open(PHOTO).convert("RGB").resize(SIZE, Image.BICUBIC)
    return encode_image_url(image)


def traj(name: str) -> str:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"verl-tool-exchanges/{name}").hex


def tool_call(name: str | None = None, arguments=None, *, raw: str | None = None,
              text: str = "I will zoom.") -> str:
    """What the model emits: some text, then a <tool_call> ended by the stop token </tool_call>."""
    if raw is None:
        call = {"name": name} if arguments is None else {"name": name, "arguments": arguments}
        raw = json.dumps(call)
    return f"{text}<tool_call>{raw}</tool_call>"


def extra_fields(index: int, images: bool = True) -> dict:
    fields = {"split": "train", "index": index, "qid": f"train_{index}", "is_video": False}
    if images:
        fields["images"] = [INPUT_IMAGE]
    return fields


def call(tid: str, action: str, *, index: int, images: bool = True, is_last_step: bool = False,
         send_extra_fields: bool = True) -> dict:
    """interact_with_tool_server(traj_id, action, do_action=True, extra_fields, is_last_step)."""
    body = {"trajectory_ids": [tid], "actions": [action], "finish": [False], "is_last_step": [is_last_step]}
    if send_extra_fields:
        body["extra_fields"] = [extra_fields(index, images)]
    return body


def finish(*tids: str) -> dict:
    """close_traj_tool_threads(request_id) (for several ids: the same body, batched)."""
    return {"trajectory_ids": list(tids), "actions": [""] * len(tids), "finish": [True] * len(tids),
            "is_last_step": [True] * len(tids)}


def crop(bbox, target=1, name="crop_image", text="I will zoom."):
    return tool_call(name, {"bbox_2d": bbox, "target_image": target}, text=text)


def scenarios() -> list[tuple[int, str, dict]]:
    steps: list[tuple[int, str, dict]] = []
    add = lambda scenario, name, body: steps.append((scenario, name, body))  # noqa: E731

    # 1. a chain of crops in one trajectory, then its end
    a = traj("s1")
    add(1, "s1_crop_pixel_box", call(a, crop([100, 80, 300, 240]), index=1))
    add(1, "s1_crop_image2_normalized_box", call(a, crop([0.1, 0.1, 0.6, 0.5], 2), index=1))
    add(1, "s1_zoom_in_alias", call(a, crop([320, 200, 520, 400], 1, "zoom_in"), index=1))
    add(1, "s1_crop_image_normalized_name",
        call(a, crop([0.25, 0.25, 0.75, 0.75], 1, "crop_image_normalized"), index=1))
    add(1, "s1_finish", finish(a))

    # 2. invalid actions in one trajectory
    b = traj("s2")
    add(2, "s2_no_tool_call", call(b, "The dragonfly's wings are transparent. The answer is B.", index=2))
    broken = '{"name": "crop_image", "arguments": {"bbox_2d": [100, 80, 300, 240], "target_image": 1}'  # one } short
    add(2, "s2_broken_json", call(b, tool_call(raw=broken), index=2))
    add(2, "s2_unknown_name", call(b, tool_call("rotate_image", {"angle": 90, "target_image": 1}), index=2))
    add(2, "s2_no_arguments", call(b, tool_call("crop_image"), index=2))
    add(2, "s2_arguments_not_a_dict", call(b, tool_call("crop_image", [[100, 80, 300, 240], 1]), index=2))
    add(2, "s2_missing_bbox", call(b, tool_call("crop_image", {"target_image": 1}), index=2))
    add(2, "s2_bbox_of_3_numbers", call(b, crop([100, 80, 300]), index=2))
    add(2, "s2_target_image_0", call(b, crop([100, 80, 300, 240], 0), index=2))
    add(2, "s2_target_image_5_out_of_range", call(b, crop([100, 80, 300, 240], 5), index=2))
    add(2, "s2_target_image_string_1", call(b, crop([100, 80, 300, 240], "1"), index=2))
    add(2, "s2_zero_width_box", call(b, crop([100, 100, 100, 200]), index=2))
    add(2, "s2_inverted_box", call(b, crop([400, 100, 100, 200]), index=2))
    frames = lambda indices: tool_call("select_frames", {"target_frames": indices}, text="Look again.")  # noqa: E731
    add(2, "s2_select_frames_1", call(b, frames([1]), index=2))
    add(2, "s2_select_frames_bad_index", call(b, frames([0, 9]), index=2))
    add(2, "s2_finish", finish(b))

    # 3. three trajectories in one request, then one batched finish
    c1, c2, c3 = traj("s3/1"), traj("s3/2"), traj("s3/3")
    add(3, "s3_batch_two_crops_one_invalid", {
        "trajectory_ids": [c1, c2, c3],
        "actions": [crop([50, 40, 250, 200]), crop([0.5, 0.5, 0.9, 0.9]), "No tool needed; the answer is A."],
        "finish": [False] * 3, "is_last_step": [False] * 3,
        "extra_fields": [extra_fields(31), extra_fields(32), extra_fields(33)],
    })
    add(3, "s3_batch_finish", finish(c1, c2, c3))

    # 4. a finish for an unknown trajectory; is_last_step without finish
    add(4, "s4_finish_unknown_trajectory", finish(traj("s4/never-seen")))
    d = traj("s4/last-step")
    add(4, "s4_crop_is_last_step_not_finish", call(d, crop([200, 150, 440, 330]), index=4, is_last_step=True))
    add(4, "s4_crop_after_last_step_target_2", call(d, crop([0.2, 0.2, 0.8, 0.8], 2), index=4))
    add(4, "s4_finish", finish(d))

    # 5. a trajectory whose first request has no images
    e = traj("s5")
    add(5, "s5_first_call_no_extra_fields", call(e, crop([100, 80, 300, 240]), index=5, send_extra_fields=False))
    add(5, "s5_second_call_with_images", call(e, crop([100, 80, 300, 240]), index=5))
    add(5, "s5_finish", finish(e))

    # 6. the same body twice (their request-hash cache), then a call that shows how many images it holds
    f = traj("s6")
    same = call(f, crop([150, 100, 350, 260]), index=6)
    add(6, "s6_same_body_first", same)
    add(6, "s6_same_body_second", json.loads(json.dumps(same)))
    add(6, "s6_crop_target_image_3", call(f, crop([0.1, 0.1, 0.9, 0.9], 3), index=6))
    add(6, "s6_finish", finish(f))
    return steps


def substitute(obj, data_url: str):
    if obj == INPUT_IMAGE:
        return data_url
    if isinstance(obj, list):
        return [substitute(x, data_url) for x in obj]
    if isinstance(obj, dict):
        return {k: substitute(v, data_url) for k, v in obj.items()}
    return obj


def post(url: str, body: dict) -> tuple[int, object]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw)
        except ValueError:
            return err.code, raw.decode(errors="replace")


def summarize(entry: dict) -> str:
    resp = entry["response"]
    if entry["name"] == "input_image":
        return f"input_image {entry['size']} {len(entry['data_url'])} chars sha256={entry['sha256'][:12]}"
    if not isinstance(resp, dict) or "observations" not in resp:
        return f"{entry['name']:40s} {entry['status']} {json.dumps(resp)[:150]}"
    parts = []
    for obs in resp["observations"]:
        if isinstance(obs, dict):
            shown = {k: (f"<{len(v)} chars>" if isinstance(v, str) else [f"<{len(x)} chars>" for x in v])
                     if k == "image" else v for k, v in obs.items()}
            parts.append(json.dumps(shown)[:160])
        else:
            parts.append(json.dumps(obs)[:160])
    return (f"{entry['name']:40s} {entry['status']} valids={resp['valids']} dones={resp['dones']} "
            f"obs={' | '.join(parts)}")


def main() -> None:
    data_url = input_image_data_url()
    entries: list[dict] = [{
        "name": "input_image", "scenario": 0, "endpoint": None, "request": None, "status": None, "response": None,
        "placeholder": INPUT_IMAGE, "data_url": data_url, "size": list(SIZE),
        "sha256": hashlib.sha256(data_url.encode()).hexdigest(),
        "recipe": f"{PHOTO.name} .convert('RGB').resize({SIZE}, BICUBIC), verl-tool vision_utils.encode_image_url "
                  "(JPEG, Pillow default quality), Pillow 13.0.0",
    }]
    with VerlToolServer("backend", keep_workdir=True) as server:
        status, health = server.health()
        entries.append({"name": "health", "scenario": 0, "endpoint": "GET /health", "request": None,
                        "status": status, "response": {"keys": sorted(health)}})
        for scenario, name, body in scenarios():
            status, response = post(server.observation_url, substitute(body, data_url))
            if isinstance(response, dict):
                response = {k: v for k, v in response.items() if k not in VOLATILE}
            entries.append({"name": name, "scenario": scenario, "endpoint": "POST /get_observation",
                            "request": body, "status": status, "response": response})
        workdir = server.workdir
        print(f"health: {health}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
    for entry in entries:
        print(summarize(entry))
    print(f"\nwrote {OUT} ({OUT.stat().st_size / 1e6:.2f} MB, {len(entries)} entries)")
    print(f"left in the server's cwd {workdir}:")
    for path in sorted(workdir.rglob("*")):
        print("  ", path.relative_to(workdir), (path.read_text()[:200] if path.name == "test.json" else ""))
    print("server log lines with errors (the tool prints its crop errors):")
    for line in (workdir / "server.log").read_text(errors="replace").splitlines():
        if "rror" in line or "Traceback" in line:
            print("  ", line[:200])
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
