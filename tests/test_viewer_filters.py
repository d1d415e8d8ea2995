"""The viewer's filter controls send only values the search request model accepts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from ctxdb.search.models import Target

STATIC = Path(__file__).resolve().parents[1] / "ctxdb" / "serve" / "static"


def test_every_target_checkbox_is_a_target_the_request_accepts() -> None:
    """A checkbox whose value the model does not know turns every search into a 422 (the
    viewer once sent `note` for `notes`); every target the model knows is offered."""
    html = (STATIC / "viewer.html").read_text()
    fieldset = re.search(r'<fieldset id="f-targets">(.*?)</fieldset>', html, re.S)
    assert fieldset is not None
    offered = re.findall(r'<input type="checkbox" value="([^"]+)"', fieldset.group(1))
    assert sorted(offered) == sorted(get_args(Target))
