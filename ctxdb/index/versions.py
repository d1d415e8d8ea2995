"""Versioned indices behind aliases: `<prefix>-<kind>-v<N>`, read and written via `<prefix>-<kind>`.

The alias always points at exactly one index (with `is_write_index`). A reload builds the next
version and swaps every alias in one `_aliases` call, so reads never see zero or two indices.
Retired versions are deleted once their grace period has passed; versions above the live one that
no alias points at are abandoned builds and are deleted before the next build.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from elasticsearch import BadRequestError, Elasticsearch, NotFoundError

from ctxdb.elastic.replicas import apply_replicas
from ctxdb.index.mappings import (
    ROWS,
    TURNS,
    alias_name,
    index_body,
    index_name,
)
from ctxdb.index.routing import DEFAULT_LAYOUT, USER, index_layout, layout_mismatches
from ctxdb.storage.faults import reached

log = logging.getLogger(__name__)

KINDS = (ROWS, TURNS)


@dataclass(frozen=True)
class Swap:
    """Move `alias` from `old` (None on first creation) to `new`."""

    alias: str
    old: str | None
    new: str


def alias_target(es: Elasticsearch, alias: str) -> str | None:
    """The one concrete index behind `alias`, or None when the alias does not exist."""
    try:
        targets = sorted(es.indices.get_alias(name=alias).body)
    except NotFoundError:
        return None
    if len(targets) != 1:
        raise RuntimeError(f"alias {alias} points at {len(targets)} indices: {targets}")
    return targets[0]


def versions(es: Elasticsearch, prefix: str, kind: str) -> dict[int, str]:
    """Every existing `<prefix>-<kind>-v<N>` index by version."""
    pattern = re.compile(rf"^{re.escape(prefix)}-{kind}-v(\d+)$")
    names = es.indices.get(index=f"{prefix}-{kind}-v*", expand_wildcards="all").body
    return {int(m.group(1)): name for name in names if (m := pattern.match(name))}


def version_of(name: str) -> int:
    match = re.search(r"-v(\d+)$", name)
    if match is None:
        raise ValueError(f"{name} is not a versioned index name")
    return int(match.group(1))


def create_index(
    es: Elasticsearch,
    prefix: str,
    kind: str,
    version: int,
    *,
    dims: int,
    model_id: str,
    with_alias: bool = False,
    bulk_load: bool = False,
    layout: Mapping[str, Any] | None = None,
) -> str:
    """Create `<prefix>-<kind>-v<version>` from the mappings module; optionally with its alias.

    `layout` (`routing`, `vector_index`, `shards`, `sort`, `replicas`; see
    `ctxdb.index.routing.settings_layout`) shapes the index and is recorded in its `_meta`, which
    writes and reads follow (all but `replicas`, which the index settings hold).
    `bulk_load` turns refresh off until `finish_bulk_load` (faster full builds).
    """
    name = index_name(prefix, kind, version)
    shape = {**DEFAULT_LAYOUT, **(layout or {})}
    body = index_body(
        kind,
        dims,
        vector_index=shape["vector_index"],
        shards=shape["shards"],
        routed=shape["routing"] == USER,
        sorted_by_user=shape["sort"] == USER,
        replicas=shape.pop("replicas"),
    )
    body["mappings"]["_meta"] = {
        "kind": kind,
        "version": version,
        "model_id": model_id,
        "created_at": datetime.now(UTC).isoformat(),
        **shape,
    }
    settings = dict(body["settings"])
    if bulk_load:
        settings["refresh_interval"] = "-1"
    aliases = {alias_name(prefix, kind): {"is_write_index": True}} if with_alias else None
    es.indices.create(index=name, settings=settings, mappings=body["mappings"], aliases=aliases)
    log.info("created index %s", name)
    return name


def finish_bulk_load(es: Elasticsearch, name: str, kind: str) -> None:
    """Restore the normal refresh interval and make everything written searchable."""
    es.indices.put_settings(
        index=name, settings={"refresh_interval": index_body(kind)["settings"]["refresh_interval"]}
    )
    es.indices.refresh(index=name)


def ensure_index(
    es: Elasticsearch,
    prefix: str,
    kind: str,
    *,
    dims: int,
    model_id: str,
    layout: Mapping[str, Any] | None = None,
) -> str:
    """The index behind the alias, creating the first version (with alias) when there is none.

    An existing index whose layout differs from `layout` is kept (documents are written and read
    the way it records); the difference is logged, and a reindex applies it. Replicas are the
    exception: a dynamic setting, applied to the existing index in place; so are fields the
    mappings gained since the index was created (`add_new_fields`). Two writers that
    find no index at once (shard runs on different workers) both try to create it: the index and
    its alias are created in one request, so the one that loses takes the winner's."""
    alias = alias_name(prefix, kind)
    current = alias_target(es, alias)
    if current is not None:
        if layout is not None:
            for line in layout_mismatches(index_layout(es, current), dict(layout)):
                log.warning("%s: %s; run a reindex to apply the settings", current, line)
            if "replicas" in layout:
                apply_replicas(es, current, layout["replicas"])
        add_new_fields(es, current, kind, dims)
        return current
    existing = versions(es, prefix, kind)
    version = max(existing, default=0) + 1
    try:
        return create_index(
            es, prefix, kind, version, dims=dims, model_id=model_id, with_alias=True, layout=layout
        )
    except BadRequestError as error:
        winner = alias_target(es, alias)
        if error.error != "resource_already_exists_exception" or winner is None:
            raise
        log.info("%s was created by another writer at the same time", winner)
        return winner


