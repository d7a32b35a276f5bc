"""The namespaces a CRIU payload lives in, and running CRIU inside them. Three modes:

- ``nsinit.py CMD...``: start CMD as the init of a new PID namespace and end the way it
  ended (the wrapper's payload starter, run as ``python -I -S nsinit.py``: a file with no
  clawpoint imports, so it starts in milliseconds).
- ``nsinit.py --init CMD...``: the same, but the namespace's init is a small process of
  ours that stays root and runs CMD as its child (``clawpoint run --init``): CRIU's parasite
  must open a /proc of the namespace in the tree's root task, which a root task that dropped
  its privileges cannot (see ``_serve_as_init``).
- ``nsinit.py [--init] --userns CMD...`` (root): the same in a user namespace of its own
  mapping every uid and gid to itself, with a mount namespace of its own (``clawpoint run
  --user-namespace``): CRIU, which joins it, may read the limits of its processes of other
  uids without CAP_SYS_RESOURCE over the host's (see the root user-namespace mode below).
- ``nsinit.py --join PID CMD...``: run CMD (``criu dump``) inside the user and mount
  namespaces of the payload PID.
- ``nsinit.py --new CMD...``: run CMD (``criu restore``) inside new user and mount namespaces
  (``--new-all``, root: mapping every id, for a restore of a ``--userns`` payload).

Privileged mode (``privileged()``: root with CAP_SYS_ADMIN) is what it always was: only a PID
namespace, and CRIU runs as root. Anyone else gets the **user-namespace mode**, which needs
no setuid binary, no file capability and no sudo, only a kernel that lets users create user
namespaces (``user.max_user_namespaces`` > 0; not blocked by an LSM):

- The payload starts in a new user namespace that maps the caller's uid and gid to
  themselves (nothing else is mapped), a new mount namespace (a copy of the host's, owned by
  that user namespace) and a new PID namespace. It runs as the user with one capability,
  CAP_SYS_ADMIN *in its own user namespace* (ambient, so it survives exec): CRIU's parasite,
  running inside the payload, mounts a private ``/proc`` of the payload's PID namespace with
  it (parasite.c ``get_proc_fd``: without it the dump fails "can't dump unprivileged task
  whose /proc doesn't belong to it"). That capability reaches nothing outside the
  namespaces the payload owns (kernel ``ns_capable`` rules), so the payload gains nothing
  over the host or other users.
- CRIU joins those user and mount namespaces (``--join``: ``setns``, allowed because the
  user owns them) and runs with every capability of that user namespace as ambient ones,
  with ``--unprivileged``. Having joined the payload's mount namespace it does not dump one
  (CRIU dumps a namespace only when the root task's differs from its own). Its fd 0 is
  reopened inside that mount namespace: a file opened before the unshare names a mount the
  namespace does not have ("Can't lookup mount=N for fd=0").
- A restore (``--new``) makes fresh user and mount namespaces the same way; CRIU recreates
  the PID namespace inside them (``clone3`` with ``set_tid`` is allowed by CAP_CHECKPOINT_RESTORE
  in the user namespace that owns the new PID namespace). CAP_SETUID and CAP_SETGID are left
  out of CRIU's set: with them CRIU first switches to uid 0, which is not mapped.

The **root user-namespace mode** (``--userns``, ``--new-all``) is the same with every id
mapped (a helper left in root's namespace writes the maps: from inside the new one no process
may map more than its own id) and the payload as uid 0 of its namespace, holding every
capability there and none over the host; CRIU keeps CAP_SETUID and CAP_SETGID there (uid 0
is mapped) to give restored processes their own uids back.

What this costs and what stops working, measured: docs/checkpointing.md ("Ordinary users",
"Our init and a user namespace of its own").
Because CRIU never holds a capability outside namespaces the user owns, an image the user
forged can only ever restore a process of that same user: no image is a path to root.

Limits: Linux only (unshare(2), setns(2), prctl(2)); the user-namespace mode needs
unprivileged user namespaces, and the payload's later ``setgroups`` calls fail (denied in a
namespace an ordinary user makes). The payload starts with only fds 0-2 (the caller's
``close_fds``); fd 0 is reopened on ``/dev/null``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_RAISE = 2
# os.CLONE_* need Python 3.12.
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CAP_SETGID = 6
_CAP_SETUID = 7
_CAP_SYS_ADMIN = 21
_CAP_SYS_RESOURCE = 24
_ALL_IDS = 4294967295  # every uid (gid) a map can name: 0 .. 2**32 - 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class NamespaceError(Exception):
    """A namespace step failed; the message names the call and the errno."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        raise NamespaceError(f"{what}: {os.strerror(ctypes.get_errno())}")


