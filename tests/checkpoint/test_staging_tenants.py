"""The handoff's staging area against another local user (issue 20), played by real users.

Bob (an ordinary user, no privileges) lays traps under the name of Alice's (or root's)
staging area in a directory both can write, as ``/dev/shm`` is: a directory of his, an open
one, a symlink to his own directory. Alice, staging with ``core.store.staging`` from her
own venv, refuses each (staging then falls back to the store) and never writes into Bob's
directory; root's sweep never follows Bob's symlink. Alice's own area keeps Bob out.

A fresh ``/dev/shm`` directory, mode 1777 like ``/dev/shm`` itself, stands in for it (the
real ``/dev/shm/clawpoint-staging-*`` is never touched); removed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.store import staging
from tests.tenants import Tenant, tenants

STAGE = """
import json, sys
from core.store import staging
slot = staging.allocate(sys.argv[1], "w@1", 1)
swept = staging.sweep(sys.argv[1])
print(json.dumps({"slot": str(slot.path) if slot else None, "swept": swept}))
"""


@pytest.fixture
def shared() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="clawpoint-tenants-", dir="/dev/shm"))
    d.chmod(0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d)


def _stage(who: Tenant, shared: Path) -> tuple[str | None, str]:
    """Alice (or Bob) stages under ``shared``: (the slot's path or None, her log)."""
    done = who.run([who.python, "-c", STAGE, str(shared)])
    assert done.returncode == 0, done.stderr
    *logs, last = done.stdout.strip().splitlines()
    return json.loads(last)["slot"], "\n".join(logs) + done.stderr


def _bobs_dir(bob: Tenant, shared: Path, name: str, mode: int) -> Path:
    """A directory of Bob's, made by Bob, holding his (old) canary."""
    d = shared / name
    script = (
        "import os, sys, time; d = sys.argv[1]; os.mkdir(d); os.chmod(d, int(sys.argv[2], 8)); "
        "c = os.path.join(d, 'canary'); open(c, 'w').write('bob'); "
        "t = time.time() - 3600; os.utime(c, (t, t)); os.utime(d, (t, t))"
    )
    done = bob.run([bob.python, "-c", script, str(d), oct(mode)])
    assert done.returncode == 0, done.stderr
    assert d.stat().st_uid == bob.uid
    return d


def _untouched(bob: Tenant, d: Path) -> None:
    assert d.stat().st_uid == bob.uid
    assert sorted(p.name for p in d.iterdir()) == ["canary"], list(d.iterdir())
    assert (d / "canary").read_text() == "bob"


@pytest.mark.parametrize("mode", [0o777, 0o700])
def test_bob_precreates_alices_area_and_alice_refuses_it(shared: Path, mode: int) -> None:
    alice, bob = tenants()
    trap = _bobs_dir(bob, shared, f"{staging.PREFIX}{alice.uid}", mode)
    slot, log = _stage(alice, shared)
    assert slot is None, slot  # the store is used instead
    assert "staging.refused" in log and str(trap) in log, log
    assert f"owned by uid {bob.uid}" in log, log
    _untouched(bob, trap)


def test_bobs_symlink_as_alices_area_is_not_followed(shared: Path) -> None:
    alice, bob = tenants()
    target = _bobs_dir(bob, shared, "bobs-images", 0o777)  # Alice could write there
    link = shared / f"{staging.PREFIX}{alice.uid}"
    done = bob.run(["ln", "-s", str(target), str(link)])
    assert done.returncode == 0, done.stderr
    slot, log = _stage(alice, shared)
    assert slot is None, slot
    assert "staging.refused" in log and "a symlink" in log, log
    _untouched(bob, target)
    assert link.is_symlink()  # nothing of Bob's removed either


def test_roots_sweep_does_not_follow_bobs_symlink(shared: Path) -> None:
    """The review's worst case: root's sweep made to rmtree a directory Bob chose."""
    _, bob = tenants()
    victim = _bobs_dir(bob, shared, "victim", 0o755)  # old: a sweep would remove it
    (shared / "dir-of-bob").mkdir()  # a directory with an old entry, as a sweep sees it
    link = shared / f"{staging.PREFIX}{os.geteuid()}"
    done = bob.run(["ln", "-s", str(shared), str(link)])
    assert done.returncode == 0, done.stderr
    assert staging.sweep(str(shared), older_than_s=0) == []
    assert staging.allocate(str(shared), "w@1", 1) is None
    _untouched(bob, victim)
    assert (shared / "dir-of-bob").is_dir()


def test_alices_area_keeps_bob_out(shared: Path) -> None:
    alice, bob = tenants()
    slot, log = _stage(alice, shared)
    assert slot is not None, log
    area = Path(slot).parent
    st = area.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (alice.uid, 0o700)
    # Bob can neither plant images nor list, rename or remove what is there.
    for script in (
        f"open({str(Path(slot) / 'pages-1.img')!r}, 'w')",
        f"import os; os.listdir({str(area)!r})",
        f"import os; os.rename({str(area)!r}, {str(shared / 'moved')!r})",  # sticky parent
        f"import shutil; shutil.rmtree({str(area)!r})",
    ):
        done = bob.run([bob.python, "-c", script])
        assert done.returncode != 0 and "PermissionError" in done.stderr, (script, done)
    assert area.exists() and Path(slot).exists()
    # And her next wrapper sweeps only her old entries (nothing of hers is old yet).
    old = time.time() - staging.STALE_S - 5
    os.utime(slot, (old, old))
    again, log = _stage(alice, shared)
    assert again is not None and not Path(slot).exists(), log  # swept: its writer was gone
