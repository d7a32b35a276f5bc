"""Staging a handoff's images in memory (tmpfs) instead of the store's disk, privately.

A migration's dump is the one part of the pause that grows with the workload. Written to
the store's filesystem it competes with the write-back of earlier checkpoints (the kernel
throttles a writer once enough dirty pages pile up), so a 1 GiB dump took from 0.7 s to
over 4 s on the same machine. Written to a tmpfs (``[migration] staging_dir``, default
``/dev/shm``) it runs at memory speed; the target restores from there (hard links in the
same tmpfs), and the source then copies the images into the store and publishes them.

Privacy: ``staging_dir`` is shared (``/dev/shm`` is world-writable and empty after boot),
so each uid stages in its own area ``<staging_dir>/clawpoint-staging-<uid>``, created with
mode 0700 and then opened ``O_NOFOLLOW|O_DIRECTORY`` and checked on the descriptor: a
directory, owned by our euid, no group/other bits. ``staging_dir`` itself must be owned by
root or us and, when others may write it, sticky (else another user could rename our area
away and put theirs in its place). An area that fails any check is never used: staging
falls back to the store, with a warning naming the path and the problem. Every later step
(allocate, list, link, copy, sweep, remove) goes through that descriptor (``dir_fd``,
``shutil.rmtree(dir_fd=...)``), so no path another user controls is ever followed.

Why the target may restore staged images without hashing them: they are in an area no
other uid can write (checked again, on a descriptor, by the target, which runs as the same
uid), and every file it links is checked to be a regular file of ours with no other name
(``link``). Hashing instead was measured to cost far more of the pause (see
``bench/staging_proof.py``). This proves nothing against root or our own uid, which can
write the images anyway.

Layout: ``<area>/<lineage>@<seq>-<token>/`` (the source's) and
``<area>/<...-token>.links-<standby token>/`` (the target's). Each side removes its own and
holds an ``flock`` on it while it lives; ``sweep`` (at every wrapper's start and before
every staged dump) removes entries older than ``STALE_S`` whose lock is free (their writer
was killed), so memory is not held for long after a crash.

Limits: used only when the tmpfs has room for 1.5x the workload's resident memory; the
images are in RAM until published (seconds), so a machine crash in that window loses them
(the previous checkpoint is intact and still the newest published one). Another user can
still deny us staging (by creating our area's name first): we then use the store, slower
but safe. The area's path, not its descriptor, is what CRIU is given: it stays ours
because its parent is sticky or private and the area is 0700.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import stat
import time
from pathlib import Path
from types import TracebackType

from core import errors, logs

log = logs.get_logger(__name__)

__all__ = ["PREFIX", "STALE_S", "Slot", "allocate", "base", "contains", "link", "sweep"]

PREFIX = "clawpoint-staging-"
STALE_S = 600.0
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@:+-]{0,200}")
_COPY = 8 << 20


class _Refused(errors.OperationFailed):
    """The staging area (or something in it) failed a safety check: never used."""

    default_code = "staging-refused"


def base(staging_dir: str) -> Path | None:
    """Where this uid's staging area is (or would be) under ``staging_dir``; None when
    staging is off. A name only: nothing is checked or created here."""
    if not staging_dir:
        return None
    return Path(staging_dir) / f"{PREFIX}{os.geteuid()}"


def contains(staging_dir: str, path: Path) -> bool:
    """Does ``path`` name an entry directly in this uid's area (lexically; ``link`` checks
    the real thing)?"""
    root = base(staging_dir)
    return root is not None and Path(os.path.normpath(path)).parent == Path(os.path.normpath(root))


class Slot:
    """One staged directory this process owns: ``path`` (what CRIU is given) and an open
    descriptor on it, ``flock``-ed so that no sweep removes it while this process lives.
    Everything goes through the descriptors; ``remove`` once done."""

    def __init__(self, area: _Area, name: str, fd: int) -> None:
        self._area = area
        self.name = name
        self.path = area.path / name
        self._fd = fd

    def copy_into(self, dest: Path) -> None:
        """Copy every regular file of the slot into ``dest`` (the store's pending images)."""
        for entry in sorted(os.scandir(self._fd), key=lambda e: e.name):
            src = os.open(entry.name, _FILE, dir_fd=self._fd)
            try:
                st = os.fstat(src)
                if not stat.S_ISREG(st.st_mode):
                    continue
                with open(dest / entry.name, "wb") as out:
                    done = 0  # in the kernel, as shutil.copyfile does between paths
                    while done < st.st_size:
                        n = os.sendfile(out.fileno(), src, done, min(_COPY, st.st_size - done))
                        if n == 0:
                            break
                        done += n
            finally:
                os.close(src)

    def remove(self) -> None:
        """Remove the slot and everything in it (through the area's descriptor); idempotent."""
        if self._fd < 0:
            return
        try:
            shutil.rmtree(self.name, dir_fd=self._area.fd, ignore_errors=True)
        finally:
            os.close(self._fd)
            self._fd = -1
            self._area.close()


class _Area:
    """This uid's staging area, open and verified (``_open``)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> _Area:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def mkslot(self, name: str) -> Slot:
        """A new private subdirectory ``name``, opened and locked."""
        os.mkdir(name, 0o700, dir_fd=self.fd)
        try:
            fd = os.open(name, _DIR, dir_fd=self.fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            shutil.rmtree(name, dir_fd=self.fd, ignore_errors=True)
            raise
        return Slot(self, name, fd)

    def sweep(self, older_than_s: float) -> list[str]:
        """Remove entries older than ``older_than_s`` whose writer is gone; their names."""
        now, swept = time.time(), []
        for entry in os.scandir(self.fd):
            name = entry.name
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
                if now - st.st_mtime <= older_than_s:
                    continue
                if not stat.S_ISDIR(st.st_mode):  # never ours: drop the name, not its target
                    os.unlink(name, dir_fd=self.fd)
                    swept.append(name)
                    continue
                fd = os.open(name, _DIR, dir_fd=self.fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    # Its writer is gone (a live one holds the lock: a long post-copy
                    # restore, say); rmtree with dir_fd never follows a symlink inside.
                    shutil.rmtree(name, dir_fd=self.fd)
                except BlockingIOError:
                    continue
                finally:
                    os.close(fd)
                swept.append(name)
            except OSError as exc:
                log.warning("staging.sweep_failed", path=str(self.path / name), error=str(exc))
        for name in swept:
            log.info("staging.swept", path=str(self.path / name))
        return swept


def _refused(path: Path | str, problem: str) -> _Refused:
    return _Refused(
        f"staging area {path} is not safe to use: {problem}",
        hint=f"staging falls back to the store (slower, nothing lost); remove {path} if it "
        "is yours, or set [migration] staging_dir to a directory only you can write",
        details={"path": str(path), "problem": problem},
    )


def _open(staging_dir: str, *, create: bool) -> _Area | None:
    """This uid's area under ``staging_dir``, verified on its descriptor. None when staging
    is off, ``staging_dir`` is missing, or the area is missing and ``create`` is False.
    Raises _Refused when anything fails a check, OSError when the system says no."""
    path = base(staging_dir)
    if path is None:
        return None
    euid = os.geteuid()
    try:
        parent = os.open(staging_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None  # the configured directory itself: followed, as configured
    try:
        pst = os.fstat(parent)
        if pst.st_uid not in (0, euid):
            raise _refused(path, f"{staging_dir} is owned by uid {pst.st_uid}, who could "
                           "replace the area")  # fmt: skip
        if pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX:
            raise _refused(path, f"{staging_dir} is writable by others and not sticky, so "
                           "the area could be renamed away")  # fmt: skip
        if create:
            try:
                os.mkdir(path.name, 0o700, dir_fd=parent)
            except FileExistsError:
                pass  # ours from before, or a trap: the checks below tell
        try:
            fd = os.open(path.name, _DIR, dir_fd=parent)
        except FileNotFoundError:
            if create:
                raise
            return None
        except OSError as exc:  # ELOOP: a symlink; ENOTDIR: not a directory; EACCES
            raise _refused(path, _what_is(parent, path.name, euid, exc)) from exc
    finally:
        os.close(parent)
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISDIR(st.st_mode):
        problem = "not a directory"
    elif st.st_uid != euid:
        problem = f"owned by uid {st.st_uid}, not {euid}"
    elif st.st_mode & 0o077:
        problem = f"mode {stat.S_IMODE(st.st_mode):04o} lets others in (must be 0700)"
    if problem is not None:
        os.close(fd)
        raise _refused(path, problem)
    return _Area(path, fd)


def _what_is(parent: int, name: str, euid: int, exc: OSError) -> str:
    """Why ``name`` could not be opened as our area, for the warning (checks nothing)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return str(exc.strerror)
    if stat.S_ISLNK(st.st_mode):
        return f"a symlink (owned by uid {st.st_uid})"
    if st.st_uid != euid:
        return f"owned by uid {st.st_uid}, not {euid}"
    return f"not a plain directory ({exc.strerror})"


def allocate(staging_dir: str, name: str, need_bytes: int | None) -> Slot | None:
    """A fresh private directory for a dump of about ``need_bytes``, or None (use the store:
    staging off, no room, size unknown, or the area refused, which is logged)."""
    if not staging_dir or need_bytes is None:
        return None
    if not _NAME.fullmatch(name):
        log.warning("staging.bad_name", name=name)
        return None
    try:
        area = _open(staging_dir, create=True)
    except _Refused as exc:
        log.warning("staging.refused", path=exc.details["path"], problem=exc.details["problem"])
        return None
    except OSError as exc:
        log.warning("staging.unavailable", dir=staging_dir, error=str(exc))
        return None
    if area is None:
        log.info("staging.unavailable", dir=staging_dir, error="not a directory")
        return None
    try:
        st = os.fstatvfs(area.fd)
        if st.f_bavail * st.f_frsize < need_bytes * 1.5:
            log.info("staging.too_small", dir=str(area.path), need=need_bytes)
            area.close()
            return None
        return area.mkslot(f"{name}-{secrets.token_hex(4)}")
    except OSError as exc:
        area.close()
        log.warning("staging.unavailable", dir=str(area.path), error=str(exc))
        return None


def link(staging_dir: str, staged: Path, tag: str) -> Slot:
    """Hard links, in a new slot ``<staged>.links-<tag>``, to the staged images at
    ``staged`` (the source's slot, same uid): they survive the source's publish or abort.

    This is what lets the target restore them unhashed: the area is re-verified on its
    descriptor, the source's slot must be a private directory of ours in it, and every
    entry a regular file of ours that has no name but the source's and ours. Raises
    (nothing left behind) otherwise; the caller then restores the published checkpoint."""
    if not contains(staging_dir, staged) or not _NAME.fullmatch(staged.name):
        raise errors.InvalidInput(
            f"{staged} is not in this user's staging area",
            hint="the standby restores the published checkpoint instead",
        )
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tag):
        raise errors.InvalidInput(f"bad standby tag {tag!r}", hint="a hex token is expected")
    area = _open(staging_dir, create=False)
    if area is None:
        raise errors.NotFound(
            f"staging area {base(staging_dir)} is gone",
            hint="the standby restores the published checkpoint instead",
        )
    try:
        src = os.open(staged.name, _DIR, dir_fd=area.fd)
    except BaseException:
        area.close()
        raise
    try:
        st = os.fstat(src)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            area.close()
            raise _refused(staged, f"owned by uid {st.st_uid}, mode {st.st_mode & 0o7777:04o}")
        try:
            slot = area.mkslot(f"{staged.name}.links-{tag}")  # from here the slot owns area
        except BaseException:
            area.close()
            raise
        try:
            _link_files(src, slot._fd, staged)
        except BaseException:
            slot.remove()
            raise
        return slot
    finally:
        os.close(src)


