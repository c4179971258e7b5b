"""The README's promises that can drift: the configuration table, the two commands."""

from __future__ import annotations

import re
from pathlib import Path

from loadwatcher.config import markdown_table

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_configuration_table_lists_every_setting() -> None:
    block = re.search(r"<!-- config-table:start -->\n(.*?)<!-- config-table:end -->", README, re.S)
    assert block is not None
    assert block.group(1) == markdown_table(), "run scripts/sync-readme"


def test_ci_runs_the_readme_test_command() -> None:
    assert "scripts/test" in README and "scripts/serve" in README
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^exec scripts/test$", ci, re.M)
