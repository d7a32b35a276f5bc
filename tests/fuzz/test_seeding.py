"""The fuzz runs' seed: reproducible per commit, settable, and named in a failure."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import seeding


@pytest.fixture(autouse=True)
def fresh_seed() -> Iterator[None]:
    seeding.fuzz_seed.cache_clear()
    yield
    seeding.fuzz_seed.cache_clear()


def test_the_seed_is_the_commits_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLAWPOINT_FUZZ_SEED", raising=False)
    head = subprocess.run(["git", "-C", str(seeding.ROOT), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    if not head:
        pytest.skip("not a git checkout")
    assert seeding.fuzz_seed() == int(head[:12], 16)
    seeding.fuzz_seed.cache_clear()
    monkeypatch.setenv("CLAWPOINT_FUZZ_SEED", "1234")
    assert seeding.fuzz_seed() == 1234


def test_a_bad_seed_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWPOINT_FUZZ_SEED", "abc")
    with pytest.raises(ValueError, match="CLAWPOINT_FUZZ_SEED='abc' is not an integer"):
        seeding.fuzz_seed()


def _draws(seed: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setenv("CLAWPOINT_FUZZ_SEED", seed)
    seeding.fuzz_seed.cache_clear()
    drawn: list[int] = []

    @seeding.fuzzed(20)
    @given(n=st.integers())
    def case(n: int) -> None:
        drawn.append(n)

    case()
    return drawn


def test_one_seed_draws_the_same_cases_another_draws_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _draws("7", monkeypatch) == _draws("7", monkeypatch)
    assert _draws("7", monkeypatch) != _draws("8", monkeypatch)


def test_a_failure_says_how_to_draw_its_cases_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWPOINT_FUZZ_SEED", "42")

    @seeding.fuzzed(20)
    @given(n=st.integers())
    def case(n: int) -> None:
        assert n < 5

    with pytest.raises(AssertionError) as failure, seeding.with_seed_note():
        case()
    assert any("CLAWPOINT_FUZZ_SEED=42" in note for note in failure.value.__notes__)
