"""Publishing spool files to an object-store landing (s3://, gs://, az://, file://).

A sealed spool file is copied to the same relative path under the landing prefix, but in the
date partition of the upload's day (`ctxdb.landing.partitions.moved`: a file uploaded late, after
an outage, goes where a landing from the cursor on lists it), then removed locally. An object
store makes an object visible only once it is whole; on a local file system (`file://`) the copy
is written as `*.part` and renamed, so landing never reads half a file. A failed upload leaves
the sealed file in the spool, and the next publish (or the next start) uploads it again.
"""

from __future__ import annotations

import contextlib
from pathlib import Path, PurePosixPath

import pyarrow.fs as pafs

from ctxdb.capture.spool import Publisher
from ctxdb.landing import partitions
from ctxdb.storage.object_store import StorageOptions, filesystem


def uploader(root: Path, uri: str, storage_options: StorageOptions | None = None) -> Publisher:
    """A publisher copying files under the spool `root` to the same paths under `uri` (an
    object store reached with `storage_options`, Delta's)."""
    fs, base = filesystem(uri, storage_options)
    local = isinstance(fs, pafs.LocalFileSystem)

    def publish(sealed: Path) -> None:
        relative = partitions.moved(PurePosixPath(sealed.relative_to(root).as_posix()))
        target = f"{base.rstrip('/')}/{relative}"
        fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        try:
            data = sealed.read_bytes()
        except FileNotFoundError:  # uploaded meanwhile by another writer of this spool
            return
        written = f"{target}.part" if local else target
        with fs.open_output_stream(written) as out:
            out.write(data)
        if local:
            fs.move(written, target)
        with contextlib.suppress(FileNotFoundError):
            sealed.unlink()

    return publish
