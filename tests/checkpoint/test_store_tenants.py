"""The review of issue 20, replayed by real users on a shared (1777) store.

Alice writes a checkpoint holding a secret through the store as herself; Bob, another
ordinary user of the node, tries what the review did: read her images, list her manifests,
plant a checkpoint in her lineage (a copy of hers with 4 KiB patched, the digest recomputed
and the manifest rewritten), or squat a lineage name before her. Alice must never see his
checkpoints as good nor restore them (exit 8), and must lose none of hers.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.guardrails.audit import AuditLog
from core.state.db import Database
from tests.tenants import Tenant, tenants

SECRET = "alice-secret-7f3a9c"

# Run as Alice or Bob with their venv's python: a store as clawpoint opens it for them.
_STORE = """
import json, os, sys
from pathlib import Path
from core import errors
from core.config import load_settings
from core.store.store import CheckpointStore
s = load_settings()
store = CheckpointStore(s.checkpoint_dir, key=s.store_key_path, group=s.store.group)
"""
_WRITE = (
    _STORE
    + """
os.umask(0o022)
p = store.begin(sys.argv[1], engine="test", node="n1")
(p.images_dir / "pages-1.img").write_bytes(sys.argv[2].encode() * 4096)
(p.images_dir / "core.img").write_bytes(b"core")
print(store.publish(p, timings={}, leave_running=True).id)
"""
)
_LIST = (
    _STORE
    + """
try:
    found = store.list(sys.argv[1] if len(sys.argv) > 1 else None)
except errors.ClawpointError as exc:
    print(json.dumps({"error": exc.code, "message": exc.message, "exit": exc.exit_code}))
    sys.exit(exc.exit_code)
print(json.dumps({i.id: [i.status.value, i.extra.get("untrusted_reason")] for i in found}))
"""
)
_RESTORE = (
    _STORE
    + """
try:
    store.verify(sys.argv[1], restore=True)
except errors.ClawpointError as exc:
    print(json.dumps({"error": exc.code, "message": exc.message, "hint": exc.hint}))
    sys.exit(exc.exit_code)
print("restorable")
"""
)


_HOME_NAME = ".clawpoint-store-test"  # set per test by ``users``


@pytest.fixture
def shared() -> Iterator[Path]:
    """The documented shared Slurm store: one directory, mode 1777 (not under tmp_path,
    which the tenants cannot reach)."""
    root = Path(tempfile.mkdtemp(prefix="clawpoint-shared-store-"))
    root.chmod(0o1777)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def users(shared: Path) -> Iterator[tuple[Tenant, Tenant]]:
    global _HOME_NAME
    # One home per test (named after its store): tests on other pytest workers run as the
    # same users at the same time, and one's teardown must not remove another's key.
    _HOME_NAME = f".clawpoint-store-test-{shared.name}"
    alice, bob = tenants()
    for t in (alice, bob):
        home = t.home / _HOME_NAME
        shutil.rmtree(home, ignore_errors=True)
        t.mkdtemp(t.home, _HOME_NAME)
        (home / "config.toml").write_text(f'[store]\npath = "{shared}"\n')
        os.chown(home / "config.toml", t.uid, t.gid)
    try:
        yield alice, bob
    finally:
        for t in (alice, bob):
            shutil.rmtree(t.home / _HOME_NAME, ignore_errors=True)


def _env(t: Tenant) -> dict[str, str]:
    return t.env(CLAWPOINT_HOME=str(t.home / _HOME_NAME))


def _py(t: Tenant, script: str, *args: str) -> tuple[int, str, str]:
    done = t.run([t.python, "-c", script, *args], env=_env(t))
    return (
        done.returncode,
        done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "",
        done.stderr,
    )


def _cli(t: Tenant, *args: str) -> tuple[int, str, str]:
    done = t.run([t.clawpoint, *args], env=_env(t), timeout=180)
    return done.returncode, done.stdout, done.stderr


def _write(t: Tenant, lineage: str, payload: str) -> str:
    rc, out, err = _py(t, _WRITE, lineage, payload)
    assert rc == 0, err
    return out


def test_other_users_cannot_read_a_checkpoint(users: tuple[Tenant, Tenant], shared: Path) -> None:
    alice, bob = users
    cid = _write(alice, "train", SECRET)
    seq_dir = shared / "train" / f"{int(cid.split('@')[1]):08d}"
    pages = seq_dir / "images" / "pages-1.img"
    assert SECRET.encode() in pages.read_bytes()  # root sees it is really there
    for path in (shared / "train", seq_dir, seq_dir / "images"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700 and os.stat(path).st_uid == alice.uid
    assert stat.S_IMODE(os.stat(pages).st_mode) == 0o600
    for attempt in (
        f"open({str(pages)!r}, 'rb').read()",
        f"open({str(seq_dir / 'manifest.json')!r}).read()",
        f"import os; os.listdir({str(shared / 'train')!r})",
    ):
        done = bob.run([bob.python, "-c", attempt], env=_env(bob))
        assert done.returncode != 0 and "PermissionError" in done.stderr, attempt
        assert SECRET not in done.stdout + done.stderr
    # Bob's own clawpoint: Alice's lineage is not his to list, by name, and absent from all.
    rc, out, _ = _py(bob, _LIST, "train")
    assert rc == 8 and json.loads(out)["error"] == "checkpoint-untrusted"
    assert "clawpoint-alice" in json.loads(out)["message"]
    rc, out, _ = _py(bob, _LIST)
    assert rc == 0 and json.loads(out) == {}


def test_planted_checkpoint_is_untrusted_and_never_restored(
    users: tuple[Tenant, Tenant], shared: Path
) -> None:
    """The review's attack, with Alice's lineage as loose as the old store left it (0777
    directories, 0666 files: what a umask of 0 gave): Bob copies her checkpoint as the next
    one, patches 4 KiB, recomputes the digest and rewrites the manifest; he also rewrites
    her own checkpoint in place. Neither is good to her, neither restores (exit 8), and her
    good checkpoint is what a restore of the lineage uses."""
    alice, bob = users
    good = _write(alice, "train", SECRET)
    second = _write(alice, "train", SECRET + "-2")
    loosen = f"""
