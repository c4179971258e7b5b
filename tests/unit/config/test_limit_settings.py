"""The limits on what a poll may bring in: provider.max_answer_bytes (with its size parser),
provider.max_new_series and analysis.future_tolerance_s."""

from __future__ import annotations

import pytest

from loadwatcher import config
from loadwatcher.config import Settings
from loadwatcher.config import parsers as parse
from loadwatcher.errors import ConfigError
from loadwatcher.providers import registry

MIB = 2**20


def resolve(yaml_text: str | None, env: dict[str, str]) -> Settings:
    return config.resolve(yaml_text, env, catalogue=registry.catalogue())


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1", 1),
        ("4096", 4096),
        (" 7 ", 7),
        ("64MiB", 64 * MIB),
        ("64 MiB", 64 * MIB),
        ("64mib", 64 * MIB),
        ("64Mi", 64 * MIB),
        ("512KiB", 512 * 1024),
        ("2GiB", 2 * 2**30),
    ],
)
def test_byte_size_reads_whole_numbers_and_binary_units(text: str, size: int) -> None:
    assert parse.byte_size(text) == size


@pytest.mark.parametrize(
    "text", ["0", "0MiB", "-1", "1.5MiB", "64MB", "64 M", "MiB", "", "1e6", "lots", "9" * 40]
)
def test_byte_size_refuses_the_rest(text: str) -> None:
    with pytest.raises(ValueError, match=r"^expected a size in bytes >= 1 .*64MiB\), got "):
        parse.byte_size(text)


def test_defaults() -> None:
    s = resolve(None, {})
    assert s.provider.max_answer_bytes == 128 * MIB
    assert s.provider.max_new_series == 250_000  # 65,000 nodes × 2 resources fit
    assert s.analysis.future_tolerance_s == 60.0


def test_values_from_yaml_and_environment() -> None:
    text = (
        "provider:\n  max_answer_bytes: 64MiB\n  max_new_series: 100\n"
        "analysis:\n  future_tolerance_s: 0\n"
    )
    s = resolve(text, {})
    assert (s.provider.max_answer_bytes, s.provider.max_new_series) == (64 * MIB, 100)
    assert s.analysis.future_tolerance_s == 0.0
    s = resolve("provider:\n  max_answer_bytes: 1048576\n", {})
    assert s.provider.max_answer_bytes == MIB
    env = {
        "LOADWATCHER_PROVIDER_MAX_ANSWER_BYTES": "2 GiB",
        "LOADWATCHER_PROVIDER_MAX_NEW_SERIES": "7",
        "LOADWATCHER_ANALYSIS_FUTURE_TOLERANCE_S": "2.5",
    }
    s = resolve(text, env)
    assert (s.provider.max_answer_bytes, s.provider.max_new_series) == (2 * 2**30, 7)
    assert s.analysis.future_tolerance_s == 2.5


@pytest.mark.parametrize(
    ("env", "setting", "expected"),
    [
        ({"LOADWATCHER_PROVIDER_MAX_ANSWER_BYTES": "0"}, "provider.max_answer_bytes", "size"),
        ({"LOADWATCHER_PROVIDER_MAX_ANSWER_BYTES": "64MB"}, "provider.max_answer_bytes", "size"),
        ({"LOADWATCHER_PROVIDER_MAX_NEW_SERIES": "0"}, "provider.max_new_series", ">= 1"),
        ({"LOADWATCHER_PROVIDER_MAX_NEW_SERIES": "1.5"}, "provider.max_new_series", ">= 1"),
        ({"LOADWATCHER_ANALYSIS_FUTURE_TOLERANCE_S": "-1"}, "analysis.future_tolerance_s", ">= 0"),
        ({"LOADWATCHER_ANALYSIS_FUTURE_TOLERANCE_S": "inf"}, "analysis.future_tolerance_s", ">= 0"),
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], setting: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve(None, env)
    assert info.value.setting.split(" ")[0] == setting
    assert expected in info.value.message


def test_the_readme_table_lists_them() -> None:
    table = config.markdown_table(registry.catalogue())
    for key in ("provider.max_answer_bytes", "provider.max_new_series"):
        assert f"| `{key}` |" in table
    assert "| `analysis.future_tolerance_s` |" in table
    assert f"`{128 * MIB}`" in table
