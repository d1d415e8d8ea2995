"""The recorder SDK: a host records its turns as contract events (docs/capture.md).

    rec = Recorder.from_settings(settings, tenant="acme", app="chat", agent="helper")
    with rec.turn(user_id="u1", conversation_id="c1") as turn:
        turn.submission("why does my upload fail?")
        turn.step("s1", tool="search", title="Looking up the error")
        turn.completion("The proxy cuts bodies over 1 MiB ...")
    rec.close()

Each method builds one event of the contract (`ctxdb.contract.events`), removes
`<private>...</private>` spans from its texts, cuts over-long texts to the contract's limits
(marked ` [truncated]`) and validates it in the host's process: an event the contract refuses is
a host bug, raised as `InvalidEventError` (or logged, `CTXDB_CAPTURE_INVALID=log`). Valid lines go
to a bounded queue that a background thread writes to the spool (`ctxdb.capture.writer`,
`ctxdb.capture.spool`): the host never waits on I/O, a full queue drops the event (counted and
logged), and a failed write is logged and retried, never raised into the host unless
`io_errors="raise"`. An exception inside `with rec.turn(...)` closes the turn with
`status: error` (`cancelled` for `KeyboardInterrupt`, `asyncio.CancelledError`...).

Every method takes an optional `event_id` and `occurred_at`, so an importer can derive stable ids
(a replay then lands nothing new) and keep the original times.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from pydantic import BaseModel

from ctxdb.capture.spool import Spool, TurnKey
from ctxdb.capture.upload import uploader
from ctxdb.capture.writer import Line, Writer
from ctxdb.contract import events as contract
from ctxdb.contract.events import MAX_EVENT_BYTES, SCHEMA_VERSION, EventError, parse_event
from ctxdb.contract.private import strip_private, strip_private_all
from ctxdb.contract.refs import make_ref
from ctxdb.settings import Settings

log = logging.getLogger(__name__)

TRUNCATED = " [truncated]"
When = datetime | str | None
"""An event time: an aware datetime, an ISO-8601 string with a zone, or None for now."""


class CaptureError(Exception):
    """Base of the errors the recorder raises into its host."""


class InvalidEventError(CaptureError, ValueError):
    """An event the contract refuses (a host bug); `reason` is the quarantine reason landing
    would give it."""

    def __init__(self, event_type: str, error: EventError) -> None:
        super().__init__(f"{event_type} refused: {error}")
        self.reason = error.reason
        self.detail = error.detail


class CaptureIOError(CaptureError, OSError):
    """The spool cannot be written (raised only with `io_errors="raise"`)."""


def _max_length(model: type[BaseModel], name: str) -> int:
    """The contract's `max_length` of a text field."""
    for item in model.model_fields[name].metadata:
        limit = getattr(item, "max_length", None)
        if limit is not None:
            return int(limit)
    raise LookupError(f"{model.__name__}.{name} has no max_length")


LIMITS = {
    "user.submission": ("text", _max_length(contract.UserSubmission, "text")),
    "user.attachment": (
        "extracted_text",
        _max_length(contract.AttachmentUploaded, "extracted_text"),
    ),
    "assistant.completion": ("text", _max_length(contract.AssistantCompletion, "text")),
    "react.summary": ("text", _max_length(contract.WorkingSummary, "text")),
    "react.note": ("text", _max_length(contract.InternalNote, "text")),
    "react.block": ("text", _max_length(contract.RichBlock, "text")),
}
"""Per event type, the long text that is cut to fit (its own limit, then the line's)."""


def cut(text: str, limit: int) -> str:
    """`text`, or its head marked ` [truncated]` when longer than `limit` characters."""
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def new_id() -> str:
    """A fresh random id (32 hex digits), valid as an event, turn or conversation id."""
    return uuid.uuid4().hex


