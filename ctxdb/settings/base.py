"""What every settings group shares: its variable names and the deprecated names it still reads.

A group's variables are its `env_prefix` followed by the field's name (`CTXDB_SEARCH_RRF_K` is
`search.rrf_k`). The only names outside a prefix are the standard ones other tools define
(`ELASTICSEARCH_URL` and its credentials, `ES_JAVA_HOME`, `JAVA_HOME`), given as the field's
`validation_alias`. A name that moved under its group's prefix stays readable for one release
through `deprecated_names`: it is read only when the new name is unset, and every read of the
environment that finds it logs a warning naming the new variable.
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

log = logging.getLogger(__name__)


def group_config(env_prefix: str) -> SettingsConfigDict:
    """The model config of a group whose variables start with `env_prefix`."""
    return SettingsConfigDict(env_prefix=env_prefix, extra="ignore", populate_by_name=True)


def env_name(model: type[BaseSettings], field: str) -> str:
    """The variable `model`'s `field` is read from: its standard name, else prefix + field."""
    alias = model.model_fields[field].validation_alias
    if isinstance(alias, str):
        return alias
    return f"{model.model_config.get('env_prefix', '')}{field}".upper()


class DeprecatedNames(PydanticBaseSettingsSource):
    """The old names of a group's variables, read after every other variable (one release)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        names: dict[str, str] = getattr(self.settings_cls, "deprecated_names", {})
        values: dict[str, Any] = {}
        for old, field in names.items():
            raw = os.environ.get(old)
            if raw is None:
                continue
            new = env_name(self.settings_cls, field)
            if field in self.current_state:
                log.warning("%s is deprecated and ignored: %s is set", old, new)
            else:
                log.warning(
                    "%s is deprecated: set %s instead (%s goes next release)",
                    old,
                    new,
                    old,
                )
                values[field] = raw
        return values


class GroupSettings(BaseSettings):
    """A settings group: its variables under one prefix, plus the deprecated names it reads."""

    model_config = group_config("CTXDB_")

    deprecated_names: ClassVar[dict[str, str]] = {}
    """Old variable -> the field it sets, read only while the field's own variable is unset."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            DeprecatedNames(settings_cls),
            dotenv_settings,
            file_secret_settings,
        )
