"""Every ``helm`` command the documents show works as typed: ``helm install`` is run as
``helm template`` with the very same arguments (the flags are install's; template takes
them), from the repository root, and what it renders is the chart's with those values."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.support import helm
from tests.support.manifests import find, one

DOCS = ("README.md", "charts/loadwatcher/README.md", "docs/scheduler.md", "deploy/README.md")


def helm_commands(text: str) -> list[str]:
    """``helm ...`` lines of the fenced ``sh`` blocks (continuations joined) and the inline
    code spans in prose that are whole install or template commands (a release and a chart;
    a bare mention such as `helm template` is none)."""
    found: list[str] = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if lang == "sh":
            joined = re.sub(r"\s*\\\n\s*", " ", body)
            found += [line.strip() for line in joined.splitlines() if line.startswith("helm ")]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", prose)
    found += [c for c in spans if re.match(r"helm (install|template) [^-\s]\S* [^-\s]", c)]
    return found


COMMANDS = [
    (doc, command)
    for doc in DOCS
    for command in helm_commands((helm.ROOT / doc).read_text(encoding="utf-8"))
]


def test_the_readme_deploys_with_helm_first() -> None:
    readme = (helm.ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Deploy it in a cluster") :]
    assert section.index("helm install") < section.index("kubectl apply -k")
    installs = [c for d, c in COMMANDS if d == "README.md" and c.startswith("helm install")]
    assert installs and all("charts/loadwatcher" in c for c in installs)
    assert any(c.startswith("helm install") for d, c in COMMANDS if d.startswith("charts/"))


def test_the_extraction_joins_continued_lines() -> None:
    text = "```sh\nhelm install a b \\\n  --set x=1\n```\n`helm template c d`, `helm template`.\n"
    assert helm_commands(text) == ["helm install a b --set x=1", "helm template c d"]


@pytest.mark.parametrize(("doc", "command"), COMMANDS, ids=[c for _, c in COMMANDS])
def test_documented_helm_command_renders_as_typed(doc: str, command: str) -> None:
    words = shlex.split(command)
    assert words[1] in ("install", "template"), f"{doc}: {command}"
    done = helm.run("template", *words[2:])
    assert done.returncode == 0, f"{doc}: {command}\n{done.stderr}"
    objs = helm.parse(done.stdout)
    assert one(objs, "Service")["metadata"]["name"] == words[2]
    if "scheduler.enabled=true" in command:
        (cm,) = [o for o in find(objs, "ConfigMap") if "scheduler-config.yaml" in o["data"]]
        assert f"http://{words[2]}." in cm["data"]["scheduler-config.yaml"]
    for word in words:
        if word.startswith("image.repository="):
            image = one(objs, "Deployment", words[2])["spec"]["template"]["spec"]
            assert image["containers"][0]["image"].startswith(word.split("=", 1)[1] + ":")
