"""One-time approval codes: the secret they derive from, how they are derived, compared
and typed.

A request's code is ``HMAC(secret, approval id)`` written in ``CODE_ALPHABET`` (no letters
that read alike), so nothing stores it: the approval store keeps only ``digest`` of it and
derives it again to compare. ``normalize_code`` forgives what people type (case, spaces,
dashes). The secret is 32 random bytes in a 0600 file, created on first use.

Limits: the secret file protects the codes only from those who cannot read it; rotating it
invalidates every pending code.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from core import errors

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: easy to read and type


def derive(secret: bytes, approval_id: str, length: int) -> str:
    """The code of ``approval_id``: ``length`` characters of CODE_ALPHABET."""
    mac = hmac.new(secret, f"approval-code:{approval_id}".encode(), "sha256")
    number = int.from_bytes(mac.digest(), "big")
    chars = []
    for _ in range(length):
        number, index = divmod(number, len(CODE_ALPHABET))
        chars.append(CODE_ALPHABET[index])
    return "".join(chars)


def digest(approval_id: str, code: str) -> str:
    """What is compared (and what a store may keep) of a code, normalized first."""
    return hashlib.sha256(f"{approval_id}:{normalize_code(code)}".encode()).hexdigest()


def load_or_create_secret(path: Path) -> bytes:
    """The key codes are derived from: 32 random bytes in a 0600 file, created on first use."""
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    except ValueError as exc:
        raise errors.OperationFailed(
            f"the approval key {path} is corrupt", hint="delete it; pending codes become invalid"
        ) from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex())
    return key


def normalize_code(code: str) -> str:
    """A code as typed, without case, spaces or dashes."""
    return "".join(ch for ch in code.upper() if ch.isalnum())
