"""mkdocs hook: pages generated at build time, so they cannot drift from the code.

* ``reference/configuration.md`` — every key of the configuration schema (rag/app/config.py
  ``RagConfig``): its type, default and the comment written above it in the schema, group by
  group; then the registries a key's value is looked up in (retrievers, dataset readers,
  channels, tokenizers, headers, chunkers) and the config-group options under ``conf/``.
* ``experiments/*.md`` and ``golden/README.md`` — the write-ups and the golden-set format,
  published from where they live in the repository (they are not copied into docs/).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _comments(cls: type) -> dict[str, str]:
    """Field name -> the ``#`` comment lines directly above it in the class's source
    (read from its module's file with ast: no import-time source lookup)."""
    path = Path(sys.modules[cls.__module__].__file__)
    src = path.read_text(encoding="utf-8").splitlines()
    for node in ast.parse("\n".join(src)).body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            out: dict[str, str] = {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    lines, i = [], item.lineno - 2
                    while i >= 0 and src[i].strip().startswith("#"):
                        lines.insert(0, src[i].strip().lstrip("#").strip())
                        i -= 1
                    out[item.target.id] = " ".join(lines).replace("|", "\\|")
            return out
    return {}


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        v = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        v = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(v):
            return "(group)"
    else:
        return "(required)"
    if isinstance(v, enum.Enum):
        v = v.value
    text = repr(v) if not isinstance(v, str) else v
    return text.replace("|", "\\|")


def _type(f: dataclasses.Field) -> str:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return str(t).replace("Optional[", "").rstrip("]") if "Optional[" in str(t) else str(t)


def _rows(obj: object, prefix: str) -> list[str]:
    """Table rows for every field of a dataclass instance, nested dataclasses flattened."""
    notes, out = _comments(type(obj)), []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out += _rows(value, f"{prefix}.{f.name}")
            continue
        out.append(f"| `{prefix}.{f.name}` | `{_type(f)}` | `{_default(f)}` | "
                   f"{notes.get(f.name, '')} |")
        items = value if isinstance(value, dict) else {}
        # a dict with default items: one row per item; a mapping over a vocabulary (field
        # metadata "keys": channel names, categories) also lists the keys it may take
        out += [f"| `{prefix}.{f.name}.{k}` | | `{v!r}` | |" for k, v in items.items()]
        out += [f"| `{prefix}.{f.name}.{k}` | `float` | (unset) | |"
                for k in f.metadata.get("keys", tuple)() if k not in items]
    return out


def configuration_page() -> str:
    """The configuration reference, generated from the schema and the registries."""
    from rag.app import config as schema

    lines = ["# Configuration reference", "",
             "Generated from the schema (`rag/app/config.py`) and the registries when the site is "
             "built: every key is a Hydra override (`python -m rag.run group.key=value`); an "
             "unknown key is refused before anything runs.", ""]
    for group in dataclasses.fields(schema.RagConfig):
        cls = group.default_factory()  # type: ignore[misc]
        notes = _comments(type(cls))
        doc = (type(cls).__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        lines += [f"## `{group.name}`", "", doc, "", "| key | type | default | meaning |",
                  "|---|---|---|---|"]
        lines += _rows(cls, group.name)
        lines.append("")
    lines += ["## Registries", "", "The values these keys are looked up in (one registry per "
              "extension point; a new entry is one module plus its line there).", "",
              "| registry | key | names |", "|---|---|---|"]
    from rag.corpus.chunk import CHUNKERS
    from rag.datasets.common import READERS
    from rag.eval.measures import registered
    from rag.index.build import HEADERS
    from rag.index.embedders import kinds
    from rag.index.tokenize import TOKENIZERS
    from rag.eval.retriever import RETRIEVERS
    from rag.search.channels import CHANNELS
    from rag.search.ranking.features import FEATURES

    for name, key, reg in [("retrievers (`rag/eval/retriever.py`)", "retriever.kind", RETRIEVERS),
                           ("dataset readers (`rag/datasets/common.py`)", "dataset.format", READERS),
                           ("channels (`rag/search/channels.py`)", "search.fuse", CHANNELS),
                           ("ranking features (`rag/search/ranking/features/`, one module "
                            "each)", "ranking.features", FEATURES),
                           ("BM25 tokenizers (`rag/index/tokenize.py`)", "bm25.tokenizer", TOKENIZERS),
                           ("chunk headers (`rag/index/build.py`)", "index.header", HEADERS),
                           ("chunkers (`rag/corpus/chunk.py`)", "corpus.chunker", CHUNKERS),
                           ("embedder kinds (`rag/index/embedders/`, one module each)",
                            "embedder.kind", kinds()),
                           ("measures (`rag/eval/measures/`; a name ending `_at_` is a family "
                            "`<name><k>`)", "(metrics)",
                            [m.name for m in registered()])]:
        lines.append(f"| {name} | `{key}` | " + ", ".join(f"`{k}`" for k in reg) + " |")
    lines += ["", "## Config groups", "", "Options of each group under `conf/` "
              "(`python -m rag.run group=option`).", "", "| group | options |", "|---|---|"]
    for d in sorted(p for p in (ROOT / "conf").iterdir() if p.is_dir()):
        opts = sorted(p.stem for p in d.glob("*.yaml"))
        lines.append(f"| `{d.name}` | " + ", ".join(f"`{o}`" for o in opts) + " |")
    return "\n".join(lines) + "\n"


def on_files(files, config):
    """Add the generated reference and the repository's own write-ups to the site."""
    files.append(File.generated(config, "reference/configuration.md",
                                content=configuration_page()))
    for folder in ("experiments", "golden"):
        for p in sorted((ROOT / folder).glob("*.md")):
            files.append(File.generated(config, f"{folder}/{p.name}",
                                        content=p.read_text(encoding="utf-8")))
    return files
