"""Records: the text field of JSONL, Parquet and CSV files, and of a local ``datasets`` folder.

A source names its kind with a prefix (``jsonl:shards/``) or by its suffix (``a.parquet``); a
folder is every file of its kind under it, sorted, so the order is the same everywhere. Each
reader streams: it holds one line, one Parquet record batch or one ``datasets`` batch at a time,
never a whole file. A record that cannot be read (bad JSON, no text field, text that is not a
string) is a ``ConfigError`` naming the file and the line or row.

Every record becomes one unit (a document stays in one split) with the group key
``rec:<name>:<row>``: the file's path under the source without its suffix (a ``datasets``
folder's name) and the record's 0-based index, so the same records as JSONL, Parquet, CSV or a
``datasets`` folder of the same name split and tokenize identically.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tlmsearch.data.text import TEXT_SUFFIXES, Unit, normalize
from tlmsearch.errors import ConfigError

SUFFIXES = {
    "jsonl": (".jsonl", ".jsonl.gz", ".ndjson"),
    "parquet": (".parquet",),
    "csv": (".csv",),
}
RECORD_KINDS = (*SUFFIXES, "datasets")
# Files save_to_disk writes beside its Arrow files: one of them marks a `datasets` folder.
DATASETS_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
BATCH_ROWS = 1024  # rows per Parquet / datasets batch read


def _suffix_kind(path: Path) -> str | None:
    name = path.name.lower()
    for kind, suffixes in SUFFIXES.items():
        if name.endswith(suffixes):
            return kind
    return None


def is_datasets_folder(path: Path) -> bool:
    return path.is_dir() and any((path / m).is_file() for m in DATASETS_MARKERS)


def kind_of(path: Path, prefix: str | None) -> str | None:
    """The record kind of a source (None: not records, i.e. text or token files).

    ``prefix`` is the kind the source named (``'jsonl'`` of ``'jsonl:x'``), or None. Without one
    a file goes by its suffix, a folder that ``save_to_disk`` wrote is ``datasets``, and a folder
    holding record files of one kind is records. A folder holding text files and record files
    (a README.md beside Parquet shards) is an error that asks for a prefix: read silently as
    text, it would train on the README.
    """
    if prefix is not None:
        return prefix if prefix in RECORD_KINDS else None
    if path.is_file():
        return _suffix_kind(path)
    if is_datasets_folder(path):
        return "datasets"
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.is_file()]
        kinds = {k for k in map(_suffix_kind, files) if k is not None}
        if kinds and any(p.suffix.lower() in TEXT_SUFFIXES for p in files):
            kinds.add("text")
        if len(kinds) > 1:
            raise ConfigError(
                f"data.sources: folder {str(path)!r} holds {' and '.join(sorted(kinds))} "
                f"files; name the kind to read with a prefix, e.g. '{sorted(kinds)[0]}:{path}'"
            )
        if kinds:
            return kinds.pop()
    return None


def files_of(path: Path, kind: str) -> list[Path]:
    """The files a records source reads: the file itself, or its folder's files of that kind."""
    if kind == "datasets":
        if not is_datasets_folder(path):
            raise ConfigError(
                f"data.sources: {str(path)!r} is not a folder written by datasets' "
                f"save_to_disk (no {', '.join(DATASETS_MARKERS)}); give that folder"
            )
        return sorted(p for p in path.rglob("*") if p.is_file())
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(
            p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(SUFFIXES[kind])
        )
        if not files:
            raise ConfigError(
                f"data.sources: folder {str(path)!r} holds no {kind} files "
                f"({', '.join(SUFFIXES[kind])})"
            )
        return files
    raise ConfigError(f"data.sources: {str(path)!r} does not exist; give a {kind} file or folder")


def identity(path: Path, kind: str) -> list[list[Any]]:
    """[relative path, size, mtime_ns] of every file read: the cache key of a records source.

    Sizes and modification times rather than hashes: hashing a corpus larger than memory on
    every run would cost as much as reading it. A rewritten file changes its mtime.
    """
    root = path if path.is_dir() else path.parent
    out = []
    for f in files_of(path, kind):
        st = f.stat()
        out.append([f.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns])
    return out


# -------------------------------------------------------------------------------------------------
# Readers: each record's text, one at a time


def _text(value: Any, where: str, field: str) -> str:
    if isinstance(value, str):
        return value
    raise ConfigError(
        f"data.text_field: {where} has {field!r} = {str(value)[:60]!r} "
        f"({type(value).__name__}), not text; point data.text_field at a string field"
    )


