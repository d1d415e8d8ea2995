"""`session` role rows: one searchable row per conversation (and owner) that sums it up.

A question about a conversation as a whole ("what did I decide about the venue?") can match the
conversation before it matches any one turn: a turn's own text is often a short reply whose topic
sits in the turns around it. The session row is built from the conversation's user rows, no
model involved: the conversation's title, then every user message in turn order, each cut so the
whole stays within `SESSION_TEXT_CHARS` (about the embedding model's 256-token window).

It is a role row like the others (role and target `session`), so it is embedded, indexed and
erased by the same stages. It belongs to the conversation's last user row: that row's identity,
turn, time and path. Its `expires_at` is the latest `expires_at` of the rows it sums up, so it
lives exactly as long as the newest of them; rows of different owners of one conversation never
share a session row. The search arms never return it as a hit (its target is not a search
target): `ctxdb.search.sessions` uses it to lift, and bring in, the turns of its conversation.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
import polars_hash as plh

from ctxdb.record.frames import frame
from ctxdb.record.role_rows import OWNER, row_id_expr
from ctxdb.storage.tables import ROLE_ROWS_SCHEMA

SESSION = "session"
"""Role and target of a session row."""
SESSION_TEXT_CHARS = 1_000
"""Longest session text: about the 256 tokens the embedding model reads."""
MIN_MESSAGE_CHARS = 80
"""Each message keeps at least this many characters (a long conversation fills the budget with
its first messages rather than with fragments of every one)."""
_MESSAGE = r"^\[user\.message\]\n((?s:.*?))(?:\n\[(?:context|attachment)\.\d+\] |\z)"
"""The typed message of a rendered submission (`role_rows.render_submission`)."""


def session_rows_frame(rows: pl.DataFrame, titles: Mapping[str, str] | None = None) -> pl.DataFrame:
    """One `session` row per (owner, conversation) holding user rows in `rows` (ROLE_ROWS_SCHEMA
    rows of whole conversations, as derivation produces them)."""
    users = rows.filter(pl.col("target") == "user").with_columns(
        pl.col("text").str.extract(_MESSAGE, 1).fill_null("").str.strip_chars().alias("message")
    )
    users = users.filter(pl.col("message") != "(no typed message)")
    if users.is_empty():
        return rows.clear()
    title = pl.col("conversation_id").replace_strict(
        dict(titles or {}), default="", return_dtype=pl.String
    )
    share = (SESSION_TEXT_CHARS // pl.len().over(OWNER)).clip(lower_bound=MIN_MESSAGE_CHARS)
    last = pl.col("ts").arg_max()
    sessions = (
        users.sort([*OWNER, "ts", "turn_id", "ordinal"])
        .with_columns(
            pl.col("message").str.slice(0, share).str.replace_all(r"\s+", " "),
            title.alias("title"),
        )
        .group_by(OWNER, maintain_order=True)
        .agg(
            pl.col("title").first(),
            pl.col("message").str.join("\n").alias("body"),
            *(
                pl.col(c).get(last)
                for c in ("turn_id", "ts", "path", "ref", "derived_at", "project")
            ),
            pl.col("expires_at").max(),
        )
    )
    titled = (pl.col("title") != "") & ~pl.col("body").str.starts_with(pl.col("title"))
    text = (
        pl.when(titled)
        .then(pl.concat_str("title", pl.lit("\n"), "body"))
        .otherwise("body")
        .str.slice(0, SESSION_TEXT_CHARS)
    )
    data = sessions.with_columns(
        text.alias("text"),
        pl.lit(SESSION).alias("role"),
        pl.lit(SESSION).alias("target"),
        pl.concat_list(
            pl.lit("kind:conversation.session"), pl.lit("turn:") + pl.col("turn_id")
        ).alias("tags"),
        pl.lit(None, pl.String).alias("event_type"),
        pl.lit(None, pl.String).alias("batch_id"),
        pl.lit("").alias("anchors_text"),
        pl.lit("").alias("trigrams"),
        pl.lit(0, pl.Int32).alias("ordinal"),
        pl.lit("public").alias("visibility"),
        pl.lit("").alias("context"),
    ).with_columns(
        plh.col("text").chash.sha2_256().alias("text_hash"),
        row_id_expr(),
    )
    return frame(data, ROLE_ROWS_SCHEMA)


def with_session_rows(rows: pl.DataFrame, titles: Mapping[str, str] | None = None) -> pl.DataFrame:
    """`rows` and their conversations' session rows."""
    return pl.concat([rows, session_rows_frame(rows, titles)], how="vertical_relaxed")
