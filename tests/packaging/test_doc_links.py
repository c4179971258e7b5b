"""Every relative link and every repository path the documents mention resolves.

README.md, docs/*.md and deploy/README.md: a Markdown link to a file of this repository
must name one that exists (and a ``#anchor`` a heading it has); a path written in code,
``loadwatcher/...`` and the other top-level folders, must exist as written.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "deploy" / "README.md", *(ROOT / "docs").glob("*.md")])
FOLDERS = (
    "loadwatcher",
    "tests",
    "deploy",
    "docs",
    "scripts",
    "examples",
    "benchmarks",
    "dashboards",
)
# A path in code: a top-level folder, then path characters; <placeholders> and globs are not
# paths and are left out.
CODE_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(FOLDERS)})/[\w./-]*)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"`|\*|_(?=\w)|(?<=\w)_", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#{1,6}\s+(.*)$", text, re.M)}


def _links(doc: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def _code_paths(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
    blocks = re.findall(r"^```\w*\n(.*?)^```", text, re.S | re.M)
    # kubectl names objects as kind/name (`deploy/loadwatcher`): those lines hold no paths.
    lines = [
        line
        for chunk in (*spans, *blocks)
        for line in chunk.splitlines()
        if not line.lstrip("$ ").startswith("kubectl ")
    ]
    found = []
    for chunk in lines:
        for path in CODE_PATH.findall(chunk):
            path = path.rstrip(".")
            if "<" in path or "*" in path:
                continue
            found.append(path)
    return found


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in _links(doc):
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        missing = not path.exists() or not path.is_relative_to(ROOT)
        if missing or (anchor and path.suffix == ".md" and anchor not in _anchors(path)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_code_paths_exist(doc: Path) -> None:
    missing = sorted({p for p in _code_paths(doc) if not (ROOT / p).exists()})
    assert missing == []


def test_the_checker_catches_what_it_should(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("See [schemas](loadwatcher/schema/) and `loadwatcher/schema/`.\n# A `b` c!\n")
    assert _links(doc) == ["loadwatcher/schema/"]
    assert _code_paths(doc) == ["loadwatcher/schema/"]
    assert _anchors(doc) == {"a-b-c"}


def test_the_repository_files_of_a_released_project() -> None:
    import subprocess
    import tomllib

    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text and "APPENDIX" in license_text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "Apache-2.0" in str(project.get("license"))
    for path in ("loadwatcher.db.lock", "journal/lw.db.lock"):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
        assert ignored.returncode == 0, path  # a journal's lock file never shows in git status
