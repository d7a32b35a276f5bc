"""Who may read and write the store: modes, group, owners; never following a planted link.

Everything the store creates gets an explicit mode, whatever the process umask (CRIU, like
any program, creates its image files with the umask: 0644 under the usual 022):

- private (the default): directories 0700, files 0600;
- group mode (``[store] group = "NAME"``, for a service that reads what wrappers write, such
  as a Slurm operator or the Kubernetes server's uid): directories 2750 owned by that group
  (setgid, so files created inside inherit it), files 0640.

Ownership is checked with ``lstat`` (a symbolic link is never followed: it is refused by
name), and files are opened with ``O_NOFOLLOW``.

Limits: checks are made on paths, then the paths are used. That is sound because the store
root is either private or sticky (1777: nobody can rename or remove another user's entry)
and every directory under it is writable only by its owner; ``check_root`` refuses to write
into a root that is writable by others without the sticky bit.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from core import errors, logs

log = logs.get_logger(__name__)


@dataclass(frozen=True)
class Modes:
    dir: int
    file: int
    gid: int | None  # the group of group mode; None = private


PRIVATE = Modes(dir=0o700, file=0o600, gid=None)


def modes(group: str | None) -> Modes:
    """The modes for ``[store] group`` (None or "" = private); InvalidInput for an unknown group."""
    if not group:
        return PRIVATE
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError as exc:
        raise errors.InvalidInput(
            f"[store] group names {group!r}, which is not a group on this host",
            hint="create the group (groupadd) or fix [store] group, then run "
            "'clawpoint config check'",
        ) from exc
    return Modes(dir=0o2750, file=0o640, gid=gid)


def user_name(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _fix(fd: int, mode: int, m: Modes) -> None:
    if m.gid is not None and os.fstat(fd).st_gid != m.gid:
        os.fchown(fd, -1, m.gid)
    os.fchmod(fd, mode)  # after chown: chown clears the setgid bit


def make_dir(path: Path, m: Modes, *, exist_ok: bool = False) -> bool:
    """Create ``path`` with the store's directory mode; True if it was created here.

    An existing one (``exist_ok``) is left as it is: the caller checks its owner."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if exist_ok:
            return False
        raise
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _fix(fd, m.dir, m)
    finally:
        os.close(fd)
    return True


def open_file(path: Path, m: Modes, flags: int) -> int:
    """Open (creating) a store file without following links, with the store's file mode."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _fix(fd, m.file, m)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_durable(path: Path, data: bytes, m: Modes) -> None:
    """Write ``path`` atomically (a sibling, fsync, rename) with the store's file mode."""
    tmp = path.with_name(path.name + ".part")
    try:
        os.unlink(tmp)  # a leftover of a crash, or something planted: never write through it
    except FileNotFoundError:
        pass
    fd = open_file(tmp, m, os.O_WRONLY | os.O_EXCL)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_nofollow(path: Path) -> bytes | None:
    """The bytes of a regular file at ``path`` (never through a link); None if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def tighten_tree(top: Path, m: Modes) -> None:
    """Give everything under ``top`` (what an engine wrote with its umask) the store's modes.

    Links are left alone (never followed). A file we may not chmod (written by a privileged
    helper) keeps its mode: the private directories around it still keep others out."""
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for name, mode in [(n, m.dir) for n in dirnames] + [(n, m.file) for n in filenames]:
            path = os.path.join(dirpath, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue  # a link (ELOOP), or gone
            try:
                _fix(fd, mode, m)
            except PermissionError as exc:
                log.warning("store.cannot_tighten", path=path, error=str(exc))
            finally:
                os.close(fd)


def check_root(root: Path) -> None:
    """Refuse to write into a root others may write to without the sticky bit: they could
    rename a user's lineage away and put their own in its place."""
    try:
        st = os.stat(root)  # the root itself is configuration: a link to it is fine
    except FileNotFoundError:
        return
    if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        raise errors.CheckpointError(
            f"the checkpoint store {root} is writable by everyone without the sticky bit "
            f"(mode {stat.S_IMODE(st.st_mode):04o}): another user could replace your "
            "checkpoints' directories",
            hint=f"chmod 1777 {root} (shared) or chmod 700 {root} (yours alone)",
            code="store-unsafe-root",
        )


def dir_owner(path: Path) -> int | None:
    """The uid owning directory ``path`` (lstat); None if absent; refuses anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise errors.UntrustedCheckpoint(
            f"{path} in the checkpoint store is {what}; clawpoint never follows it",
            hint=f"remove {path} (whoever planted it may be trying to redirect your "
            "checkpoints), or use another workload name",
            details={"path": str(path)},
        )
    return st.st_uid


def dir_gid(path: Path) -> int:
    return os.lstat(path).st_gid
