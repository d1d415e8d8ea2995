"""Issue 42: the native scanner's contract has one hand-written source, the pydantic models.

`native/src/contract.json` (compiled into the Rust scanner) must be what
`ctxdb.landing.native_contract` generates from `ctxdb/contract/events.py` now: a limit changed in
the models and not regenerated fails here. The derivation itself is held to what it reads: every
bound of the models appears in the file, and a construct it does not know leaves its event type
to the pydantic contract instead of guessing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ctxdb.contract import events
from ctxdb.landing import native_contract
from ctxdb.landing.native_contract import CONTRACT_PATH, contract, contract_text

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_contract_is_the_generated_one() -> None:
    assert CONTRACT_PATH == ROOT / "native" / "src" / "contract.json"
    assert CONTRACT_PATH.read_text() == contract_text(), (
        "native/src/contract.json is stale: run `python -m ctxdb.landing.native_contract` "
        "and rebuild the scanner (`pip install -e .`)"
    )


def test_the_generator_writes_the_file_it_checks(tmp_path: Path) -> None:
    out = tmp_path / "contract.json"
    subprocess.run(
        [sys.executable, "-m", "ctxdb.landing.native_contract", str(out)], check=True, cwd=ROOT
    )
    assert out.read_text() == CONTRACT_PATH.read_text()


def _fields(model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in model["fields"]}


def test_every_event_type_and_limit_of_the_models_is_in_the_generated_contract() -> None:
    generated = json.loads(CONTRACT_PATH.read_text())
    assert list(generated["payloads"]) == list(events.PAYLOADS)
    assert not [t for t, m in generated["payloads"].items() if "unmirrored" in m]
    step = _fields(generated["payloads"]["chat.step"])
    assert step["input"]["max_chars"] == events.STEP_INPUT_MAX_CHARS
    assert step["output"] == {
        "name": "output",
        "required": False,
        "nullable": True,
        "value_type": "string",
        "min_chars": 0,
        "max_chars": events.STEP_OUTPUT_MAX_CHARS,
        "pattern": None,
        "one_of": None,
        "checks": [],
    }
    assert step["phase"]["one_of"] == ["start", "complete", "error"]
    summary = _fields(generated["payloads"]["react.summary"])
    assert summary["refs"]["max_items"] == events.SUMMARY_MAX_REFS
    assert summary["refs"]["item"]["max_chars"] == events.REF_MAX_CHARS
    assert _fields(generated["payloads"]["user.attachment"])["name"]["checks"] == ["relative_path"]
    envelope = _fields(generated["envelope"])
    assert generated["envelope"]["closed"] is True
    assert list(envelope) == list(events.Envelope.model_fields)
    assert envelope["adapter"]["one_of"] == list(events.ADAPTERS)
    assert envelope["schema_version"] == {
        "name": "schema_version",
        "required": True,
        "nullable": False,
        "value_type": "integer",
        "min": events.SCHEMA_VERSION,
        "max": events.SCHEMA_VERSION,
    }
    assert generated["payload_max_depth"] == events.PAYLOAD_MAX_DEPTH


def test_a_new_limit_in_a_model_reaches_the_generated_contract() -> None:
    class Step(events.ProgressStep):
        step: str = Field(min_length=1, max_length=64)

    generated = contract(payloads={"chat.step": Step})
    assert _fields(generated["payloads"]["chat.step"])["step"]["max_chars"] == 64


def _shout(value: str) -> str:
    return value.upper()


class _Unknown(BaseModel):
    model_config = ConfigDict(strict=True)
    name: Annotated[str, AfterValidator(_shout)]


class _TwoTypes(BaseModel):
    model_config = ConfigDict(strict=True)
    value: int | str


def test_a_construct_the_derivation_does_not_know_leaves_its_type_to_the_contract() -> None:
    generated = contract(payloads={"a": _Unknown, "b": _TwoTypes, "c": events.TurnClosed})
    assert "string checks" in generated["payloads"]["a"]["unmirrored"]
    assert "union" in generated["payloads"]["b"]["unmirrored"]
    assert "unmirrored" not in generated["payloads"]["c"]
    assert native_contract.NAMED_CHECKS == {events.relative_path: "relative_path"}