def effective_caps(pid: str = "self") -> int:
    """The effective capability mask of a process (0 when unreadable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def seccomp_mode(pid: str = "self") -> int:
    """The seccomp mode of a process (0 none, 1 strict, 2 filter; 0 when unreadable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Seccomp:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def privileged() -> bool:
    """Root with CAP_SYS_ADMIN: CRIU runs as root and the payload needs no user namespace.
    Everyone else (an ordinary user, or root in a container without CAP_SYS_ADMIN) uses the
    user-namespace mode. The one rule the payload starter and the CRIU engine both follow."""
    return os.geteuid() == 0 and bool(effective_caps() >> _CAP_SYS_ADMIN & 1)


def lacks_sys_resource() -> bool:
    """Root without CAP_SYS_RESOURCE (a container's default bounding set): CRIU, run as we
    are, cannot read the resource limits of a process whose ids are not ours (prlimit(2),
    kernel/sys.c ``check_prlimit_permission``) unless it lives in a user namespace we own."""
    return privileged() and not effective_caps() >> _CAP_SYS_RESOURCE & 1


def _map_self(uid: int, gid: int) -> None:
    """Map our uid and gid to themselves in the user namespace we just made (the one mapping
    an unprivileged process may write; setgroups must be denied first, user_namespaces(7))."""
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _keep_caps(caps: list[int]) -> None:
    """Make ``caps`` (held in the current user namespace) survive exec as ambient ones: a
    process that is not uid 0 in its namespace loses its capabilities at exec otherwise."""
    libc = _libc()
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(libc.capget(ctypes.byref(header), data), "capget")
    for word in data:
        word.inheritable = word.permitted
    _check(libc.capset(ctypes.byref(header), data), "capset")
    for cap in caps:
        _check(libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, cap, 0, 0), f"ambient cap {cap}")


def _all_caps_but(excluded: tuple[int, ...]) -> list[int]:
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    return [c for c in range(last + 1) if c not in excluded]


def _reopen_stdin() -> None:
    fd = os.open("/dev/null", os.O_RDONLY)
    if fd != 0:
        os.dup2(fd, 0)
        os.close(fd)


def _unshare_mapping_everyone(flags: int) -> None:
    """Unshare ``flags`` (a new user namespace among them) and map every uid and gid to
    itself. Root only: the maps are written by a child left in our user namespace, since a
    process inside the new one holds no capability over its parent, which mapping more than
    its own id takes (user_namespaces(7), "Defining user and group ID mappings")."""
    go_r, go_w = os.pipe()
    helper = os.fork()
    if helper == 0:
        os.close(go_w)
        code = 1
        if os.read(go_r, 1) == b"u":
            try:
                for name in ("uid_map", "gid_map"):
                    with open(f"/proc/{os.getppid()}/{name}", "w") as f:
                        f.write(f"0 0 {_ALL_IDS}")
                code = 0
            except OSError as exc:
                print(f"nsinit: cannot map the ids: {exc}", file=sys.stderr)
        os._exit(code)
    os.close(go_r)
    failed = 0 if _libc().unshare(flags) == 0 else ctypes.get_errno()
    os.write(go_w, b"x" if failed else b"u")
    os.close(go_w)
    _, status = os.waitpid(helper, 0)
    if failed:
        raise NamespaceError(f"unshare(user, mount, ...): {os.strerror(failed)}")
    if status != 0:
        raise NamespaceError("writing the user namespace's id maps failed")


def enter_new(*, pid_namespace: bool, everyone: bool = False) -> None:
    """Unshare user + mount (+ PID) namespaces owned by us and map our ids into them (with
    ``everyone``, root: every uid and gid, each to itself)."""
    uid, gid = os.geteuid(), os.getegid()
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | (_CLONE_NEWPID if pid_namespace else 0)
    if everyone:
        _unshare_mapping_everyone(flags)
    else:
        _check(_libc().unshare(flags), "unshare(user, mount" + (", pid)" if pid_namespace else ")"))
        _map_self(uid, gid)
    _reopen_stdin()


