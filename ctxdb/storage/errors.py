"""Storage failures in one line: which table, what was being done, and the cause.

delta-rs reports a full or read-only disk as a long `DeltaError`/`OSError` chain ending in
`... (os error 28)`, and a table directory it cannot create (the first write under a read-only or
non-directory root) as `TableNotFoundError: Could not create local directory: ... Os { code: 13,
... }`; an object store whose connection breaks in the middle of a response as `OSError: Kernel
error -> Generic S3 error` with no operating-system code. `StorageError` keeps only the table,
its URI, the action and the cause, so the CLI and the job logs can show one line instead of a
traceback.
"""

from __future__ import annotations

import errno
import os
import re

_REASONS = {
    errno.ENOSPC: "disk full (no space left on device)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied (read-only directory?)",
    errno.EPERM: "operation not permitted",
    errno.ENOTDIR: "not a directory (a file is in the way)",
}
_OS_ERROR = re.compile(r"\(os error (\d+)\)|\bOs \{ code: (\d+)")
_OBJECT_STORE_ERROR = re.compile(r"\bGeneric [A-Za-z0-9]+ error\b")
_REQUEST = re.compile(
    r"Error performing [A-Z]+ (?P<endpoint>\w+://[^/\s]+)\S* in (?P<seconds>[\d.]+)s"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class StorageError(OSError):
    """A Delta table could not be written or read because of its storage (disk, permissions,
    the object store); `cause` replaces the errno's reason when given."""

    def __init__(
        self, table: str, uri: str, action: str, code: int, cause: str | None = None
    ) -> None:
        super().__init__(code, cause or reason(code))
        self.table = table
        self.uri = uri
        self.action = action
        self.code = code  # `errno` too, typed as optional by OSError
        self.cause = cause

    def __reduce__(self) -> tuple[type[StorageError], tuple[str, str, str, int, str | None]]:
        """Pickle by the constructor's arguments (a derivation worker raises it to its caller)."""
        return type(self), (self.table, self.uri, self.action, self.code, self.cause)

    def __str__(self) -> str:
        return f"cannot {self.action} table {self.table} at {self.uri}: {self.strerror}"


def reason(code: int) -> str:
    """A short cause for an errno."""
    return _REASONS.get(code) or os.strerror(code).lower()


def os_errno(exc: BaseException) -> int | None:
    """The operating-system error behind `exc` (an OSError, or delta-rs' `(os error N)` or
    `Os { code: N, ... }`)."""
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    found = _OS_ERROR.search(str(exc))
    return int(found.group(1) or found.group(2)) if found else None


def object_store_cause(exc: BaseException) -> str | None:
    """For an object store's failure that carries no operating-system code (delta-rs' `Generic
    S3 error` when a response breaks off or the endpoint does not answer), `object store error
    (...)` naming the endpoint, how long the request took and its innermost cause when the
    message gives them; else None."""
    text = _ANSI.sub("", str(exc))
    found = _OBJECT_STORE_ERROR.search(text)
    if found is None:
        return None
    request = _REQUEST.search(text)
    if request is None:
        return f"object store error ({found.group(0)})"
    causes = [line.split("↳", 1)[1].strip() for line in text.splitlines() if "↳" in line]
    innermost = f": {causes[-1]}" if causes else ""
    return (
        f"object store at {request['endpoint']} failed after {float(request['seconds']):.0f} s"
        f"{innermost} ({found.group(0)})"
    )
