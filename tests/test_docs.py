"""The docs a newcomer reads: README.md and docs/*.md link to files and headings that exist,
the README's study example is a valid study whose editor modeline finds its schema, the
generated CLI reference is current, and the documentation site builds with no warning."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tlmsearch import cli_reference
from tlmsearch.config import load_study
from tlmsearch.config.schema import DOC_FILES

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
MODELINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [x for x in LINK.findall(text) if not re.match(r"[a-z]+:", x)]  # no URLs


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    bad = []
    for link in _links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            bad.append(f"{link}: no such file")
            continue
        if anchor and path.suffix == ".md" and anchor not in _anchors(path):
            bad.append(f"{link}: no heading with anchor #{anchor} in {path.name}")
    assert not bad, f"{page.name}: " + "; ".join(bad)


def test_the_readme_indexes_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"README's docs index lacks docs/{page.name}"


def test_the_readme_study_example_validates_and_its_modeline_finds_the_schema(
    tmp_path: Path,
) -> None:
    text = (ROOT / "README.md").read_text().split("```yaml\n", 1)[1].split("```", 1)[0]
    schema = MODELINE.match(text.splitlines()[0]).group(1)
    # the example lives in studies/, as the README says: the path is relative to it
    assert (ROOT / "studies" / schema).resolve() == (ROOT / DOC_FILES["study"]).resolve()
    (tmp_path / "studies").mkdir()
    study = tmp_path / "studies" / "x.yaml"
    study.write_text(text)
    cfg = load_study(study)
    assert cfg.search.seeds == [0, 1, 2] and cfg.space.name == "paper"
    assert yaml.safe_load(text)["objectives"][0]["min_effect"] == 0.01


@pytest.mark.parametrize(("folder", "kind"), [("studies", "study"), ("search_spaces", "space")])
def test_shipped_yaml_files_carry_the_modeline_of_their_schema(folder: str, kind: str) -> None:
    for path in sorted((ROOT / folder).glob("*.yaml")):
        first = path.read_text().splitlines()[0]
        match = MODELINE.match(first)
        assert match, f"{path.name}: first line should be the yaml-language-server modeline"
        assert (path.parent / match.group(1)).resolve() == (ROOT / DOC_FILES[kind]).resolve()


# -------------------------------------------------------------------------------------------------
# Nothing points outside the repository: a user's clone has only what is in it

# The project's working notes (its style, design and paper notes, and a notes folder) live
# outside the repository; a fact the code cites goes into docs/ and the code points there. The
# patterns are written so that this file does not match them itself.
OUTSIDE = re.compile(
    r"\b(?:STYLE|DESIGN|PAPER)\.md|\bnotes/[\w.-]+\.md|" + re.escape("/work" + "/shared/")
)
SCANNED = (
    "tlmsearch",
    "tests",
    "benchmarks",
    "docs",
    "studies",
    "search_spaces",
    ".ci",
    "README.md",
    "Makefile",
    "pyproject.toml",
)


def _scanned_texts() -> list[tuple[Path, str]]:
    out = []
    for name in SCANNED:
        top = ROOT / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in files:
            data = path.read_bytes()
            if "__pycache__" in path.parts or b"\0" in data:  # bytecode, images
                continue
            out.append((path, data.decode("utf-8", errors="replace")))
    return out


def test_the_outside_pattern_catches_references_and_spares_user_data_examples() -> None:
    refs = ("STYLE" + ".md rule 19", "(DESIGN" + ".md)", "PAPER" + ".md:", "notes" + "/cpu.md")
    for ref in refs:
        assert OUTSIDE.search(ref), ref
    for fine in ("notes.txt", "`notes/`", "sources: [classics, my_notes/]", "docs/platform.md"):
        assert not OUTSIDE.search(fine), fine


def test_nothing_points_at_files_outside_the_repository() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{no}: {m.group(0)}"
        for path, text in _scanned_texts()
        for no, line in enumerate(text.splitlines(), 1)
        for m in OUTSIDE.finditer(line)
    ]
    assert not bad, (
        "files a clone does not have (state the fact in docs/ and point there): " + "; ".join(bad)
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_names_a_file_inside_the_repository(page: Path) -> None:
    bad = []
    for link in _links(page):
        target = link.partition("#")[0]
        if not target:
            continue
        path = (page.parent / target).resolve()
        if not path.is_relative_to(ROOT):
            bad.append(f"{link}: outside the repository")
        elif not path.exists():
            bad.append(f"{link}: no such file")
    assert not bad, f"{page.name}: " + "; ".join(bad)


# -------------------------------------------------------------------------------------------------
# The documentation site (mkdocs.yml): every page in its navigation, generated pages current, and
# a strict build (a broken link, anchor or API reference is an error)


def test_the_committed_cli_reference_is_current() -> None:
    assert (ROOT / "docs" / "cli.md").read_text() == cli_reference.markdown(), (
        "docs/cli.md is stale (a command, argument or help text changed): run `make docs` "
        "(or `python -m tlmsearch.cli_reference --out docs/cli.md`) and commit the result"
    )


def test_the_cli_reference_names_every_command_and_option() -> None:
    text = cli_reference.markdown()
    for command in (
        "validate",
        "schema",
        "plan",
        "run",
        "resume",
        "status",
        "export",
        "report",
        "data prepare",
    ):
        assert f"`tlmsearch {command}`" in text, command
    assert "| `--retry-failed` | flag |" in text  # resume's flag, from the typer app
    assert "tlmsearch validate [OPTIONS] STUDY" in text


def test_the_site_navigation_lists_every_docs_page() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    nav = set(re.findall(r"^\s+- (?:[^:\n]+: )?([\w/]+\.md)$", config, flags=re.M))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == nav, f"docs/ only: {sorted(pages - nav)}; nav only: {sorted(nav - pages)}"


@pytest.mark.slow
def test_the_site_builds_strictly_with_no_warning(tmp_path: Path) -> None:
    # CI runs this through `make test`: a broken link or anchor, a page missing from the
    # navigation or a bad API reference fails the build, and so this test
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    site = tmp_path / "site"
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    assert "WARNING" not in log, log[-4000:]
    html = (site / "api" / "index.html").read_text()
    assert "plan_widths" in html and "load_study" in html  # the API reference was generated
    changelog = (site / "changelog" / "index.html").read_text()
    assert "Keep a Changelog" in changelog  # the page shows CHANGELOG.md itself