def own_user_namespace(pid: int) -> bool:
    """Whether ``pid`` lives in a user namespace other than ours (its payload's own)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
    except OSError:
        return False


def _maps_root() -> bool:
    """Whether uid 0 is mapped in our user namespace (a root-made one maps every id)."""
    with open("/proc/self/uid_map") as f:
        return any(line.split()[:1] == ["0"] for line in f)


def join(pid: int) -> None:
    """Enter the user and mount namespaces of ``pid`` (ours: we own its user namespace)."""
    fds = [os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY) for ns in ("user", "mnt")]
    try:
        _check(_libc().setns(fds[0], _CLONE_NEWUSER), f"setns(user namespace of {pid})")
        _check(_libc().setns(fds[1], _CLONE_NEWNS), f"setns(mount namespace of {pid})")
    finally:
        for fd in fds:
            os.close(fd)
    _reopen_stdin()


# What a person or the wrapper may ask of the program through the init (stop, reload, reopen
# logs): the init of a PID namespace ignores signals it has no handler for, so it passes
# these on to the program's process group.
_FORWARDED = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
    signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH,
)  # fmt: skip


def _serve_as_init(argv: list[str]) -> None:
    """Be the namespace's init: run CMD as a child in a process group of its own, pass the
    signals above on to that group, reap every orphan, and exit when CMD does, with its exit
    code (128+N when signal N ended it, as a shell says: the init of a PID namespace cannot
    end itself by a signal). Never returns.

    Why: CRIU's parasite opens a /proc of the PID namespace in the tree's root task, and
    mounts one when the task's /proc is the host's, which needs CAP_SYS_ADMIN there
    (criu/cr-dump.c asks only the root item, criu/pie/parasite.c ``get_proc_fd``). A program
    that drops its privileges as the root task (``setpriv --reuid``, ``gosu``) cannot; this
    init, root and never dropping anything, can, and the program's own processes may then
    run as any user. It costs one small process in every checkpoint (a few MiB).

    It runs in an interpreter exec'd inside the namespaces (``--be-init``), not in the
    starter's fork: in the user-namespace mode a fork keeps the starter's executable and
    libraries as files of the host's mount namespace, which CRIU, dumping from inside the
    payload's, cannot name ("Can't lookup mount ... path=/usr/bin/python3")."""
    me = os.getpid()
    program = 0

    def forward(signum: int, _frame: object) -> None:
        if os.getpid() == me and program:  # not the child between fork and exec
            try:
                os.killpg(program, signum)
            except ProcessLookupError:
                pass

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    # Named before the program starts: whoever sees the program sees its init by name.
    _libc().prctl(_PR_SET_NAME, b"clawpoint-init", 0, 0, 0)
    # Held back from the fork until the program's group exists: a signal in between would
    # find no group to go to (or ``program`` not yet known) and be lost, and the init of a
    # PID namespace ignores it by itself. Pending meanwhile, it is forwarded once unblocked.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    program = os.fork()
    if program == 0:
        try:
            for sig in _FORWARDED:
                signal.signal(sig, signal.SIG_DFL)
            os.setpgid(0, 0)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # an exec keeps the mask
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"nsinit: cannot run {argv[0]!r}: {exc}", file=sys.stderr)
        os._exit(127)
    try:
        os.setpgid(program, program)  # also here: whichever of the two runs first
    except OSError:
        pass  # it already exec'd (and set it) or ended
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(127)  # no child at all: cannot happen while the program lives
        if pid == program:
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else code)


def _start(argv: list[str], *, init: bool = False, userns: bool = False) -> int:
    libc = _libc()
    try:
        if privileged() and userns:  # root of its own user namespace, every id mapped
            enter_new(pid_namespace=True, everyone=True)
        elif privileged():
            _check(libc.unshare(_CLONE_NEWPID), "unshare(pid)")
        else:
            enter_new(pid_namespace=True)
            _keep_caps([_CAP_SYS_ADMIN])
    except (NamespaceError, OSError) as exc:
        print(f"nsinit: cannot create the payload's namespaces: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:  # the namespace's init
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            os.setsid()
            if init:  # a fresh interpreter: its files must be the namespace's (below)
                here = os.path.abspath(__file__)
                os.execv(sys.executable, [sys.executable, "-I", "-S", here, "--be-init", *argv])
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"nsinit: cannot run {argv[0]!r}: {exc}", file=sys.stderr)
        os._exit(127)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        return 128 + sig  # only if the signal did not end us (it should have)
    return os.waitstatus_to_exitcode(status)


def _exec_in(argv: list[str], *, join_pid: int | None, everyone: bool = False) -> int:
    try:
        if join_pid is None:
            enter_new(pid_namespace=False, everyone=everyone)
        else:
            join(join_pid)
        # Where uid 0 is mapped (root's namespaces) CRIU keeps every capability, the setuid
        # ones included, to give restored processes their own uids back.
        _keep_caps(_all_caps_but(() if _maps_root() else (_CAP_SETUID, _CAP_SETGID)))
        os.execvp(argv[0], argv)
    except (NamespaceError, OSError) as exc:
        print(f"nsinit: cannot run {argv[0]!r} in the payload's namespaces: {exc}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    if argv[:1] == ["--join"] and len(argv) > 2 and argv[1].isdigit():
        return _exec_in(argv[2:], join_pid=int(argv[1]))
    if argv[:1] in (["--new"], ["--new-all"]) and len(argv) > 1:
        return _exec_in(argv[1:], join_pid=None, everyone=argv[0] == "--new-all")
    if argv[:1] == ["--be-init"] and len(argv) > 1:
        _serve_as_init(argv[1:])
    flags = set()
    while argv[:1] in (["--init"], ["--userns"]):
        flags.add(argv.pop(0))
    if not argv or argv[0].startswith("--"):
        print(
            "usage: nsinit.py [--join PID | --new | --new-all | [--init] [--userns]] CMD [ARGS...]",
            file=sys.stderr,
        )
        return 2
    return _start(argv, init="--init" in flags, userns="--userns" in flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
