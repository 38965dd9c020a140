"""The perception models on a node's model host (`toolserver.core.modelhost`): the calls of several worker
processes' transports meet in the host's one batcher per model, and answer what the in-process path answers."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tests.perception_helpers import (
    build_tiny_got_ocr2,
    build_tiny_grounding_dino,
    build_tiny_molmo2,
    build_tiny_sam2,
)
from tests.test_perception_models import picture, same_detections
from toolserver.batching import LocalTransport
from toolserver.config import Settings
from toolserver.core.modelhosts import ModelHosts
from toolserver.core.modelset import PERCEPTION_MODELS, batch_rule, build_models
from toolserver.hostlink import node_transports
from toolserver.perception.service import PerceptionFront

pytestmark = pytest.mark.slow  # a model host process, started and stopped: .ci/run's slow leg


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> Settings:
    tmp = tmp_path_factory.mktemp("perception")
    return Settings(data_dir=tmp / "data", grounding_dino_model=str(build_tiny_grounding_dino(tmp / "dino")),
                    sam2_model=str(build_tiny_sam2(tmp / "sam2")), ocr_model=str(build_tiny_got_ocr2(tmp / "ocr")),
                    ocr_max_new_tokens=8, point_model=str(build_tiny_molmo2(tmp / "point")), point_max_new_tokens=6,
                    clip_model="", text_model="", model_devices="cpu",
                    perception_batch_wait_ms=300, model_host_wait_s=60)


@pytest.fixture(scope="module")
def hosts(settings):
    hosts = ModelHosts(settings)
    try:
        hosts.start(timeout_s=120)
        yield hosts
    finally:
        hosts.stop()


def test_two_workers_calls_share_the_hosts_batches_and_answer_as_in_process(settings: Settings, hosts,
                                                                            tmp_path: Path):
    workers = [node_transports(settings, hosts.addresses, names=PERCEPTION_MODELS) for _ in range(2)]
    local = {name: PerceptionFront(name, LocalTransport(model, batch_rule(settings, name)))
             for name, model in build_models(settings, PERCEPTION_MODELS).items()}
    params = {"grounding_dino": {"caption": "a red cat", "box_threshold": 0.0, "text_threshold": 0.0},
              "sam2": {"points": [(10.0, 12.0)]}, "ocr": {}, "point": {"prompt": "Point to the cat in the scene."}}
    batches: list[int] = []
    answers: dict[tuple[str, int], dict] = {}
    try:
        fronts = [{name: PerceptionFront(name, transports[name], on_batch=batches.append)
                   for name in PERCEPTION_MODELS} for transports in workers]
        assert all(f.available and "local directory" in f.status()["where"] for f in fronts[0].values())

        def call(name: str, i: int) -> None:
            answers[name, i] = fronts[i % 2][name].run(picture(i), params[name], timeout_s=60)

        threads = [threading.Thread(target=call, args=(name, i)) for name in PERCEPTION_MODELS for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(answers) == 16 and max(batches) > 1  # calls of both workers met in the host's batches
        for i in range(4):
            alone = {name: local[name].run(picture(i), params[name]) for name in PERCEPTION_MODELS}
            assert same_detections(answers["grounding_dino", i], alone["grounding_dino"])
            assert np.array_equal(answers["sam2", i]["mask"], alone["sam2"]["mask"])
            assert answers["ocr", i] == alone["ocr"]
            assert answers["point", i] == alone["point"]
    finally:
        for transports in workers:
            next(iter(transports.values())).pool.close()
