"""The file-state contract: the files a workload writes are kept with its checkpoint.

CRIU saves a process's memory but not the contents of the files it has open: it records each
regular file's size and, on restore, refuses a file whose size changed ("has bad size"), and a
``MAP_SHARED`` file mapping (a ``multiprocessing.shared_memory`` segment is a /dev/shm file)
is re-mapped with whatever the file holds then. A workload that rewrites its log, metrics or
state file, or shares memory between processes, therefore could not be failed over or resumed
from an older checkpoint, or its memory would be paired with newer file contents.

So, at dump, while the tree is frozen (``criu dump --leave-stopped``, resumed right after the
copy for a leave-running checkpoint), ``save`` copies every regular file the tree has open
for writing (``/proc/PID/fd`` + ``fdinfo`` flags of every process) and every writable
``MAP_SHARED`` regular-file mapping (``/proc/PID/maps`` + ``map_files``) into the images
directory as ``clawpoint-file-NNNN`` (so the manifest's digests and every verification cover
them), smallest first, up to ``checkpoint.file_budget_mib``. The manifest's ``extra`` records,
under ``FILES_KEY``, where each copy goes back to (path, mode, owner) and which files were not
covered. ``put_back`` (before CRIU restores) checks the copies' digests and writes each to its
original path atomically (temporary file in the same directory, then rename), so memory and
files agree; what the file held since is first kept beside it (``PATH.after-ID``) and
reported. ``[checkpoint] file_policy`` may instead keep a file opened for appending as it is
(a server's access log), since CRIU does not size-check those.

A file the tree wrote and closed but has yet to act on is not in ``/proc``: the progress
protocol's temporary file, written, closed, then renamed over the report. A checkpoint
frozen between the two would be restored into a rename of a file that the program's later
run (after a leave-running checkpoint, or a resume of a stop one) already renamed away, and
the restored program would fail on it at every restore of that checkpoint. So the caller
names such files (``DumpRequest.side_files``, listed while the tree is frozen) and they are
carried and put back like the rest (``closed``), with no copy of a later version kept.

Limits: deleted-but-open files are CRIU's (``--ghost-limit``) and skipped here; files under
/proc, /sys and /dev (except /dev/shm) and excluded paths (the checkpoint store) are skipped.
A file beyond the budget is not copied: the checkpoint is still taken, the manifest lists it,
and a restore whose file changed size since (for a file not opened with ``O_APPEND``; CRIU
does not check those) or is missing fails before CRIU starts, naming the file. Putting a file
back replaces its inode (hard links to it are not updated) and discards what was written to
it after the checkpoint, which is the point: the restored program's memory is from then.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core import errors, logs
from core.model import CheckpointInfo
from core.store import digest

log = logs.get_logger(__name__)

FILES_KEY = "file_state"  # manifest ``extra`` key
PREFIX = "clawpoint-file-"
_O_ACCMODE = 0o3
_O_APPEND = 0o2000
_SKIP_DIRS = ("/proc/", "/sys/", "/dev/")
_ALLOWED_DEV = ("/dev/shm/",)
DELETED = " (deleted)"
REWIND, KEEP = "rewind", "keep"  # ``[checkpoint] file_policy`` values
AFTER = ".after-"  # a rewound file's later content is kept as PATH.after-CHECKPOINT_ID


@dataclass(frozen=True)
class OpenFile:
    """A regular file the tree can write: through an fd or a writable shared mapping."""

    path: str
    source: str  # a /proc path that reads the very file (fd or map_files link)
    dev: int
    ino: int
    size: int
    mode: int
    uid: int
    gid: int
    append: bool
    shared_map: bool
    # Not held open by the tree: a file it wrote and closed whose name it still acts on (the
    # progress protocol's temporary file, renamed over the report after it is closed).
    closed: bool = False


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants (from /proc/PID/task/TID/children)."""
    seen: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                kids = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            todo.extend(int(k) for k in kids)
    return seen