def _jsonl(path: Path, field: str) -> Iterator[str]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{str(path)!r} line {n}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ConfigError(
                    f"data.sources: {where} is not JSON ({err.msg} at column {err.colno}); "
                    "fix or remove that line"
                ) from None
            if not isinstance(record, dict) or field not in record:
                keys = ", ".join(list(record)[:10]) if isinstance(record, dict) else "none"
                raise ConfigError(
                    f"data.text_field: {where} has no field {field!r} (its keys: {keys}); "
                    "set data.text_field to the key that holds the text"
                )
            yield _text(record[field], where, field)


def _csv(path: Path, field: str) -> Iterator[str]:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # a document is longer than 128 KiB
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or field not in reader.fieldnames:
            cols = ", ".join((reader.fieldnames or [])[:10]) or "none"
            raise ConfigError(
                f"data.text_field: {str(path)!r} has no column {field!r} (its header: {cols}); "
                "set data.text_field to the column that holds the text"
            )
        try:
            for row in reader:
                where = f"{str(path)!r} line {reader.line_num}"
                yield _text(row[field], where, field)
        except csv.Error as err:
            raise ConfigError(
                f"data.sources: {str(path)!r} line {reader.line_num} is not CSV ({err})"
            ) from None


def _parquet(path: Path, field: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises ArrowInvalid, OSError, ... on a damaged file
        raise ConfigError(
            f"data.sources: {str(path)!r} is not a readable Parquet file ({err})"
        ) from None
    names = pf.schema_arrow.names
    if field not in names:
        raise ConfigError(
            f"data.text_field: {str(path)!r} has no column {field!r} (its columns: "
            f"{', '.join(names[:10])}); set data.text_field to the column that holds the text"
        )
    row = 0
    for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=[field]):
        for value in batch.column(0).to_pylist():
            yield _text(value, f"{str(path)!r} row {row}", field)
            row += 1


def _datasets(path: Path, field: str) -> Iterator[str]:
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            f"data.sources: {str(path)!r} is a datasets folder, and reading it needs the datasets "
            "package: pip install 'tlmsearch[data]'"
        ) from None

    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as err:  # datasets raises FileNotFoundError, ValueError, ArrowInvalid, ...
        raise ConfigError(
            f"data.sources: {str(path)!r} could not be loaded by datasets.load_from_disk ({err})"
        ) from None
    # A DatasetDict is read split by split (sorted); units are re-split by their keys anyway.
    parts = sorted(loaded.items()) if isinstance(loaded, datasets.DatasetDict) else [("", loaded)]
    for split, ds in parts:
        if field not in ds.column_names:
            raise ConfigError(
                f"data.text_field: {str(path)!r}{' split ' + split if split else ''} has no "
                f"column {field!r} (its columns: {', '.join(ds.column_names[:10])}); set "
                "data.text_field to the column that holds the text"
            )
        row = 0
        for batch in ds.select_columns([field]).iter(batch_size=BATCH_ROWS):
            for value in batch[field]:
                yield _text(
                    value, f"{str(path)!r}{' split ' + split if split else ''} row {row}", field
                )
                row += 1


def units(path: Path, kind: str, field: str) -> Iterator[tuple[Path, Iterator[Unit]]]:
    """(file, its units) for every file of a records source, streamed."""
    if kind == "datasets":
        yield path, _units(_datasets(path, field), path.name, path)
        return
    root = path if path.is_dir() else path.parent
    read = {"jsonl": _jsonl, "parquet": _parquet, "csv": _csv}[kind]
    for f in files_of(path, kind):
        rel = f.relative_to(root).as_posix()
        suffix = next((s for s in SUFFIXES[kind] if rel.lower().endswith(s)), "")
        name = rel[: len(rel) - len(suffix)]  # 'jsonl:notes.txt' keeps its whole name
        yield f, _units(read(f, field), name, f)


def _units(rows: Iterator[str], name: str, path: Path) -> Iterator[Unit]:
    try:
        for row, body in enumerate(rows):
            clean = normalize(body)
            if clean:
                yield Unit(f"rec:{name}:{row}", clean)
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"data.sources: {str(path)!r} is not UTF-8 text (byte {err.start}); "
            "convert it, e.g. iconv -t UTF-8"
        ) from None
    except (OSError, EOFError) as err:  # e.g. a truncated .gz
        raise ConfigError(f"data.sources: cannot read {str(path)!r}: {err}") from None


__all__ = ["RECORD_KINDS", "files_of", "identity", "kind_of", "units"]