def _link_files(src: int, dst: int, staged: Path) -> None:
    euid = os.geteuid()
    for entry in os.scandir(src):
        name = entry.name
        st = os.stat(name, dir_fd=src, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != euid:
            raise _refused(staged / name, "not a regular file of ours")
        os.link(name, name, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
        got = os.stat(name, dir_fd=dst, follow_symlinks=False)
        # Two names: the source's and ours (one if the source already removed its own).
        if (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino) or got.st_nlink > 2:
            raise _refused(staged / name, f"changed while linked, or has {got.st_nlink} names")


def sweep(staging_dir: str, older_than_s: float = STALE_S) -> list[str]:
    """Remove this uid's staging entries older than ``older_than_s`` whose writer is gone
    (killed: its lock is free); their names. Cheap when there is no area; never raises."""
    try:
        area = _open(staging_dir, create=False)
    except _Refused as exc:
        log.warning("staging.refused", path=exc.details["path"], problem=exc.details["problem"])
        return []
    except OSError as exc:
        log.warning("staging.unavailable", dir=staging_dir, error=str(exc))
        return []
    if area is None:
        return []
    with area:
        try:
            return area.sweep(older_than_s)
        except OSError as exc:
            log.warning("staging.sweep_failed", path=str(area.path), error=str(exc))
            return []
