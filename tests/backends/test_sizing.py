"""The rules of ``resize`` every backend shares (``core.backends.sizing``) and its argument
(``core.sizes``): sizes people write, what fits where, risk and cost."""

from __future__ import annotations

from typing import Any

import pytest

from core import actions, errors
from core.backends.sizing import Size, gives_less, misfit, pick_node, resize_risk, wanted
from core.cli import wording
from core.model import Action, NodeHealth, NodeInfo, RiskClass, WorkloadInfo, WorkloadState
from core.sizes import memory_mib, memory_text


def node(name: str, *, cpus: int | None = 8, mem: int | None = 16384, price: float = 1.0,
         gpus: int = 0, gpu_class: str | None = None, **kw: object) -> NodeInfo:  # fmt: skip
    return NodeInfo(id=f"local:{name}", backend="local", name=name, cpus=cpus, memory_mb=mem,
                    price_per_hour=price, gpus=gpus, gpu_class=gpu_class, **kw)  # fmt: skip


def workload(**kw: object) -> WorkloadInfo:
    base: dict[str, object] = {"id": "local:w", "backend": "local", "name": "w",
                               "state": WorkloadState.RUNNING, "node": "a"}  # fmt: skip
    return WorkloadInfo.model_validate({**base, **kw})


@pytest.mark.parametrize(
    ("text", "mib"),
    [("512Mi", 512), ("4Gi", 4096), ("4096Mi", 4096), ("2G", 1908), ("1.5Gi", 1536),
     ("1Ki", 1), ("1Ti", 1024 * 1024), (" 8gi ", 8192)],
)  # fmt: skip
def test_memory_sizes_are_read_in_mib_rounded_up(text: str, mib: int) -> None:
    assert memory_mib(text) == mib


@pytest.mark.parametrize("text", ["4096", "4x", "", "-1Gi", "0Mi", "65Ti", "٣Gi", "1e3Mi"])
def test_a_size_without_a_unit_or_out_of_range_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"memory size|at least 1Mi"):
        memory_mib(text)


def test_memory_is_written_back_in_its_largest_exact_unit() -> None:
    assert [memory_text(m) for m in (4096, 1536, 1024 * 1024, 7)] == ["4Gi", "1536Mi", "1Ti", "7Mi"]


def test_resize_arguments_name_what_is_wrong_and_change_nothing() -> None:
    assert actions.parse(Action.RESIZE, {"memory": "4096Mi"}).memory == "4Gi"  # type: ignore[attr-defined]
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "at least one of"), ({"memory": "4096"}, "no unit"), ({"cpus": 0}, "cpus"),
        ({"gpus": -1}, "gpus"), ({"gpu_class": "a 100"}, "gpu_class"),
        ({"size": 3}, "unknown argument"),
    ]  # fmt: skip
    for bad, said in cases:
        with pytest.raises(errors.InvalidInput, match=said) as info:
            actions.parse(Action.RESIZE, bad)
        assert "resize_workload takes" in (info.value.hint or "")


def test_what_is_left_out_stays_as_it_is() -> None:
    now = workload(cpus=2, memory_mb=2048)
    after = wanted(now, actions.params_for(Action.RESIZE, memory="4Gi"))  # type: ignore[arg-type]
    assert after == Size(cpus=2, memory_mb=4096)


def test_the_size_it_has_is_nothing_to_do() -> None:
    with pytest.raises(errors.Conflict, match="already has 2 CPUs 4Gi"):
        wanted(workload(cpus=2, memory_mb=4096),
               actions.params_for(Action.RESIZE, cpus=2, memory="4Gi"))  # type: ignore[arg-type]  # fmt: skip


def test_a_gpu_class_without_gpus_is_refused() -> None:
    with pytest.raises(errors.InvalidInput, match="no GPU"):
        wanted(workload(), actions.params_for(Action.RESIZE, gpu_class="a100"))  # type: ignore[arg-type]


def test_fit_counts_what_other_workloads_hold_and_unknown_capacity_does_not_fit() -> None:
    assert misfit(node("a"), Size(cpus=4, memory_mb=8192), Size(cpus=4, memory_mb=8192)) is None
    assert misfit(node("a"), Size(memory_mb=8193), Size(memory_mb=8192)) == "8Gi of 16Gi free"
    assert misfit(node("a"), Size(cpus=5), Size(cpus=4)) == "4 of 8 CPUs free"
    assert misfit(node("a", mem=None), Size(memory_mb=1), Size()) == "its memory is not known"
    assert misfit(node("g", gpus=2, gpu_class="t4"), Size(gpus=1, gpu_class="A100"), Size()) == (
        "its GPUs are t4"
    )
    assert (
        misfit(node("g", gpus=2, gpu_class="a100"), Size(gpus=1, gpu_class="A100"), Size()) is None
    )


