"""Landing keeps nothing of a wave's files once the wave is committed (issue 26: memory bounded at
10M events). The native scanner's rows are string views into the whole file's bytes; the ids and
owners a run keeps across waves (`EarlierWaves`) must not hold those bytes, or a 10M-event run
holds every file it read (10 GB measured before `storage.arrow.owned`)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import polars as pl
from conftest_components import NATIVE, skip_missing
from test_events import line

from ctxdb.landing import scan
from ctxdb.landing.waves import EarlierWaves
from ctxdb.storage.arrow import owned


def _native_frame(rows: int) -> tuple[pl.DataFrame, weakref.ref]:
    """Rows scanned by the native scanner, as landing builds them, over file bytes held by a
    numpy array (which, unlike bytes, can be watched with a weak reference)."""
    if scan._native is None:
        skip_missing(NATIVE)
    data = "\n".join(
        line(event_id=f"evt-{n:08d}", conversation_id=f"conv-{n % 7}", payload={"text": "x" * 300})
        for n in range(rows)
    ).encode()
    found = scan._native.scan_events(data, 1 << 20, 1)
    held = np.frombuffer(data, dtype=np.uint8).copy()
    return scan._scanned_frame(held, found), weakref.ref(held)


def test_a_selected_column_still_holds_the_file_bytes() -> None:
    """The hazard itself: select keeps the views, so the file's bytes stay alive."""
    frame, watched = _native_frame(200)
    ids = frame.select("event_id")
    del frame
    gc.collect()
    assert watched() is not None
    assert ids.height == 200


def test_owned_frames_hold_their_own_strings() -> None:
    frame, watched = _native_frame(200)
    ids = owned(frame.select("event_id", "conversation_id"))
    expected = frame.select("event_id", "conversation_id")
    assert ids.equals(expected)
    del frame, expected
    gc.collect()
    assert watched() is None
    assert ids["event_id"][0] == "evt-00000000"


def test_earlier_waves_release_the_files_of_committed_waves() -> None:
    frame, watched = _native_frame(300)
    earlier = EarlierWaves()
    earlier.add(frame)
    earlier.add(frame.head(0))  # the next wave: `latest` no longer holds the first one
    del frame
    gc.collect()
    assert watched() is None
    assert earlier.contains(pl.Series(["evt-00000007", "evt-99999999"])).to_list() == [True, False]
    assert earlier.owners["conversation_id"].sort().to_list() == [f"conv-{n}" for n in range(7)]
