"""The engine registry as users see it: config check, cluster status and run name every engine
and say why one cannot work; the cuda engine's refusals; the helper's command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.checkpoint import cuda, engine
from core.checkpoint.cuda_driver import ProcessState, load
from core.config import CheckpointConfig, load_settings
from core.service.facade import bootstrap
from tests.gpu.conftest import GIB, FakeCuda

CLAWPOINT = Path(sys.executable).parent / "clawpoint"


def _cli(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    return subprocess.run(
        [str(CLAWPOINT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "CLAWPOINT_HOME": str(home), "COLUMNS": "250", **env},
    )


def _items(out: str) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in json.loads(out)["items"]}


def test_config_check_reports_every_engine_and_why_cuda_cannot_work(tmp_path: Path) -> None:
    r = _cli(tmp_path, "config", "check", "--json", CLAWPOINT_LIBCUDA="/nonexistent/libcuda.so.1")
    items = _items(r.stdout)
    assert set(engine.ENGINES) <= set(items), r.stdout
    assert items["cooperative"]["level"] == "ok"
    assert items["cuda"]["level"] == "warn"
    assert "no NVIDIA driver library" in items["cuda"]["message"]
    assert "cooperative" in items["cuda"]["message"]  # what works instead


def test_config_check_with_an_old_driver_names_the_missing_api(
    tmp_path: Path, fake_libs: dict[str, Path]
) -> None:
    r = _cli(tmp_path, "config", "check", "--json", CLAWPOINT_LIBCUDA=str(fake_libs["old"]))
    message = _items(r.stdout)["cuda"]["message"]
    assert "no process checkpoint API" in message and "550" in message


def test_cluster_status_reports_every_engine(
    tmp_path: Path, fake_cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAWPOINT_HOME", str(tmp_path))
    monkeypatch.setenv(cuda.PLUGIN_DIRS_ENV, str(tmp_path / "no-plugin"))
    monkeypatch.setattr(cuda, "DEFAULT_PLUGIN_DIRS", ())
    status = bootstrap(load_settings(tmp_path)).cluster_status()
    assert set(status.engine) == set(engine.ENGINES)
    gpu = status.engine["cuda"]
    assert gpu["available"] is False and "CUDA plugin" in gpu["reason"]
    assert gpu["version"] == "CUDA API 12080"  # the driver is there; the plugin is not


def test_run_refuses_an_unknown_engine_naming_the_known_ones(tmp_path: Path) -> None:
    r = _cli(tmp_path, "run", "--engine", "bogus", "--", "true")
    assert r.returncode == 2, r.stderr
    assert "unknown engine 'bogus'" in r.stderr
    assert all(name in r.stderr for name in engine.ENGINES)


def test_run_with_the_cuda_engine_and_no_driver_is_refused_with_the_reason(tmp_path: Path) -> None:
    r = _cli(
        tmp_path, "run", "--engine", "cuda", "--name", "g", "--", "true",
        CLAWPOINT_LIBCUDA="/nonexistent/libcuda.so.1",
    )  # fmt: skip
    assert r.returncode == errors.EngineUnavailable.exit_code, r.stderr
    assert "cuda engine cannot run here" in r.stderr and "no NVIDIA driver" in r.stderr


def test_every_registered_engine_follows_the_protocol() -> None:
    for name in engine.ENGINES:
        eng = engine.get(name)
        assert eng.name == name
        assert isinstance(eng.needs_pid_namespace, bool)
        st = eng.status(CheckpointConfig())
        assert st.name == name and (st.available or st.reason)


def test_restore_on_another_gpu_model_or_fewer_gpus_is_refused() -> None:
    from core.checkpoint.gpu import GpuMemory

    h200 = GpuMemory(index=0, name="NVIDIA H200", used_bytes=0, total_bytes=141 * GIB)
    a100 = GpuMemory(index=0, name="NVIDIA A100-SXM4-80GB", used_bytes=0, total_bytes=80 * GIB)
    recorded = {"models": ["NVIDIA H200"], "count": 1}
    cuda.check_same_gpus(recorded, [h200])  # same model: fine
    with pytest.raises(errors.CheckpointError, match="same GPU model only") as exc:
        cuda.check_same_gpus(recorded, [a100])
    assert exc.value.code == "gpu-unsupported"
    with pytest.raises(errors.CheckpointError, match="needs 2 GPU"):
        cuda.check_same_gpus({"models": ["NVIDIA H200"], "count": 2}, [h200])


def test_pre_copy_is_refused() -> None:
    with pytest.raises(errors.NotSupported, match="pre-dump"):
        cuda.ENGINE.pre_dump()


def _helper(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cuda.helper_dir() / "cuda-checkpoint"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_helper_has_the_cuda_checkpoint_command_line(fake_cuda: FakeCuda) -> None:
    fake_cuda.add(321, GIB)
    assert "--action" in _helper("-h", env=fake_cuda.env).stdout  # what CRIU's plugin checks
    assert _helper("--get-state", "--pid", "321", env=fake_cuda.env).stdout == "running\n"
    for action in ("lock", "checkpoint"):
        r = _helper("--action", action, "--pid", "321", "--timeout", "500", env=fake_cuda.env)
        assert r.returncode == 0, r.stderr
    assert load().state(321) is ProcessState.CHECKPOINTED
    assert _helper("--get-restore-tid", "--pid", "321", env=fake_cuda.env).stdout.strip() == "321"
    assert _helper("--toggle", "--pid", "321", env=fake_cuda.env).returncode == 0
    assert load().state(321) is ProcessState.RUNNING
    wrong = _helper("--action", "unlock", "--pid", "321", env=fake_cuda.env)
    assert wrong.returncode == 1 and "CUDA_ERROR_ILLEGAL_STATE" in wrong.stderr
    assert _helper("--action", "bogus", "--pid", "321", env=fake_cuda.env).returncode == 2


def test_slurm_job_records_its_engine_and_inventory_reports_it() -> None:
    from core.backends.slurm.config import SlurmConfig
    from core.backends.slurm.inventory import to_workload
    from core.backends.slurm.sbatch import SbatchSpec, render_sbatch

    cfg = SlurmConfig()
    script = render_sbatch(SbatchSpec(lineage="train", command=["x"], engine="cuda"), cfg)
    comment = next(ln for ln in script.splitlines() if "--comment=" in ln).split("=", 1)[1]
    assert "--engine cuda" in script
    marker = cfg.resolved().marker
    raw = {"job_id": 5, "job_state": ["RUNNING"], "comment": comment, "nodes": "n1"}
    w = to_workload(raw, marker)
    assert w.engine == "cuda" and w.labels["lineage"] == "train"
    with pytest.raises(ValueError, match="unknown engine"):
        SbatchSpec(lineage="train", command=["x"], engine="bogus")


def test_resume_after_a_stopped_dump_gives_the_gpu_state_back(fake_cuda: FakeCuda) -> None:
    """After ``--leave-stopped`` CRIU's CUDA plugin leaves the GPU state locked and in host
    memory (it gives it back only for ``--leave-running``): the engine's ``resume`` lets
    the tree run and restores and unlocks each CUDA process of it, leaving others alone."""
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    root = subprocess.Popen([sys.executable, "-c", code])  # noqa: S603 (argv list)
    try:
        kids: list[int] = []
        deadline = time.monotonic() + 10
        while not kids:
            assert time.monotonic() < deadline, "the child never started"
            kids = [
                int(k)
                for k in Path(f"/proc/{root.pid}/task/{root.pid}/children").read_text().split()
            ]
            time.sleep(0.02)
        fake_cuda.add(kids[0], GIB)
        drv = load()
        drv.lock(kids[0])  # what the plugin's dump does, and leaves so after a stopped dump
        drv.checkpoint(kids[0])
        assert fake_cuda.device_bytes(kids[0]) == 0
        for pid in (root.pid, kids[0]):
            os.kill(pid, signal.SIGSTOP)
        cuda.CudaEngine().resume(root.pid)
        assert load().state(kids[0]) is ProcessState.RUNNING
        assert fake_cuda.device_bytes(kids[0]) == GIB  # back on the GPU
        for pid in (root.pid, kids[0]):
            assert _run_state(pid) != "T", f"pid {pid} is still stopped"
        cuda.CudaEngine().resume(root.pid)  # a running tree: nothing to give back, no error
    finally:
        for pid in kids:
            os.kill(pid, signal.SIGKILL)
        root.kill()
        root.wait()


def _run_state(pid: int) -> str:
    deadline = time.monotonic() + 5
    while True:  # SIGCONT is delivered asynchronously
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state != "T" or time.monotonic() > deadline:
            return state
        time.sleep(0.02)
