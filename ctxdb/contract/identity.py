"""The identity every read and write is bounded by (who a call runs as)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Principal(BaseModel):
    """Who a call runs as. `user_id` (and `tenant` when set) bound every query."""

    user_id: str = Field(min_length=1)
    tenant: str | None = None
    token_id: str | None = None
