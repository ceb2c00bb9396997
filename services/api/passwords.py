"""Account passwords: argon2id (RFC 9106) through argon2-cffi, with its default parameters (t=3, m=64 MiB, p=4:
RFC 9106's second recommended profile). Hashing is memory-hard by design, so it runs off the event loop, at most
CONCURRENCY at a time per process (the memory one process spends on it is bounded: CONCURRENCY x 64 MiB).

A login for an account that has no password, or does not exist, verifies against a fixed hash all the same: the
answer takes as long as for a wrong password, so its timing does not tell which accounts exist (docs/adr/0141).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Final

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

MIN_CHARS: Final = 8      # Mastodon's minimum
MAX_CHARS: Final = 256    # argon2 takes any length; bounded so a request cannot make hashing costlier
CONCURRENCY: Final = 2    # hashes at once per process, each 64 MiB

_HASHER: Final = PasswordHasher()
_DUMMY: Final = _HASHER.hash("walfeed: no account has this password")
_SLOTS: Final = threading.BoundedSemaphore(CONCURRENCY)  # taken in the worker thread: the loop never waits on it


def problem(password: str) -> str | None:
    """Why `password` cannot be set (None when it can). Pure."""
    if not MIN_CHARS <= len(password) <= MAX_CHARS:
        return f"a password has {MIN_CHARS} to {MAX_CHARS} characters"
    if "\x00" in password:
        return "a password must not contain NUL characters"
    try:
        password.encode("utf-8")
    except UnicodeEncodeError:
        return "a password must be valid Unicode (no lone surrogates)"
    return None


def hash_now(password: str) -> str:
    with _SLOTS:
        return _HASHER.hash(password)


def verify_now(stored: str | None, password: str) -> bool:
    """Whether `password` is the one `stored` hashes; a missing or unreadable hash costs a verification too."""
    with _SLOTS:
        try:
            return _HASHER.verify(stored or _DUMMY, password) and stored is not None
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(hash_now, password)


async def verify(stored: str | None, password: str) -> bool:
    return await asyncio.to_thread(verify_now, stored, password)
