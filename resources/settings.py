"""Dagster resource of the settings: the one place every other resource, asset, check, sensor and
op of a run takes its configuration from.

The code location pins the settings it loaded with (`SettingsResource.from_settings`): every field
that differs from its default, so the Dagster UI shows what a run gets and a run on another
process or worker writes the same memory. Secrets (tokens, keys, passwords) and the object-store
options, which may hold credentials, are never copied: they are read from the environment when
the run starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagster import ConfigurableResource
from pydantic import BaseModel, PrivateAttr, SecretStr

from ctxdb.settings import GROUPS, Settings, get_settings

UNCOPIED = frozenset({"object_store_options"})
"""Top-level fields never copied into the run config (they may hold credentials)."""


def _secret_fields(model: type[BaseModel]) -> set[str]:
    """The fields of `model` that hold a secret."""
    return {
        name
        for name, field in model.model_fields.items()
        if SecretStr.__name__ in str(field.annotation)
    }


def _changed(model: BaseModel, uncopied: set[str]) -> dict[str, Any]:
    """`model`'s fields that differ from their defaults, as JSON values, but for `uncopied`."""
    return model.model_dump(mode="json", exclude_defaults=True, exclude=uncopied)


class SettingsResource(ConfigurableResource):
    """The run's settings: the process's own (read from its environment when the run starts)
    with `changes` applied, as `Settings.replace` takes them (top-level fields, or a dict of
    fields per group: `{"home": "/srv/ctxdb", "embedding": {"batch_size": 8}}`)."""

    changes: dict[str, Any] = {}

    _settings: Settings | None = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: Settings) -> SettingsResource:
        """`settings` pinned: its home and every field that differs from its default, secrets and
        object-store options left to the environment. Local paths are pinned absolute, so a
        worker in another folder reads and writes the same ones."""
        top = set(GROUPS) | _secret_fields(Settings) | UNCOPIED
        changes = {**_changed(settings, top), "home": str(settings.home.absolute())}
        if settings.storage_root and "://" not in settings.storage_root:
            changes["storage_root"] = str(Path(settings.storage_root).absolute())
        for group, model in GROUPS.items():
            changed = _changed(getattr(settings, group), _secret_fields(model))
            if changed:
                changes[group] = changed
        return cls(changes=changes)

    def get(self) -> Settings:
        """The settings object of the run (made once per resource)."""
        if self._settings is None:
            settings = get_settings()
            self._settings = settings.replace(**self.changes) if self.changes else settings
        return self._settings
