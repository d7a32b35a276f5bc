"""Manifest authentication: an HMAC-SHA256 per user, keyed by a file outside the store.

Why: a digest kept next to the data it protects proves nothing against someone who can
write both. In a shared store another user could plant
a checkpoint, or patch one and recompute its digests and manifest. What they cannot do is
compute this MAC: its key is 32 random bytes in a file only its owner can read, kept out of
the store (default ``$CLAWPOINT_HOME/keys/store.key``; ``[store] key`` moves it).

What is sealed: the exact bytes of ``manifest.json`` (its checkpoint id, every file's size
and digest, and the owner's uid), after a fixed domain tag; the seal is a one-line sidecar,
``manifest.mac``: ``hmac-sha256 KEYID HEX``. KEYID (an HMAC of a constant under the key,
which says nothing about the key) tells "signed with another key" apart from "altered".

The key file is created on first use (0600, ``O_EXCL|O_NOFOLLOW``, linked into place so a
concurrent reader never sees it half-written) and refused when it is a symbolic link, not a
regular file, owned by another uid, readable or writable by group or others, or not 32 bytes.

Limits: the seal proves who wrote a manifest, not that it is the newest one (someone who can
write the lineage directory, i.e. its owner or root, can still remove checkpoints). Only the
key's holder can verify: the owner's own processes, and root, who can read any file. An
operator reading a store in group mode can check integrity (digests) but not authenticity,
so checkpoints it lists are ``unverified``; the wrapper that restores always runs as the
owner and always verifies. Losing the key makes every checkpoint it signed untrusted (they
are kept; re-take them, or re-seal the ones you know are yours with a new key).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from core import errors, logs

log = logs.get_logger(__name__)

KEY_BYTES = 32
ALGO = "hmac-sha256"
SEAL_FILE = "manifest.mac"
# Binds a MAC to its use: the same key never authenticates anything but a manifest.
_TAG = b"clawpoint checkpoint manifest v1\n"
_KEY_ID_TAG = b"clawpoint key id v1"


def _key_id(key: bytes) -> str:
    return hmac.new(key, _KEY_ID_TAG, hashlib.sha256).hexdigest()[:16]


def _mac(key: bytes, manifest: bytes) -> str:
    return hmac.new(key, _TAG + manifest, hashlib.sha256).hexdigest()


class StoreKey:
    """One user's manifest key at ``path``; read (or created) lazily, then kept in memory."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._key: bytes | None = None

    # -- the key file ---------------------------------------------------------------------

    def _refuse(self, problem: str, hint: str) -> errors.CheckpointError:
        return errors.CheckpointError(
            f"the store key {self.path} {problem}; checkpoints are neither signed nor "
            "verified with it",
            hint=hint,
            code="store-key-refused",
            details={"key": str(self.path)},
        )

    def _read(self) -> bytes | None:
        """The key, checked; None when there is no key file yet."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:  # ELOOP: a symbolic link; EACCES: not ours to read
            raise self._refuse(
                f"cannot be opened without following links: {exc.strerror}",
                hint=f"remove {self.path} if it is a link or not yours; a new key is created "
                "with the next checkpoint (checkpoints the old key signed become untrusted)",
            ) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self._refuse("is not a regular file", hint=f"remove {self.path}")
            if st.st_uid != os.geteuid():
                raise self._refuse(
                    f"belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})",
                    hint=f"remove {self.path} or point [store] key at a file of your own; "
                    "never use another user's key",
                )
            if st.st_mode & 0o077:
                raise self._refuse(
                    f"is accessible to group or others (mode {stat.S_IMODE(st.st_mode):04o})",
                    hint=f"chmod 600 {self.path}; if others may have read it, remove it and "
                    "re-take your checkpoints (anyone holding it can forge them)",
                )
            key = os.read(fd, KEY_BYTES + 1)
        finally:
            os.close(fd)
        if len(key) != KEY_BYTES:
            raise self._refuse(
                f"holds {len(key)} bytes, not {KEY_BYTES}: it is not a clawpoint store key",
                hint=f"remove {self.path} (a new key is created with the next checkpoint)",
            )
        return key

    def _create(self) -> None:
        """Write a new key next to ``path`` and link it into place: atomic, never replacing
        a key another process created meanwhile, never following a planted link."""
        keys_dir = self.path.parent
        keys_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(keys_dir, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(keys_dir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise self._refuse(
                f"would be created in {keys_dir}, which is not a directory of yours",
                hint="point [store] key at a path in a directory only you own",
            )
        if st.st_mode & 0o022:
            raise self._refuse(
                f"would be created in {keys_dir}, which others can write to "
                f"(mode {stat.S_IMODE(st.st_mode):04o})",
                hint=f"chmod 700 {keys_dir}",
            )
        tmp = keys_dir / f".{self.path.name}.{secrets.token_hex(8)}"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, self.path)
            log.info("store.key_created", key=str(self.path))
        except FileExistsError:
            pass  # another process created it first: use that one
        finally:
            os.unlink(tmp)
        dfd = os.open(keys_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def load(self, *, create: bool) -> bytes | None:
        """The key (created first when ``create`` and missing); None if missing otherwise."""
        if self._key is None:
            key = self._read()
            if key is None and create:
                try:
                    self._create()
                except OSError as exc:
                    raise self._refuse(
                        f"cannot be created: {exc}",
                        hint="make its directory writable by you, or set [store] key",
                    ) from exc
                key = self._read()
            self._key = key
        return self._key

    # -- seals ----------------------------------------------------------------------------

    def seal(self, manifest: bytes) -> bytes:
        """The sidecar for ``manifest`` (the key is created if this user has none yet)."""
        key = self.load(create=True)
        assert key is not None
        return f"{ALGO} {_key_id(key)} {_mac(key, manifest)}\n".encode()

    def check(self, manifest: bytes, sealed: bytes | None) -> str | None:
        """None when ``sealed`` authenticates ``manifest`` under this key; else the problem."""
        if sealed is None:
            return (
                f"the manifest is not signed (no {SEAL_FILE}): it was written before "
                "checkpoints were signed, or not by your clawpoint"
            )
        key = self.load(create=False)
        if key is None:
            return f"you have no store key at {self.path} to check its signature with"
        parts = sealed.decode("ascii", errors="replace").split()
        if len(parts) != 3 or parts[0] != ALGO:
            return f"its signature ({SEAL_FILE}) is malformed"
        if parts[1] != _key_id(key):
            return (
                f"it was signed with another key (key id {parts[1][:16]!r}; yours is "
                f"{_key_id(key)})"
            )
        if not hmac.compare_digest(parts[2], _mac(key, manifest)):
            return "the manifest was changed after it was signed"
        return None
