"""Every number a config file can set has bounds on both sides.

TOML can write ``inf``, ``nan`` and integers of any size. An unbounded timeout of ``inf`` was
accepted by ``clawpoint config check`` and then raised where a thread waited on it
(``threading.Event.wait(inf)``: OverflowError), and an integer past 64 bits where the state
database stored it (SQLite: OverflowError). Bounds refuse both at load, by key, with the
config's own message; this walks the models so a new key without a bound fails here.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel

from core import errors
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.local.config import LocalBackendConfig
from core.backends.slurm.config import SlurmConfig
from core.config import Settings, load_settings


def _numeric(annotation: Any) -> bool:
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    return annotation in (int, float) or any(a in (int, float) for a in args)


def _models(annotation: Any) -> list[type[BaseModel]]:
    args = typing.get_args(annotation) or (annotation,)
    return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]


def numeric_fields(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        for sub in _models(field.annotation):
            found |= numeric_fields(sub, f"{prefix}{name}.")
        if _numeric(field.annotation):
            found[prefix + name] = field
    return found


ROOTS: list[tuple[str, type[BaseModel]]] = [
    ("", Settings), ("local.", LocalBackendConfig), ("slurm.", SlurmConfig),
    ("kubernetes.", KubernetesConfig),
]  # fmt: skip
FIELDS = {k: v for prefix, root in ROOTS for k, v in numeric_fields(root, prefix).items()}


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_every_number_is_bounded_both_ways(key: str) -> None:
    meta = FIELDS[key].metadata
    lower = any(isinstance(m, annotated_types.Ge | annotated_types.Gt) for m in meta)
    upper = any(isinstance(m, annotated_types.Le | annotated_types.Lt) for m in meta)
    assert lower and upper, f"{key}: give it ge/gt and le/lt bounds (see the module docstring)"


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [("store", "keep_per_workload", "99999999999999999999"),
     ("checkpoint", "cooperative_timeout_s", "inf"), ("checkpoint", "dump_timeout_s", "nan"),
     ("signals", "poll_interval_s", "inf"),
     ("policy.limits", "agent_checkpoints_per_hour", "99999999999999999999")],
)  # fmt: skip
def test_out_of_range_values_are_refused_by_key(
    tmp_path: Path, section: str, key: str, value: str
) -> None:
    (tmp_path / "config.toml").write_text(f"[{section}]\n{key} = {value}\n")
    with pytest.raises(errors.InvalidInput) as exc:
        load_settings(tmp_path)
    assert f"{section}.{key}" in exc.value.message and exc.value.hint
