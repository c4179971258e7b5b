"""The repository stands alone: no tracked file cites a document that is not in it.

A clone has nothing beside it, so code, tests, benchmarks and docs must not send the reader
to design notes, sibling checkouts or issue numbers of a tracker they cannot see; they
refer to docs/architecture.md or state the fact instead. Section signs of public standards
("RFC 9110 §12.5.3") are fine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.backends import require_binary, unavailable

ROOT = Path(__file__).resolve().parents[2]

# Built from pieces so that this file does not match its own patterns.
_DESIGN = "DES" + "IGN"
_SHARED = "sha" + "red"
FORBIDDEN = re.compile(
    "|".join(
        (
            re.escape(_DESIGN + ".md"),
            re.escape(_DESIGN + " §"),
            re.escape("../" + _SHARED),
            re.escape(_SHARED + "/reference"),
            r"\biss" + r"ue\s*#?\d+",
        )
    ),
    re.IGNORECASE,
)


def tracked_files() -> list[Path]:
    """Every file git tracks in this checkout (CI tests a clone, so git and a work tree
    are always there: without them the test fails under CI=true)."""
    git = require_binary("git")
    try:
        out = subprocess.run(
            [git, "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
        ).stdout
    except subprocess.CalledProcessError:
        unavailable(f"{ROOT} is not a git checkout: the tracked files cannot be listed")
    return [ROOT / name for name in out.decode("utf-8").split("\0") if name]


def text_of(path: Path) -> str | None:
    """The file's text, or None for binary files and paths that are not regular files."""
    if path.is_symlink() or not path.is_file():
        return None
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def citations(paths: list[Path]) -> list[str]:
    """``file:line: text`` of every line that cites an outside document."""
    found = []
    for path in paths:
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_tracked_file_cites_documents_outside_the_repository() -> None:
    files = tracked_files()
    assert files, "git ls-files listed nothing"
    found = citations(files)
    assert not found, "cites documents that are not in the repository:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "see " + _DESIGN + ".md for details",
        "(" + _DESIGN + " §7)",
        "clone ../" + _SHARED + " beside the repo",
        "tests use " + _SHARED + "/reference/cases.json",
        "as iss" + "ue 7 asks",
        "fixes Iss" + "ue #12",
    ],
)
def test_the_patterns_catch_citations(line: str) -> None:
    assert FORBIDDEN.search(line)


@pytest.mark.parametrize(
    "line",
    [
        "RFC 9110 §12.5.3",
        "see docs/architecture.md, Wire formats",
        "shared by every helper",
        "an issue with the node list",
    ],
)
def test_the_patterns_leave_other_text_alone(line: str) -> None:
    assert not FORBIDDEN.search(line)
