"""The README's promises that can drift: the configuration table, the set-up commands, and
every command it shows, run the way it spells them."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from loadwatcher.config import markdown_table
from loadwatcher.providers import registry

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# Documents whose commands a user runs from a clone.
DOCS = (
    "README.md",
    "docs/scheduler.md",
    "docs/providers-influxdb-metrics-server.md",
    "deploy/README.md",
)
# The commands of this repository: the service's own and the benchmark harness.
PROGRAMS = (
    "scripts/loadwatcher",
    "scripts/serve",
    "scripts/test",
    ".venv/bin/python benchmarks/run.py",
    ".venv/bin/python benchmarks/fastpaths.py",
    ".venv/bin/python benchmarks/scale.py",
    ".venv/bin/python benchmarks/small.py",
)


def test_configuration_table_lists_every_setting() -> None:
    block = re.search(r"<!-- config-table:start -->\n(.*?)<!-- config-table:end -->", README, re.S)
    assert block is not None
    assert block.group(1) == markdown_table(registry.catalogue()), "run scripts/sync-readme"


def test_ci_runs_the_readme_test_command_in_a_fresh_clone() -> None:
    assert "\nscripts/test " in README and "\nscripts/serve " in README
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^git clone .*\"\$repo\"", ci, re.M), "CI must test a fresh clone"
    assert re.search(r"^scripts/test$", ci, re.M)


def _command_lines(text: str) -> list[str]:
    """Shell command lines of the fenced ``sh``/``console`` blocks (continuations joined,
    prompts and comments stripped) and of the inline code spans in prose."""
    lines: list[str] = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if lang not in ("sh", "console"):
            continue
        joined = re.sub(r"\\\n", " ", body)
        for line in joined.splitlines():
            if lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            line = re.sub(r"`#[^`]*`", "", line)  # inline shell comments `# like this`
            line = re.sub(r"\s#\s.*$", "", line).strip()
            if line:
                lines.append(line)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    lines.extend(re.findall(r"`([^`\n]+)`", prose))
    return lines


def _documented_commands() -> list[tuple[str, str]]:
    """(document, command) for every use of one of this repository's programs."""
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        for line in _command_lines((ROOT / doc).read_text(encoding="utf-8")):
            words = shlex.split(line, comments=False)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                words.pop(0)  # VAR=value prefixes
            command = " ".join(words)
            if any(command == p or command.startswith(p + " ") for p in PROGRAMS):
                found.append((doc, command))
    return found


COMMANDS = _documented_commands()


def test_the_documents_show_the_commands_this_test_checks() -> None:
    commands = {c for _, c in COMMANDS}
    for expected in (
        "scripts/loadwatcher score",
        "scripts/loadwatcher predict",
        "scripts/loadwatcher config check",
        "scripts/serve",
    ):
        assert any(c.startswith(expected) for c in commands), expected


@pytest.mark.parametrize(("doc", "command"), COMMANDS, ids=[c for _, c in COMMANDS])
def test_documented_command_answers_help_as_spelled(doc: str, command: str) -> None:
    """``<program> <subcommand...> --help`` exits 0 from the repository root, and knows
    every flag the document passes."""
    words = shlex.split(command)
    program = 2 if words[0] == ".venv/bin/python" else 1
    sub = []
    for word in words[program:]:
        if word.startswith("-"):
            break
        sub.append(word)
    if words[0] == "scripts/serve":
        sub = []  # serve's arguments are flags only
    if words[0] == "scripts/test":
        argv = ["bash", "-n", "scripts/test"]  # running it is the whole suite: check it parses
    else:
        argv = [*words[:program], *sub, "--help"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{doc}: {' '.join(argv)}\n{done.stdout}{done.stderr}"
    if words[0] == "scripts/test":
        return
    assert "usage:" in done.stdout, done.stdout
    for flag in (w.split("=", 1)[0] for w in words if w.startswith("--")):
        if flag != "--help":
            assert flag in done.stdout, f"{doc}: {command!r} uses {flag}, unknown to --help"


def test_no_document_calls_a_bare_loadwatcher_command() -> None:
    """``loadwatcher`` is not on a fresh clone's PATH: examples use scripts/loadwatcher."""
    bare = [
        (doc, line)
        for doc in DOCS
        for line in _command_lines((ROOT / doc).read_text(encoding="utf-8"))
        if re.match(r"loadwatcher (serve|score|predict|config)\b", line)
    ]
    assert bare == []