def derived_id(*parts: str) -> str:
    """A stable id from `parts` (40 hex digits): the same parts give the same id."""
    return hashlib.sha1("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def iso(when: When) -> str:
    """The ISO-8601 text of an event time (now when None)."""
    if when is None:
        return datetime.now(UTC).isoformat()
    return when.isoformat() if isinstance(when, datetime) else when


def _payload(**fields: Any) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def excluded(project: Path, folders: Sequence[str]) -> bool:
    """True when `project` is one of `folders` or below one of them."""
    here = project.expanduser().resolve()
    for folder in folders:
        base = Path(folder).expanduser().resolve()
        if here == base or base in here.parents:
            return True
    return False


@dataclass(frozen=True)
class RecorderStats:
    """What a recorder did so far: events written to the spool, dropped (queue full or spool
    failing), refused by the contract, failed writes, files published, and turns of dead writers
    it closed as cancelled when it started."""

    written: int
    dropped: int
    invalid: int
    io_errors: int
    published: int
    recovered_turns: int


class Recorder:
    """Records a host's turns into the landing location (see the module docstring).

    `landing` is a local folder or an object-store URI (events then spool under `spool_dir` and
    each published file is uploaded, with `storage_options`: Delta's, as `from_settings` gives
    them). `enabled=False` makes every call a no-op.
    """

    def __init__(
        self,
        landing: str | Path,
        *,
        tenant: str,
        app: str,
        agent: str,
        adapter: contract.Adapter = "minimal",
        enabled: bool = True,
        invalid: Literal["raise", "log"] = "raise",
        io_errors: Literal["log", "raise"] = "log",
        queue_size: int = 10_000,
        rotate_bytes: int = 8 * 1024 * 1024,
        rotate_age_s: float = 60.0,
        spool_dir: str | Path | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self.identity = {"tenant": tenant, "app": app, "agent": agent, "adapter": adapter}
        self.enabled = enabled
        self.invalid = invalid
        self.io_errors = io_errors
        self._refused = 0
        self._open: dict[TurnKey, Turn] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._stopped = False
        self._writer: Writer | None = None
        if not enabled:
            return
        landing = str(landing)
        if "://" in landing:
            if spool_dir is None:
                raise ValueError("a recorder landing in an object store needs a local spool_dir")
            root = Path(spool_dir)
            publish = uploader(root, f"{landing.rstrip('/')}/capture", storage_options)
        else:
            root, publish = Path(landing) / "capture", None
        spool = Spool(root / adapter / app / agent, rotate_bytes, rotate_age_s, publish)
        self._writer = Writer(spool, root, queue_size, publish)
        self._writer.start()
        atexit.register(self.close)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        tenant: str,
        app: str,
        agent: str,
        adapter: contract.Adapter = "minimal",
        project: str | Path | None = None,
    ) -> Recorder:
        """A recorder configured by `settings.capture`, landing in `settings.landing_uri`;
        disabled when capture is off or `project` (default: the working directory) is excluded."""
        capture = settings.capture
        here = Path(project) if project is not None else Path(os.getcwd())
        return cls(
            settings.landing_uri,
            tenant=tenant,
            app=app,
            agent=agent,
            adapter=adapter,
            enabled=capture.enabled and not excluded(here, capture.exclude),
            invalid=capture.invalid,
            io_errors=capture.io_errors,
            spool_dir=settings.spool_dir,
            storage_options=settings.object_store_options,
        )

    def turn(
        self,
        user_id: str,
        conversation_id: str,
        turn_id: str | None = None,
        occurred_at: When = None,
        event_id: str | None = None,
    ) -> Turn:
        """Open a turn (writes `turn.started`); use it as a context manager, or call `close`."""
        return Turn(self, user_id, conversation_id, turn_id or new_id(), occurred_at, event_id)

    @property
    def stats(self) -> RecorderStats:
        writer = self._writer.stats if self._writer is not None else None
        recovered = writer.recovered if writer is not None else None
        return RecorderStats(
            written=writer.written if writer else 0,
            dropped=writer.dropped if writer else 0,
            invalid=self._refused,
            io_errors=writer.io_errors if writer else 0,
            published=writer.published if writer else 0,
            recovered_turns=len(recovered.cancelled) if recovered else 0,
        )

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every event recorded so far is written to the spool (fsync'd); False on
        timeout or a failing spool (`CaptureIOError` with `io_errors="raise"`)."""
        if self._writer is None:
            return True
        ok = self._writer.flush(timeout)
        if not ok:
            self._check_io(always=True)
        return ok

    def close(self, timeout: float | None = 10.0) -> None:
        """Close turns still open as cancelled, write everything, publish the spool file."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            still_open = list(self._open.values())
        for turn in still_open:
            turn.close("cancelled", error_type="recorder_closed")
        self._stopped = True
        if self._writer is not None:
            if not self._writer.stop(timeout):
                log.error("capture: the writer did not finish within %s s", timeout)
            atexit.unregister(self.close)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_io(self, always: bool = False) -> None:
        writer = self._writer
        if self.io_errors == "raise" and writer is not None:
            if writer.error is not None:
                raise CaptureIOError(f"capture spool not writable: {writer.error}")
            if always:
                raise CaptureIOError("capture spool did not confirm the write in time")

    def _refuse(self, event_type: str, error: EventError) -> None:
        self._refused += 1
        if self.invalid == "raise":
            raise InvalidEventError(event_type, error)
        log.warning("capture: %s refused: %s", event_type, error)

    def _put(self, line: Line) -> None:
        assert self._writer is not None
        self._writer.put(line)

    def _opened(self, turn: Turn) -> None:
        with self._lock:
            self._open[turn.key] = turn

    def _forget(self, turn: Turn) -> None:
        with self._lock:
            self._open.pop(turn.key, None)


class Turn:
    """One open turn: each method writes one event (two for several notes) of this turn.

    Methods return the event id written (None when the event was refused or capture is off),
    except `attachment` and `hosted_file`, which return the file's `conv:fi:` ref.
    """

    def __init__(
        self,
        recorder: Recorder,
        user_id: str,
        conversation_id: str,
        turn_id: str,
        occurred_at: When,
        event_id: str | None,
    ) -> None:
        self.recorder = recorder
        self.user_id = user_id
        self.conversation_id = conversation_id
        self.turn_id = turn_id
        self.closed = False
        self.status: str | None = None
        self._base = {
            **recorder.identity,
            "user_id": user_id,
            "conversation_id": conversation_id,
            "turn_id": turn_id,
        }
        self._emit("turn.started", {}, event_id, occurred_at, opens=True)
        recorder._opened(self)

    @property
    def key(self) -> TurnKey:
        return (self.conversation_id, self.turn_id)

    def submission(
        self,
        text: str,
        event_type: Literal["prompt", "followup", "steer"] = "prompt",
        *,
        batch_id: str | None = None,
        arrived_at: When = None,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> str | None:
        """One folded user message (`user.submission`)."""
        payload = _payload(
            text=strip_private(text),
            event_type=event_type,
            batch_id=batch_id,
            arrived_at=None if arrived_at is None else iso(arrived_at),
        )
        return self._emit("user.submission", payload, event_id, occurred_at)

    def context(
        self,
        kind: str,
        label: str = "",
        *,
        ref: str | None = None,
        source: str | None = None,
        batch_id: str | None = None,
        event: dict[str, Any] | None = None,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> str | None:
        """A user context item folded into the turn (`user.context`: selection, page...)."""
        payload = _payload(
            kind=kind,
            label=strip_private(label),
            ref=ref,
            source=source,
            batch_id=batch_id,
            event=strip_private_all(event),
        )
        return self._emit("user.context", payload, event_id, occurred_at)

    def attachment(
        self,
        name: str,
        mime: str,
        size: int,
        *,
        storage_ref: str | None = None,
        extracted_text: str | None = None,
        batch_id: str | None = None,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> str:
        """An uploaded file (`user.attachment`); returns its storage ref (by default
        `conv:fi:conv_<c>.turn_<t>.user.attachments/<name>`)."""
        if storage_ref is None:
            storage_ref = self._ref(f"user.attachments/{name}")
        payload = _payload(
            name=name,
            mime=mime,
            size=size,
            storage_ref=storage_ref,
            extracted_text=strip_private_all(extracted_text),
            batch_id=batch_id,
        )
        self._emit("user.attachment", payload, event_id, occurred_at)
        return storage_ref

    def step(
        self,
        step: str,
        phase: Literal["start", "complete", "error"] = "complete",
        *,
        tool: str | None = None,
        status: str | None = None,
        title: str | None = None,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> str | None:
        """A progress step of the agent (`chat.step`)."""
        payload = _payload(
            step=step,
            phase=phase,
            tool=tool,
            status=strip_private_all(status),
            title=strip_private_all(title),
        )
        return self._emit("chat.step", payload, event_id, occurred_at)

    def hosted_file(
        self,
        path: str,
        mime: str,
        size: int | None = None,
        sha256: str | None = None,
        *,
        data: bytes | None = None,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> str:
        """A file the host published under the turn's `files/` area (`file.hosted`); `data`
        gives size and sha256 when they are not passed. Returns its durable ref
        `conv:fi:conv_<c>.turn_<t>.files/<path>`."""
        if data is not None:
            size = len(data) if size is None else size
            sha256 = hashlib.sha256(data).hexdigest() if sha256 is None else sha256
        payload = _payload(path=path, mime=mime, size=size, sha256=sha256)
        self._emit("file.hosted", payload, event_id, occurred_at)
        return self._ref(f"files/{path}")

    def completion(
        self,
        text: str,
        *,
        error: bool = False,
        error_type: str | None = None,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        model: str | None = None,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> str | None:
        """The final answer (`assistant.completion`), or an error answer (`error=True`), with
        the tokens it used and the `model` that wrote it when known."""
        payload = _payload(
            text=strip_private(text),
            error=error,
            error_type=error_type,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            model=model,
        )
        return self._emit("assistant.completion", payload, event_id, occurred_at)

    def summary(
        self,
        text: str,
        refs: Iterable[str] = (),
        scope: str = "turn",
        *,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> str | None:
        """The agent's working summary (`react.summary`, makes the turn rich)."""
        payload = {"text": strip_private(text), "refs": list(refs), "scope": scope}
        return self._emit("react.summary", payload, event_id, occurred_at)

    def anchors(
        self,
        phrases: Iterable[str] = (),
        entities: Iterable[str] = (),
        *,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> str | None:
        """Retrieval anchors: key phrases and entities (`react.anchors`); empty ones are left
        out."""
        payload = {
            "phrases": [p for p in (strip_private(x).strip() for x in phrases) if p],
            "entities": [e for e in (strip_private(x).strip() for x in entities) if e],
        }
        return self._emit("react.anchors", payload, event_id, occurred_at)

    def notes(
        self,
        texts: str | Iterable[str],
        *,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> list[str]:
        """Internal notes (`react.note`, one event each; searched only on request). With several
        notes, an explicit `event_id` becomes `<event_id>-<n>`. Returns the ids written."""
        items = [texts] if isinstance(texts, str) else list(texts)
        written = []
        for n, text in enumerate(items):
            clean = strip_private(text).strip()
            if not clean:
                continue
            note_id = event_id if event_id is None or len(items) == 1 else f"{event_id}-{n}"
            written.append(self._emit("react.note", {"text": clean}, note_id, occurred_at))
        return [w for w in written if w is not None]

    def block(
        self,
        block_type: Literal[
            "react.tool.call", "react.tool.result", "react.thinking", "stage.suggested_followups"
        ],
        text: str = "",
        *,
        call_id: str | None = None,
        tool: str | None = None,
        meta: dict[str, Any] | None = None,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> str | None:
        """A rich ReAct block (`react.block`): a tool call or result, thinking, follow-ups."""
        payload = _payload(
            block_type=block_type,
            call_id=call_id,
            tool=tool,
            text=strip_private(text),
            meta=strip_private_all(meta),
        )
        return self._emit("react.block", payload, event_id, occurred_at)

    def title(
        self, title: str, *, event_id: str | None = None, occurred_at: When = None
    ) -> str | None:
        """The conversation's title (`conversation.title`; the latest wins)."""
        return self._emit(
            "conversation.title", {"title": strip_private(title)}, event_id, occurred_at
        )

    def close(
        self,
        status: Literal["ok", "error", "cancelled"] = "ok",
        error_type: str | None = None,
        *,
        event_id: str | None = None,
        occurred_at: When = None,
    ) -> str | None:
        """Close the turn (`turn.closed`); a second close does nothing."""
        if self.closed:
            return None
        payload = _payload(status=status, error_type=error_type[:256] if error_type else None)
        self.closed = True
        self.status = status
        self.recorder._forget(self)
        return self._emit("turn.closed", payload, event_id, occurred_at, closes=True)

    def __enter__(self) -> Turn:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        elif issubclass(exc_type, Exception):
            self.close("error", error_type=exc_type.__name__)
        else:
            self.close("cancelled", error_type=exc_type.__name__)

    async def __aenter__(self) -> Turn:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def _ref(self, path: str) -> str:
        return make_ref("fi", path, self.turn_id, self.conversation_id)

    def _emit(
        self,
        event_type: str,
        payload: dict[str, Any],
        event_id: str | None,
        occurred_at: When,
        opens: bool = False,
        closes: bool = False,
    ) -> str | None:
        """Validate one event and queue its line; the event id, or None when refused."""
        recorder = self.recorder
        if not recorder.enabled:
            return None
        recorder._check_io()
        if recorder._stopped or (self.closed and not closes):
            closed = "the recorder" if recorder._stopped else f"turn {self.turn_id}"
            recorder._refuse(event_type, EventError("invalid_field", f"{closed} is already closed"))
            return None
        limit = LIMITS.get(event_type)
        if limit is not None and isinstance(payload.get(limit[0]), str):
            payload[limit[0]] = cut(payload[limit[0]], limit[1])
        event_id = event_id or new_id()
        when = iso(occurred_at)
        event = {
            "event_id": event_id,
            "schema_version": SCHEMA_VERSION,
            "type": event_type,
            "occurred_at": when,
            **self._base,
            "payload": payload,
        }
        try:
            line = _encode(event, limit[0] if limit else None)
            parse_event(line)
        except EventError as exc:
            recorder._refuse(event_type, exc)
            return None
        except (TypeError, ValueError) as exc:
            recorder._refuse(event_type, EventError("wrong_type", str(exc)))
            return None
        opened = {**self._base, "at": when} if opens else None
        recorder._put(Line(line + b"\n", opened, self.key if closes else None))
        return event_id


def _encode(event: dict[str, Any], text_key: str | None) -> bytes:
    """The event's JSON line (UTF-8), its `payload[text_key]` cut until the line fits
    `MAX_EVENT_BYTES`."""
    line = json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    while len(line) > MAX_EVENT_BYTES and text_key is not None:
        text = event["payload"][text_key]
        keep = max(0, int(len(text) * (MAX_EVENT_BYTES - 1024) / len(line)) - len(TRUNCATED))
        if keep == 0 or len(text) <= len(TRUNCATED):
            break
        event["payload"][text_key] = text[:keep] + TRUNCATED
        line = json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return line