def _fd_flags(pid: int, fd: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines():
            if line.startswith("flags:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        return None
    return None


def covered(path: str, excluded: tuple[str, ...]) -> bool:
    """Is ``path`` a file a checkpoint carries (not a device, /proc, deleted or excluded)?"""
    if not path.startswith("/") or path.endswith(DELETED):
        return False
    if path.startswith(_SKIP_DIRS) and not path.startswith(_ALLOWED_DEV):
        return False
    return not any(path == e or path.startswith(e.rstrip("/") + "/") for e in excluded)


def _entry(
    path: str, source: str, *, append: bool, shared_map: bool, closed: bool = False
) -> OpenFile | None:
    try:
        st = os.stat(source)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return OpenFile(
        path=path,
        source=source,
        dev=st.st_dev,
        ino=st.st_ino,
        size=st.st_size,
        mode=stat.S_IMODE(st.st_mode),
        uid=st.st_uid,
        gid=st.st_gid,
        append=append,
        shared_map=shared_map,
        closed=closed,
    )


def shared_mappings(pid: int) -> list[tuple[str, str]]:
    """(path, map_files source) of every writable MAP_SHARED mapping of ``pid``."""
    out: list[tuple[str, str]] = []
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or parts[1][1] != "w" or parts[1][3] != "s" or parts[4] == "0":
            continue
        out.append((parts[5], f"/proc/{pid}/map_files/{parts[0]}"))
    return out


def open_fds(pid: int) -> Iterator[tuple[str, str, str]]:
    """(fd number, /proc source path, what it points at) of every descriptor ``pid`` holds;
    a process or descriptor that goes away while being read is skipped."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    for fd in fds:
        source = f"/proc/{pid}/fd/{fd}"
        try:
            target = os.readlink(source)
        except OSError:
            continue
        yield fd, source, target


def writable_files(root: int, *, exclude: tuple[str, ...] = ()) -> list[OpenFile]:
    """The regular files the tree rooted at ``root`` can write, one entry per file."""
    found: dict[tuple[int, int], OpenFile] = {}
    for pid in tree_pids(root):
        for fd, source, path in open_fds(pid):
            flags = _fd_flags(pid, fd)
            if flags is None or flags & _O_ACCMODE == os.O_RDONLY:
                continue
            if not covered(path, exclude):
                continue
            e = _entry(path, source, append=bool(flags & _O_APPEND), shared_map=False)
            if e is not None:
                old = found.get((e.dev, e.ino))
                # A file opened with and without O_APPEND: CRIU checks the size of the latter.
                if old is None or (old.append and not e.append):
                    found[(e.dev, e.ino)] = e
        for path, source in shared_mappings(pid):
            if not covered(path, exclude):
                continue
            e = _entry(path, source, append=False, shared_map=True)
            if e is None:
                continue
            old = found.get((e.dev, e.ino))
            # Mapped and open (SharedMemory keeps its fd): a shared mapping all the same.
            found[(e.dev, e.ino)] = e if old is None else replace(old, shared_map=True)
    return sorted(found.values(), key=lambda f: (f.size, f.path))


def split_budget(files: list[OpenFile], budget_bytes: int) -> tuple[list[OpenFile], list[OpenFile]]:
    """(covered, not covered): smallest first while the total fits in the budget."""
    covered: list[OpenFile] = []
    left: list[OpenFile] = []
    total = 0
    for f in sorted(files, key=lambda f: (f.size, f.path)):
        if not left and total + f.size <= budget_bytes:
            covered.append(f)
            total += f.size
        else:
            left.append(f)
    return covered, left


def _copy(source: str, dest: Path) -> int:
    n = 0
    with open(source, "rb") as src, open(dest, "wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)
            n += len(chunk)
    return n


def closed_files(paths: Sequence[Path], open_files: list[OpenFile]) -> list[OpenFile]:
    """Entries for ``paths``, files the tree does not hold open that its checkpoint carries
    all the same, except those already among ``open_files`` and any that is not a regular
    file (gone since it was listed: nothing to carry)."""
    held = {(f.dev, f.ino) for f in open_files}
    out: list[OpenFile] = []
    for path in paths:
        e = _entry(str(path), str(path), append=False, shared_map=False, closed=True)
        if e is not None and (e.dev, e.ino) not in held:
            out.append(e)
    return out


def save(
    root: int,
    images_dir: Path,
    *,
    budget_bytes: int,
    exclude: tuple[str, ...] = (),
    closed: Sequence[Path] = (),
) -> dict[str, Any]:
    """Copy the tree's writable files, and the ``closed`` files it does not hold open but
    will act on (``DumpRequest.side_files``), into ``images_dir``; call while the tree is
    frozen.

    Returns the manifest record (``FILES_KEY``).
    """
    held = writable_files(root, exclude=exclude)
    covered, left = split_budget([*held, *closed_files(closed, held)], budget_bytes)
    saved: list[dict[str, Any]] = []
    for i, f in enumerate(covered):
        name = f"{PREFIX}{i:04d}"
        try:
            size = _copy(f.source, images_dir / name)
        except OSError as exc:
            raise errors.CheckpointError(
                f"cannot copy {f.path}, a file the workload writes, into the checkpoint: {exc}",
                hint="the workload was left as it was and the previous checkpoints are "
                "untouched; check the checkpoint store's free space and retry",
            ) from exc
        saved.append(
            {
                "name": name,
                "path": f.path,
                "size": size,
                "mode": f.mode,
                "uid": f.uid,
                "gid": f.gid,
                "append": f.append,
                "shared_map": f.shared_map,
                **({"closed": True} if f.closed else {}),
            }
        )
    # A closed file that does not fit is left out, not listed: its absence at a restore is no
    # reason to refuse one (the payload may have renamed it a moment later).
    not_covered = [
        {"path": f.path, "size": f.size, "append": f.append, "shared_map": f.shared_map}
        for f in left
        if not f.closed
    ]
    if not_covered:
        log.warning(
            "files.over_budget",
            budget_bytes=budget_bytes,
            not_covered=[f["path"] for f in not_covered],
        )
    return {"budget_bytes": budget_bytes, "saved": saved, "not_covered": not_covered}


def _write_atomic(path: Path, data_from: Path, *, mode: int, uid: int, gid: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.clawpoint-restore-{os.getpid()}")
    try:
        with open(data_from, "rb") as src, open(tmp, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
            out.flush()
            os.fchmod(out.fileno(), mode)
            try:
                os.fchown(out.fileno(), uid, gid)
            except PermissionError:
                pass  # not root: the file stays ours, with the recorded mode
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def policy_for(path: str, policy: Mapping[str, str]) -> str:
    """``rewind`` or ``keep`` for ``path``: the first pattern of ``[checkpoint] file_policy``
    that matches it (shell-style, ``*`` crosses ``/``), else ``rewind``."""
    for pattern, what in policy.items():
        if fnmatch.fnmatchcase(path, pattern):
            return what
    return REWIND


def plan_note(info: CheckpointInfo, policy: Mapping[str, str]) -> str:
    """What a restore of ``info`` will do to the workload's files, for a plan's text ("" when
    it carries none)."""
    record = info.extra.get(FILES_KEY)
    # A closed file (a progress report's temporary file) is put back with no copy of a later
    # version kept: it is the payload's scratch, named here only in the restore's log.
    saved = [
        e for e in (record.get("saved", []) if isinstance(record, dict) else [])
        if not e.get("closed")
    ]  # fmt: skip
    back = [str(e["path"]) for e in saved if _decide(e, policy) == REWIND]
    kept = [str(e["path"]) for e in saved if _decide(e, policy) == KEEP]
    parts = []
    if back:
        parts.append(
            f"puts back {_names(back)} as at the checkpoint (anything written since is kept "
            f"beside each as NAME{AFTER}{info.id})"
        )
    if kept:
        parts.append(f"keeps {_names(kept)} as they are (file_policy keep)")
    return "; ".join(parts)


def _names(paths: list[str], most: int = 4) -> str:
    shown = ", ".join(paths[:most])
    return shown if len(paths) <= most else f"{shown} and {len(paths) - most} more"


def _decide(entry: Mapping[str, Any], policy: Mapping[str, str]) -> str:
    """``keep`` applies only to a file opened for appending (not a shared mapping): CRIU
    restores any other file at its recorded size, so that one must be rewound."""
    wanted = policy_for(str(entry["path"]), policy)
    if wanted == KEEP and entry.get("append") and not entry.get("shared_map"):
        return KEEP
    return REWIND


def _same_prefix(a: Path, b: Path, length: int) -> bool:
    """The first ``length`` bytes of ``a`` and ``b`` are equal."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        left = length
        while left > 0:
            n = min(left, 1 << 20)
            if fa.read(n) != fb.read(n):
                return False
            left -= n
    return True


def _keep_aside(
    path: Path, copy: Path, info: CheckpointInfo, entry: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Before ``path`` is rewound to ``copy``: keep what would be lost beside it (the bytes
    appended since the checkpoint, or the whole file when it was rewritten). None when the
    file is missing or unchanged."""
    try:
        now = path.stat().st_size
    except FileNotFoundError:
        return None
    saved = copy.stat().st_size
    grew = now >= saved and _same_prefix(path, copy, saved)
    if grew and now == saved:
        return None  # unchanged
    start = saved if grew else 0
    aside = path.with_name(f"{path.name}{AFTER}{info.id}")
    n = 1
    while aside.exists():  # a second restore of the same checkpoint keeps both
        aside = path.with_name(f"{path.name}{AFTER}{info.id}.{n}")
        n += 1
    with open(path, "rb") as src:
        src.seek(start)
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, int(entry["mode"]) & 0o7777)
        with os.fdopen(fd, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    return {"path": str(path), "action": "rewound", "bytes_after": now - start,
            "whole_file": not grew, "kept_at": str(aside)}  # fmt: skip


def put_back(
    info: CheckpointInfo, images_dir: Path, policy: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Put the checkpoint's files back before CRIU restores, as ``policy``
    (``[checkpoint] file_policy``) says; returns what it did to each file that had changed
    since the checkpoint: ``rewound`` (with ``bytes_after`` and where those bytes were kept)
    or ``kept``. Nothing is lost silently: a rewound file's later content is kept beside it.

    Raises CorruptCheckpoint when a copy fails its digest (nothing written for it), and
    CheckpointError naming a file the checkpoint did not cover whose state makes CRIU's
    restore impossible (missing, or a different size for a file not opened for appending).
    """
    policy = policy or {}
    record = info.extra.get(FILES_KEY)
    if not isinstance(record, dict):
        return []
    digests = {f.name: f for f in info.files}
    written: list[str] = []
    report: list[dict[str, Any]] = []
    for entry in record.get("saved", []):
        name = str(entry["name"])
        expected = digests.get(name)
        src = images_dir / name
        if expected is None:
            raise errors.CorruptCheckpoint(
                f"checkpoint {info.id} lists a file copy {name} its manifest does not hash",
                hint="restore an older checkpoint; this one is not trusted",
            )
        _, got = digest.file_digest(src, digest.algo_of(expected.digest))
        if got != expected.digest:
            raise errors.CorruptCheckpoint(
                f"checkpoint {info.id}: the saved copy of {entry['path']} ({name}) does not "
                "match its digest",
                hint="restore an older checkpoint of the workload; this one is not trusted",
                details={"checkpoint": info.id, "file": entry["path"]},
            )
    for entry in record.get("saved", []):
        path = Path(str(entry["path"]))
        copy = images_dir / str(entry["name"])
        if _decide(entry, policy) == KEEP and path.exists():
            grown = path.stat().st_size - int(entry["size"])
            if grown:
                report.append({"path": str(path), "action": KEEP, "bytes_after": grown})
            continue
        try:
            if not entry.get("shared_map") and not entry.get("closed"):
                aside = _keep_aside(path, copy, info, entry)
                if aside is not None:
                    report.append(aside)
            _write_atomic(
                path,
                images_dir / str(entry["name"]),
                mode=int(entry["mode"]),
                uid=int(entry["uid"]),
                gid=int(entry["gid"]),
            )
        except OSError as exc:
            raise errors.CheckpointError(
                f"cannot put back {path}, a file the checkpointed workload had open: {exc}",
                hint="make its directory writable (or free space) and retry; the checkpoint "
                "is unchanged",
                details={"file": str(path)},
            ) from exc
        written.append(str(path))
    for entry in record.get("not_covered", []):
        path = Path(str(entry["path"]))
        why = _uncovered_problem(path, int(entry["size"]), append=bool(entry.get("append")))
        if why:
            raise errors.CheckpointError(
                f"checkpoint {info.id} cannot be restored: {path} {why}, and it was beyond "
                f"the file budget ({int(record.get('budget_bytes', 0)) // 2**20} MiB) so the "
                "checkpoint holds no copy of it",
                hint="restore the file to its size at the checkpoint (or a newer checkpoint "
                "of the workload), or raise checkpoint.file_budget_mib so later checkpoints "
                "carry it; the checkpoint is unchanged",
                details={"checkpoint": info.id, "file": str(path)},
            )
    if written:
        log.info("files.put_back", checkpoint=info.id, files=written, changed=report)
    return report


def _uncovered_problem(path: Path, size: int, *, append: bool) -> str | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc})"
    if not append and st.st_size != size:
        return f"has {st.st_size} bytes where the checkpoint recorded {size}"
    return None
