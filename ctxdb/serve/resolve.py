"""Resolve `conv:fi:` refs to file bytes, for the owning user only and only while the turn lives.

A ref resolves when (1) it parses as a `conv:fi:` ref naming a conversation and a turn with a safe
relative path (no `..`, no absolute path, no backslash), (2) the turn is a live (unexpired) turn of
the principal in the turns index, and (3) the file exists under that turn's storage directory
`<files root>/<tenant>/<app>/<user_id>/conv_<conversation_id>/turn_<turn_id>/<path>`.
Anything else is NotFound (another user's ref looks exactly like a missing one), except a
malformed or unsafe ref, which is a RefError. The storage root is a local directory or any URI
pyarrow.fs understands (s3://, gs://, abfs://, file://).
"""

from __future__ import annotations

import logging
import mimetypes
import posixpath
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.fs as pafs
from elasticsearch import Elasticsearch

from ctxdb.contract.identity import Principal
from ctxdb.contract.refs import RefError, parse_ref, qualify
from ctxdb.index.mappings import TURNS, alias_name
from ctxdb.index.routing import RoutingLookup
from ctxdb.search.materialize import fetch_turns
from ctxdb.search.models import NotFound
from ctxdb.search.service import elasticsearch_errors
from ctxdb.settings import Settings
from ctxdb.storage.conversation_files import turn_file_path
from ctxdb.storage.object_store import StorageOptions, absolute, filesystem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PulledFile:
    ref: str
    filename: str
    mime: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


def storage(
    root: str, storage_options: StorageOptions | None = None
) -> tuple[pafs.FileSystem, str]:
    """The filesystem and base path of the conversation file storage root (an `s3://` root is
    reached with Delta's storage options, as every other object-store access)."""
    fs, base = filesystem(absolute(root), storage_options)
    return fs, base.rstrip("/")


def safe_join(base: str, *parts: str) -> str:
    """Join relative parts under `base`; RefError if the result would leave `base`."""
    for part in parts:
        if part.startswith("/") or "\\" in part or ".." in part.split("/"):
            raise RefError(f"unsafe path segment {part!r}")
        if any(ord(char) < 0x20 for char in part):
            raise RefError("path has a control character (NUL, newline, ...)")
    joined = posixpath.normpath(posixpath.join(base, *parts))
    if not joined.startswith(base.rstrip("/") + "/"):
        raise RefError(f"path escapes the file storage root: {'/'.join(parts)!r}")
    return joined


def _read_file(fs: pafs.FileSystem, path: str, turn_dir: Path) -> bytes | None:
    """The bytes at `path`, None when it is not a file; a local symlink must stay in `turn_dir`."""
    if isinstance(fs, pafs.LocalFileSystem):
        if not Path(path).resolve().is_relative_to(turn_dir):
            raise RefError("ref resolves outside its turn directory")
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as stream:
        return stream.read()


class Resolver:
    """Pulls `conv:fi:` refs through the identity boundary."""

    def __init__(self, settings: Settings, client: Elasticsearch) -> None:
        self.settings = settings
        self.client = client
        self.turns_alias = alias_name(settings.elasticsearch.index_prefix, TURNS)
        self.routing = RoutingLookup(client)

    def pull(
        self, principal: Principal, ref: str, conversation_id: str | None = None
    ) -> PulledFile:
        """The bytes of `ref` (qualified with `conversation_id` when the ref has no owner)."""
        parsed = parse_ref(qualify(ref, conversation_id) if conversation_id else ref)
        if parsed.family != "fi":
            raise RefError(f"only conv:fi: refs carry bytes, got {ref!r}")
        if parsed.conversation_id is None or parsed.turn_id is None:
            raise RefError(
                f"ref {ref!r} must name its conversation and turn (conv_<id>.turn_<id>.)"
            )
        with elasticsearch_errors(self.settings.elasticsearch.url):
            docs = fetch_turns(
                self.client,
                self.turns_alias,
                principal,
                [(parsed.conversation_id, parsed.turn_id)],
                datetime.now(UTC),
                routing=self.routing.key(self.turns_alias, principal.user_id),
            )
        doc = docs.get((parsed.conversation_id, parsed.turn_id))
        if doc is None:
            raise NotFound(f"ref {ref!r} not found")
        fs, base = storage(self.settings.files, self.settings.object_store_options)
        turn_dir = turn_file_path(
            doc["tenant"], doc["app"], doc["user_id"], parsed.conversation_id, parsed.turn_id
        )
        path = safe_join(base, turn_dir, parsed.path)
        try:
            data = _read_file(fs, path, Path(base) / turn_dir)
        except (OSError, RuntimeError) as exc:  # name too long, symlink loop, unreadable
            log.info("ref %r not readable: %s", ref, exc)
            raise NotFound(f"ref {ref!r} not found") from exc
        if data is None:
            raise NotFound(f"ref {ref!r} not found")
        filename = posixpath.basename(parsed.path)
        mime = mimetypes.guess_type(filename)[0] or "application/octet-stream"
        return PulledFile(ref=str(parsed), filename=filename, mime=mime, data=data)