import os
for d, dirs, files in os.walk({str(shared / "train")!r}):
    os.chmod(d, 0o777)
    for f in files:
        os.chmod(os.path.join(d, f), 0o666)
"""
    assert alice.run([alice.python, "-c", loosen], env=_env(alice)).returncode == 0
    plant = f"""
import json, shutil, sys
from pathlib import Path
from core.store import digest
lineage = Path({str(shared / "train")!r})

def forge(d: Path, cid: str, seq: int) -> None:
    pages = d / "images" / "pages-1.img"
    data = bytearray(pages.read_bytes())
    data[4096:8192] = b"B" * 4096
    tmp = pages.with_name("pages.tmp")
    tmp.write_bytes(bytes(data))
    tmp.replace(pages)
    doc = json.loads((d / "manifest.json").read_text())
    doc.update(id=cid, seq=seq)
    for f in doc["files"]:
        f["size"], f["digest"] = digest.file_digest(d / "images" / f["name"])
    tmp = d / "manifest.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(d / "manifest.json")

planted = lineage / "00000003"
shutil.copytree(lineage / "00000001", planted)
forge(planted, "train@3", 3)
forge(lineage / "00000002", "train@2", 2)  # in place, in her own directory
"""
    done = bob.run([bob.python, "-c", plant], env=_env(bob))
    assert done.returncode == 0, done.stderr
    rc, out, err = _py(alice, _LIST, "train")
    assert rc == 0, err
    listed = json.loads(out)
    assert listed[good] == ["good", None]
    assert listed["train@3"][0] == "untrusted" and "clawpoint-bob" in listed["train@3"][1]
    assert listed[second][0] == "untrusted"
    assert "changed after it was signed" in listed[second][1]
    for cid in ("train@3", second):
        rc, out, _ = _py(alice, _RESTORE, cid)
        refused = json.loads(out)
        assert rc == 8 and refused["error"] == "checkpoint-untrusted", out
        assert cid in refused["message"] and refused["hint"]
    assert _py(alice, _RESTORE, good)[:2] == (0, "restorable")

    # The same through the installed CLI: listed not good, a restore refused with exit 8,
    # the refusal in her audit log, and every checkpoint (his included) still there.
    rc, out, err = _cli(alice, "checkpoints", "--json")
    assert rc == 0, err
    statuses = {c["id"]: c["status"] for c in json.loads(out)}
    assert statuses == {
        f"local:{good}": "good",
        f"local:{second}": "untrusted",
        "local:train@3": "untrusted",
    }
    rc, out, err = _cli(alice, "restore", "local:train@3", "--yes")
    assert rc == 8, out + err
    assert "train@3" in out + err and "untrusted" in out + err
    audit = AuditLog(Database(alice.home / _HOME_NAME / "state.db")).entries()
    seen = [(e.subject, e.data["action"]) for e in audit if e.kind == "checkpoint.untrusted"]
    assert ("local:train@3", "restore") in seen and ("local:train@3", "list") in seen
    assert sorted(p.name for p in (shared / "train").iterdir() if p.name[0] != ".") == [
        "00000001",
        "00000002",
        "00000003",
    ]


def test_squatted_lineage_is_refused_by_name(users: tuple[Tenant, Tenant], shared: Path) -> None:
    """Bob creates Alice's workload name first, with a checkpoint signed by his own key:
    she neither writes into it nor trusts anything in it."""
    alice, bob = users
    _write(bob, "eval", "bob's")
    rc, out, _ = _py(alice, _LIST, "eval")
    assert rc == 8 and "belongs to uid" in json.loads(out)["message"]
    rc, _, err = _py(alice, _WRITE, "eval", SECRET)
    assert rc != 0 and "UntrustedCheckpoint" in err and "clawpoint-bob" in err
    rc, out, _ = _py(alice, _LIST)
    assert rc == 0 and json.loads(out) == {}
    assert not any(SECRET.encode() in p.read_bytes() for p in shared.rglob("*.img"))
