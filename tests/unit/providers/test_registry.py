"""One registration point per provider: a declaration is all config, the CLI and the table need.

A dummy provider, declared and registered in this file only, shows up in ``config table``,
in ``--provider``'s help, as ``provider.name`` and ``corroborate.name`` (with its Go-style
alias), with its own YAML section and environment variables.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from aiohttp import web

from loadwatcher import cli, config
from loadwatcher.config import Section, Settings, Spec
from loadwatcher.config import parsers as parse
from loadwatcher.errors import ConfigError, ProviderError
from loadwatcher.model import FetchResult, Resource
from loadwatcher.providers import registry
from loadwatcher.providers.base import Provider

BUILTIN = ("host", "prometheus", "influxdb", "metrics-server", "push", "datadog", "signalfx")


@dataclass(frozen=True)
class DummySettings:
    level: float
    label: str


class DummyProvider:
    source = "Dummy"

    def __init__(self, address: str, settings: DummySettings) -> None:
        self.address = address
        self.settings = settings

    async def fetch(self, now: float, since: float | None) -> FetchResult:
        return FetchResult(series=[])

    async def close(self) -> None:
        return None


def _check(dummy: DummySettings) -> None:
    if dummy.level > 10:
        raise ConfigError("dummy.level", "must be at most 10")


def _build(settings: Settings, dummy: DummySettings) -> Provider:
    return DummyProvider(settings.provider.address, dummy)


SECTION = Section(
    "dummy",
    DummySettings,
    (
        Spec("dummy.level", parse.number, 1.5, "how loud the dummy is"),
        Spec("dummy.label", parse.text, "node", "label of the node name", env=("DUMMY_LABEL",)),
    ),
)
DUMMY = registry.Declaration(
    name="dummy",
    aliases=("DummyMetrics",),
    section=SECTION,
    build=_build,
    metric_names=lambda dummy: {Resource.CPU: f"dummy.cpu.{dummy.label}"},
    needs_address=False,
    check=_check,
)


@pytest.fixture
def dummy() -> Iterator[registry.Declaration[DummySettings]]:
    registry.register(DUMMY)
    try:
        yield DUMMY
    finally:
        registry.unregister(DUMMY.name)


def resolve(yaml_text: str | None, env: dict[str, str]) -> Settings:
    return config.resolve(yaml_text, env, catalogue=registry.catalogue())


def test_the_builtin_providers_in_their_listed_order() -> None:
    assert registry.names() == BUILTIN


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("Prometheus", "prometheus"),
        ("VictoriaMetrics", "prometheus"),
        ("promql", "prometheus"),
        ("InfluxDB", "influxdb"),
        ("influx", "influxdb"),
        ("KubernetesMetricsServer", "metrics-server"),
        ("metricsserver", "metrics-server"),
        ("HOST", "host"),
    ],
)
def test_every_spelling_accepted_before_is_accepted(spelling: str, name: str) -> None:
    env = {"METRICS_PROVIDER_NAME": spelling, "METRICS_PROVIDER_ADDRESS": "http://x:1"}
    assert resolve(None, env).provider.name == name


def test_config_table_lists_the_dummy_section(
    dummy: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["config", "table"]) == 0
    table = capsys.readouterr().out
    assert "| `dummy.level` | `LOADWATCHER_DUMMY_LEVEL` |  | `1.5` | how loud the dummy is |" in (
        table
    )
    assert "`LOADWATCHER_DUMMY_LABEL`, `DUMMY_LABEL`" in table
    assert "host, prometheus, influxdb, metrics-server, push, datadog, signalfx or dummy |" in table
    # The table keeps its order: the providers' sections between provider and analysis.
    keys = [row.split("`")[1] for row in table.splitlines()[2:]]
    last_signalfx = [k for k in keys if k.startswith("signalfx.")][-1]
    assert keys.index(last_signalfx) + 1 == keys.index("dummy.level")
    assert keys.index("dummy.label") + 1 == keys.index("analysis.stale_after_s")


def test_the_dummy_is_a_provider_name_with_its_own_section(dummy: object) -> None:
    s = resolve("provider: {name: DummyMetrics}\ndummy: {level: 3, label: host}\n", {})
    assert s.provider.name == "dummy"
    assert s.section(SECTION) == DummySettings(level=3.0, label="host")
    s = resolve("dummy: {level: 3}\n", {"METRICS_PROVIDER_NAME": "dummy", "DUMMY_LABEL": "x"})
    assert s.dummy.level == 3.0 and s.dummy.label == "x"
    s = resolve(
        "dummy: {level: 3}\n",
        {"LOADWATCHER_PROVIDER_NAME": "dummy", "LOADWATCHER_DUMMY_LEVEL": "4"},
    )
    assert s.dummy.level == 4.0
    built = registry.build_provider(s)
    assert isinstance(built, DummyProvider) and built.settings.level == 4.0
    assert registry.metric_names(s) == {Resource.CPU: "dummy.cpu.node"}


def test_the_dummy_corroborates(dummy: object) -> None:
    s = resolve(None, {"LOADWATCHER_CORROBORATE_NAME": "dummymetrics"})
    assert s.corroborate.name == "dummy"  # no address needed: the dummy does not say so
    other = registry.build_corroborating_provider(s)
    assert isinstance(other, DummyProvider)
    assert registry.build_corroborating_provider(resolve(None, {})) is None


def test_the_dummy_settings_have_the_same_messages(dummy: object) -> None:
    with pytest.raises(ConfigError) as info:
        resolve(None, {"LOADWATCHER_DUMMY_LEVEL": "loud"})
    assert str(info.value) == (
        "dummy.level (from LOADWATCHER_DUMMY_LEVEL): expected a number, got 'loud'"
    )
    with pytest.raises(ConfigError) as info:
        resolve("provider: {name: dummy}\ndummy: {level: 11}\n", {})
    assert str(info.value) == "dummy.level: must be at most 10"
    assert resolve("dummy: {level: 11}\n", {}).dummy.level == 11  # checked when chosen
    with pytest.raises(ConfigError) as info:
        resolve("dummy: {levle: 1}\n", {})
    assert str(info.value) == "dummy.levle: unknown setting; did you mean dummy.level?"
    with pytest.raises(ConfigError) as info:
        resolve(None, {"METRICS_PROVIDER_NAME": "Consul"})
    assert str(info.value) == (
        "provider.name (from METRICS_PROVIDER_NAME): expected one of host, prometheus, "
        "influxdb, metrics-server, push, datadog, signalfx, dummy, got 'Consul'"
    )
    with pytest.raises(ConfigError) as info:
        resolve("qqqqqq: 1\n", {})
    assert str(info.value).endswith("query, influxdb, kube, push, datadog, signalfx, dummy")


def test_config_check_shows_the_dummy_section(
    dummy: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("METRICS_PROVIDER_NAME", "DummyMetrics")
    monkeypatch.setenv("LOADWATCHER_DUMMY_LEVEL", "2")
    assert cli.main(["config", "check"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["provider"]["name"] == "dummy"
    assert shown["dummy"] == {"level": 2.0, "label": "node"}
    assert list(shown).index("dummy") == list(shown).index("signalfx") + 1


def test_the_provider_flag_lists_the_dummy(dummy: object) -> None:
    parser = cli.build_parser(scoring=False)
    commands = next(a for a in parser._actions if a.dest == "command").choices
    serve = cast(dict[str, argparse.ArgumentParser], commands)["serve"]
    flag = next(a for a in serve._actions if a.dest == "provider")
    assert (
        flag.help
        == "host | prometheus | influxdb | metrics-server | push | datadog | signalfx | dummy"
    )


def test_unregistered_the_dummy_is_gone() -> None:
    registry.register(DUMMY)
    registry.unregister(DUMMY.name)
    assert "dummy" not in registry.names()
    with pytest.raises(ConfigError):
        resolve(None, {"METRICS_PROVIDER_NAME": "dummy"})
    with pytest.raises(ConfigError):
        resolve("dummy: {level: 1}\n", {})


def _variant(**changes: Any) -> registry.Declaration[DummySettings]:
    return dataclasses.replace(DUMMY, **changes)


@dataclass(frozen=True)
class Empty:
    pass


@pytest.mark.parametrize(
    "clash",
    [
        {"name": "prometheus"},
        {"name": "other", "aliases": ("Prometheus",)},
        {"name": "other", "section": Section("kube", Empty, ())},
        {"name": "other", "section": Section("server", Empty, ())},
    ],
)
def test_a_clash_with_a_known_provider_is_refused(clash: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        registry.register(_variant(**clash))
    assert registry.names() == BUILTIN


def test_a_section_must_match_its_dataclass() -> None:
    with pytest.raises(ValueError, match="fields"):
        Section("dummy", DummySettings, (Spec("dummy.level", parse.number, 1.0, "x"),))
    with pytest.raises(ValueError, match=r"start with dummy\."):
        Section("dummy", DummySettings, (Spec("other.level", parse.number, 1.0, "x"),))


def test_discovery_imports_no_provider_client_library() -> None:
    code = (
        "import sys\nfrom loadwatcher.providers import registry\nregistry.catalogue()\n"
        "print(sorted(m for m in ('kubernetes_asyncio', 'influxdb_client', 'aiohttp', 'psutil')"
        " if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout


async def test_the_main_credentials_never_go_to_the_corroborating_address(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    """The second backend is another address: it gets its own token or none, never the
    main provider's."""
    seen: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response(
            {"status": "success", "data": {"resultType": "vector", "result": []}}
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    server = await aiohttp_server(app)
    env = {
        "METRICS_PROVIDER_NAME": "prometheus",
        "METRICS_PROVIDER_ADDRESS": "http://127.0.0.1:9",
        "METRICS_PROVIDER_TOKEN": "main-secret",
        "LOADWATCHER_CORROBORATE_NAME": "prometheus",
        "LOADWATCHER_CORROBORATE_ADDRESS": str(server.make_url("")).rstrip("/"),
    }
    for token in (None, "second-secret"):
        if token is not None:
            (tmp_path / "token").write_text(token + "\n")
            env["LOADWATCHER_CORROBORATE_TOKEN_FILE"] = str(tmp_path / "token")
        seen.clear()
        other = registry.build_corroborating_provider(resolve(None, env))
        assert other is not None
        try:
            await other.fetch(1_700_000_000.0, None)
        except ProviderError:
            pass  # the stand-in answers nothing useful: the request is what is checked
        finally:
            await other.close()
        assert seen, "the corroborating provider asked its address"
        want = None if token is None else f"Bearer {token}"
        assert set(seen) == {want}
