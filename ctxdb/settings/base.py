"""What every settings group shares: how its variables are named.

A group's variables are its `env_prefix` followed by the field's name (`CTXDB_SEARCH_RRF_K` is
`search.rrf_k`). The only names outside a prefix are the standard ones other tools define
(`ELASTICSEARCH_URL` and its credentials, `ES_JAVA_HOME`/`JAVA_HOME`), given as the field's
`validation_alias`.
"""

from __future__ import annotations

from pydantic import AliasChoices
from pydantic_settings import BaseSettings, SettingsConfigDict


def group_config(env_prefix: str) -> SettingsConfigDict:
    """The model config of a group whose variables start with `env_prefix`."""
    return SettingsConfigDict(env_prefix=env_prefix, extra="ignore", populate_by_name=True)


def env_names(model: type[BaseSettings], field: str) -> list[str]:
    """The variables `model`'s `field` is read from, first choice first: its standard names, else
    prefix + field."""
    alias = model.model_fields[field].validation_alias
    if isinstance(alias, str):
        return [alias]
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return [f"{model.model_config.get('env_prefix', '')}{field}".upper()]


def env_name(model: type[BaseSettings], field: str) -> str:
    """The variable `model`'s `field` is read from first."""
    return env_names(model, field)[0]


class GroupSettings(BaseSettings):
    """A settings group: its variables under one prefix."""

    model_config = group_config("CTXDB_")