def add_new_fields(es: Elasticsearch, name: str, kind: str, dims: int) -> list[str]:
    """Add to index `name` the fields of `kind`'s mappings it lacks (a field added to the
    mappings after the index was created, such as the rows' `context`): adding a field is an
    in-place mapping update, and each document holds it from its next write. Returns them."""
    have = es.indices.get_mapping(index=name)[name]["mappings"].get("properties", {})
    wanted = index_body(kind, dims)["mappings"]["properties"]
    new = {field: spec for field, spec in wanted.items() if field not in have}
    if new:
        es.indices.put_mapping(index=name, properties=new)
        log.info("%s: added the fields %s", name, ", ".join(sorted(new)))
    return sorted(new)


def swap_aliases(es: Elasticsearch, swaps: list[Swap]) -> None:
    """Point every alias at its new index in one atomic `_aliases` call (remove + add)."""
    actions: list[dict] = []
    for swap in swaps:
        if swap.old is not None:
            actions.append({"remove": {"index": swap.old, "alias": swap.alias, "must_exist": True}})
        actions.append({"add": {"index": swap.new, "alias": swap.alias, "is_write_index": True}})
    es.indices.update_aliases(actions=actions)
    reached("es:alias_swap")
    for swap in swaps:
        log.info("alias %s: %s -> %s", swap.alias, swap.old, swap.new)


def index_meta(es: Elasticsearch, name: str) -> dict:
    """The `_meta` ctxdb stored in the index mapping."""
    return es.indices.get_mapping(index=name).body[name]["mappings"].get("_meta", {})


def record_model_id(es: Elasticsearch, name: str, model_id: str) -> None:
    """Set `_meta.model_id` of index `name` to the id its vectors were synced under, when it
    differs (a sync after a switch of backend): the search service's `auto` query embedder reads
    it."""
    meta = index_meta(es, name)
    if meta.get("model_id") == model_id:
        return
    es.indices.put_mapping(index=name, meta={**meta, "model_id": model_id})
    log.info(
        "%s: vectors now synced under model id %s (was %s)", name, model_id, meta.get("model_id")
    )


def drop_abandoned(es: Elasticsearch, prefix: str, kind: str) -> list[str]:
    """Delete versions above the live one that no alias points at (interrupted builds)."""
    live = alias_target(es, alias_name(prefix, kind))
    floor = version_of(live) if live else 0
    doomed = [name for v, name in versions(es, prefix, kind).items() if v > floor]
    for name in doomed:
        es.indices.delete(index=name)
        log.warning("deleted abandoned build %s", name)
    return doomed


def drop_retired(
    es: Elasticsearch, prefix: str, kind: str, *, grace_s: float, now: datetime | None = None
) -> list[str]:
    """Delete versions below the live one whose retirement is older than `grace_s` seconds.

    A retired version is stamped `retired_at` the first time it is seen, so the grace period
    counts from the swap (or from the first cleanup after a crash right after it).
    """
    now = now or datetime.now(UTC)
    live = alias_target(es, alias_name(prefix, kind))
    if live is None:
        return []
    dropped = []
    for version, name in sorted(versions(es, prefix, kind).items()):
        if version >= version_of(live):
            continue
        retired_at = index_meta(es, name).get("retired_at")
        if retired_at is None:
            mark_retired(es, name, now)
            retired_at = now.isoformat()
        if (now - datetime.fromisoformat(retired_at)).total_seconds() >= grace_s:
            es.indices.delete(index=name)
            log.info("deleted retired index %s", name)
            dropped.append(name)
    return dropped


def mark_retired(es: Elasticsearch, name: str, when: datetime) -> None:
    meta = index_meta(es, name)
    es.indices.put_mapping(index=name, meta={**meta, "retired_at": when.isoformat()})
