"""A worker-like caller of the node's model hosts, run as a process of its own by tests/test_model_hosts.py:

    python -m tests.model_host_helpers ADDRESSES THREADS CALLS

Each of THREADS threads makes CALLS super-resolution calls (small crops, x2) through `node_transports`, as a worker
process's tools would; it prints one JSON line: each output's sha256 by crop, and which host served each call."""

from __future__ import annotations

import hashlib
import json
import sys
import threading

from PIL import Image

from tests.conftest import photo, smfanet_dir
from toolserver.config import Settings
from toolserver.hostlink import node_transports
from toolserver.sr.service import SRFront


def crops(count: int = 4, side: int = 40) -> list[Image.Image]:
    image = Image.open(photo("TwoWings.jpg")).convert("RGB")
    return [image.crop((i * 50, 40, i * 50 + side, 40 + side)) for i in range(count)]


def digest(image: Image.Image) -> str:
    return hashlib.sha256(image.tobytes()).hexdigest()


def main(addresses: str, threads: int, calls: int) -> None:
    settings = Settings(sr_model_dir=smfanet_dir(), model_host_wait_s=60)
    transports = node_transports(settings, addresses.split(","))
    served: list[str] = []
    transports["smfanet"].pool.on_served = lambda _model, host: served.append(host)  # type: ignore[attr-defined]
    front = SRFront(transports["smfanet"])
    images = crops()
    outputs: dict[int, str] = {}
    errors: list[str] = []

    def run(t: int) -> None:
        try:
            for c in range(calls):
                index = (t + c) % len(images)
                outputs[index] = digest(front.upscale(images[index], 2).image)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()  # the test bounds this whole process
    print(json.dumps({"outputs": outputs, "served": served, "errors": errors}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
