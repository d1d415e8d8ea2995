"""Where conversation files live: the per-owner layout under the conversation-storage root."""

from __future__ import annotations

import polars as pl

TURN_KEY = ("tenant", "app", "user_id", "conversation_id", "turn_id")


def turn_file_path(tenant: str, app: str, user_id: str, conversation_id: str, turn_id: str) -> str:
    """Where a turn's hosted files and attachments live under the conversation-storage root.

    Mirrors the ref grammar (`conv:fi:conv_<conversation_id>.turn_<turn_id>.files/...`) inside the
    owner's namespace: `<tenant>/<app>/<user_id>/conv_<conversation_id>/turn_<turn_id>/`.
    """
    return f"{tenant}/{app}/{user_id}/conv_{conversation_id}/turn_{turn_id}"


def conversation_file_path(tenant: str, app: str, user_id: str, conversation_id: str) -> str:
    """The directory holding every turn's files of one conversation."""
    return f"{tenant}/{app}/{user_id}/conv_{conversation_id}"


def turn_file_paths(turns: pl.DataFrame) -> list[str]:
    """Storage paths of the given turns (rows need every TURN_KEY column)."""
    if turns.is_empty() or not set(TURN_KEY) <= set(turns.columns):
        return []
    return [turn_file_path(*row) for row in turns.select(TURN_KEY).unique().iter_rows()]
