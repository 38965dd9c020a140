"""The sandbox's memory budget: settings that promise more memory than the host has are refused at start-up with a
message saying what to lower; counts left at their defaults are lowered to fit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolserver.config import Settings
from toolserver.core.wiring import Services, build_sandbox
from toolserver.sandbox.budget import MiB, Promise, SandboxBudgetError, budget_mb, fit, host_memory_bytes


def test_the_host_s_memory_is_read_from_meminfo_and_the_cgroup():
    meminfo = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:"))
    assert 0 < host_memory_bytes() <= int(meminfo.split()[1]) * 1024
    assert budget_mb(None) == host_memory_bytes() // MiB
    assert budget_mb(1000) == 1000 and budget_mb(1 << 40) == host_memory_bytes() // MiB  # never above the host


def test_counts_left_at_their_defaults_are_lowered_to_fit_workers_first():
    promise = Promise(slots=8, workers=16, memory_mb=1000, tmp_mb=100, image_cache_mb=500)
    assert promise.mb == 24 * 1100 + 500
    fitted = fit(promise, 10 * 1100 + 500, slots_set=False, workers_set=False)
    assert (fitted.slots, fitted.workers) == (8, 2)
    fitted = fit(promise, 4 * 1100 + 500, slots_set=False, workers_set=False)
    assert (fitted.slots, fitted.workers) == (3, 1)
    assert fit(promise, promise.mb, slots_set=True, workers_set=True) == promise


def test_counts_the_operator_set_that_promise_too_much_are_refused_saying_what_to_lower():
    promise = Promise(slots=8, workers=16, memory_mb=1000, tmp_mb=100, image_cache_mb=500)
    with pytest.raises(SandboxBudgetError) as refused:
        fit(promise, 15_000, slots_set=False, workers_set=True)  # 1 slot + 16 workers: still 19,200
    assert str(refused.value).startswith(
        "the sandbox's settings promise 26900 MiB ((SANDBOX_SLOTS 8 + SANDBOX_WORKERS 16) x (SANDBOX_MEMORY_MB 1000 "
        "+ 100 MiB of /tmp) + SANDBOX_IMAGE_CACHE_MB 500) of memory, and this server may give it 15000 MiB")
    assert str(refused.value).endswith("lower SANDBOX_SLOTS, SANDBOX_WORKERS or SANDBOX_MEMORY_MB")


def test_the_server_s_sandbox_and_code_lane_get_the_counts_that_fit(tmp_path):
    settings = Settings(sandbox_memory_budget_mb=4 * (512 + 64) + 256, sandbox_memory_mb=512, sandbox_disk_mb=64,
                        sandbox_image_cache_mb=256, data_dir=tmp_path)
    sandbox = build_sandbox(settings)
    assert (sandbox.config.slots, sandbox.config.worker_slots) == (3, 1)
    assert sandbox.config.limits.tmp_bytes == sandbox.config.limits.disk_bytes == 64 << 20  # /tmp within the quota
    services = Services.build(settings)
    assert services.sandbox.config.slots == 3 and services.pool.lanes["code"].workers == 3
    with pytest.raises(SandboxBudgetError):
        build_sandbox(Settings(sandbox_slots=4, sandbox_memory_budget_mb=1024, data_dir=tmp_path))


@pytest.mark.slow
def test_serve_refuses_to_start_with_a_promise_the_host_cannot_keep(tmp_path):
    env = {**os.environ, "TOOLSERVER_SANDBOX_SLOTS": "512", "TOOLSERVER_SANDBOX_MEMORY_MB": "65536",
           "TOOLSERVER_DATA_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "toolserver.cli", "serve", "--port", "0"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "toolserver serve: the sandbox's settings promise" in done.stderr
    assert "lower SANDBOX_SLOTS, SANDBOX_WORKERS or SANDBOX_MEMORY_MB" in done.stderr