def test_in_place_when_it_fits_else_the_cheapest_node_that_fits() -> None:
    nodes = [node("a", mem=4096, price=1.0), node("b", mem=16384, price=3.0),
             node("c", mem=16384, price=2.0), node("d", mem=65536, price=2.0, schedulable=False)]  # fmt: skip
    w = workload(memory_mb=2048)
    assert pick_node(nodes, Size(memory_mb=4096), {}, workload=w).name == "a"  # in place
    assert pick_node(nodes, Size(memory_mb=8192), {}, workload=w).name == "c"  # cheapest
    assert pick_node(nodes, Size(memory_mb=8192), {}, workload=w, to="b").name == "b"
    with pytest.raises(errors.Conflict) as info:
        pick_node(nodes, Size(memory_mb=32768), {}, workload=w)
    assert info.value.code == "no-node-fits"
    assert "d: not schedulable" in info.value.message and "a: 4Gi of 4Gi free" in info.value.message
    with pytest.raises(errors.Conflict, match="b: 12Gi of 16Gi free"):
        pick_node(nodes, Size(memory_mb=16384), {"b": Size(memory_mb=4096)}, workload=w, to="b")
    with pytest.raises(errors.NotFound):
        pick_node(nodes, Size(memory_mb=1), {}, workload=w, to="zz")


def test_a_down_node_never_takes_the_workload() -> None:
    nodes = [node("a", mem=1024), node("b", health=NodeHealth.DOWN)]
    with pytest.raises(errors.Conflict, match="b: down"):
        pick_node(nodes, Size(memory_mb=2048), {}, workload=workload())


def test_only_a_change_in_place_that_gives_more_is_safe() -> None:
    assert resize_risk(moves=False, gives_less=False) is RiskClass.SAFE
    assert resize_risk(moves=True, gives_less=False) is RiskClass.DISRUPTIVE
    assert resize_risk(moves=False, gives_less=True) is RiskClass.DISRUPTIVE
    assert gives_less(Size(), Size(memory_mb=4096))  # a limit where there was none
    assert gives_less(Size(cpus=4), Size(cpus=2))
    assert not gives_less(Size(cpus=2, memory_mb=1024), Size(cpus=4, memory_mb=1024))


def test_a_restart_on_its_own_node_is_stated_as_a_move_at_no_cost() -> None:
    from core.backends.sizing import resize_draft
    from core.model import PlanScope

    here = node("a", price=2.0)
    w = workload(cpus=1)
    args = {"source": here, "target": here, "steps": [], "pause_s": 1.5, "scope": PlanScope()}
    in_place = resize_draft(w, Size(cpus=1), Size(cpus=2), **args)  # type: ignore[arg-type]
    assert in_place.risk is RiskClass.SAFE and in_place.expected_pause_s == 0.0
    again = resize_draft(w, Size(cpus=1), Size(cpus=2), restarts=True, **args)  # type: ignore[arg-type]
    assert again.risk is RiskClass.DISRUPTIVE and again.expected_pause_s == 1.5
    assert again.cost_effect == "none: same node" and again.added_cost_per_hour == 0.0
    assert "on a" in again.summary and "checkpointed" in again.saves


def test_the_undo_is_the_command_that_puts_the_old_size_back() -> None:
    from core.backends.sizing import resize_draft
    from core.model import PlanScope

    args = {"source": node("a"), "target": node("a"), "steps": [], "pause_s": 0.0,
            "scope": PlanScope()}  # fmt: skip
    w = workload(cpus=2, memory_mb=1536)
    undo = resize_draft(w, Size(cpus=2, memory_mb=1536), Size(cpus=2, memory_mb=4096), **args)  # type: ignore[arg-type]
    # Recorded neutrally; an agent reads the tool call, a person the command.
    assert errors.render(undo.rollback) == (
        "resize it back: resize_workload(workload=local:w, cpus=2, memory=1536Mi)"
    )
    assert errors.render(undo.rollback, wording.cli) == (
        "resize it back: 'clawpoint resize local:w --cpus 2 --memory 1536Mi'"
    )
    unlimited = resize_draft(workload(), Size(), Size(memory_mb=4096), **args)  # type: ignore[arg-type]
    assert unlimited.rollback.startswith("none by resize: local:w had no limits")
    assert "⟦" not in unlimited.rollback  # no step to name: plain words
