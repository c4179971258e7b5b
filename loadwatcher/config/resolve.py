"""Settings: one table of every setting, resolved from YAML < environment < flags.

Every setting has a dotted name (its place in the YAML file), a type, a default with its
unit in the name, a one-line description and the environment variables that set it
(``config_spec.SPECS``). The Go load-watcher variables (``METRICS_PROVIDER_NAME`` ...) are
aliases of ours, so an existing deployment keeps working unchanged. Resolution is pure: it
takes the YAML text, the environment mapping and the flag values, and returns typed frozen
dataclasses (``settings.Settings``) or raises ``ConfigError`` naming the setting.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from loadwatcher.config.parsers import PROVIDERS
from loadwatcher.config.settings import _SECTIONS, InfluxDBSettings, Settings
from loadwatcher.config.spec import SPECS, SPECS_BY_KEY, Spec
from loadwatcher.errors import ConfigError

__all__ = [
    "PROVIDERS",
    "SPECS",
    "SPECS_BY_KEY",
    "Settings",
    "Spec",
    "effective",
    "load",
    "markdown_table",
    "resolve",
]


def _flatten_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(source, f"not valid YAML{where}") from exc
    except ValueError as exc:  # PyYAML builds dates itself: "2001-13-45" raises ValueError
        raise ConfigError(source, f"not valid YAML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(source, "not valid YAML: nested too deeply") from exc
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(source, "the top level must be a mapping of sections")
    flat: dict[str, Any] = {}
    for section, body in doc.items():
        if section not in _SECTIONS:
            raise ConfigError(_name(section), _unknown_section(str(section)))
        if not isinstance(body, dict):
            raise ConfigError(str(section), "must be a mapping")
        for name, value in body.items():
            key = f"{section}.{name}"
            if key not in SPECS_BY_KEY:
                raise ConfigError(f"{section}.{_name(name)}", _unknown_setting(section, str(name)))
            if isinstance(value, (dict, list)):
                raise ConfigError(key, "must be a scalar value")
            flat[key] = value
    return flat


def _closest(word: str, known: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, list(known), n=1)
    return found[0] if found else None


def _keys_named(name: str) -> str:
    """The settings whose name in their section is ``name``: ``a.x or b.x``."""
    return " or ".join(key for key in SPECS_BY_KEY if key.split(".", 1)[1] == name)


def _unknown_section(section: str) -> str:
    if section in SPECS_BY_KEY:  # provider.address: x, flat instead of nested
        head, name = section.split(".", 1)
        return f"unknown section; write settings under their section ({head}: {{{name}: ...}})"
    near = _closest(section, _SECTIONS)
    if near is None:  # a setting put at the top level (port: 2020)?
        leaf = _closest(section, (key.split(".", 1)[1] for key in SPECS_BY_KEY))
        near = _keys_named(leaf) if leaf else None
    if near is None:
        return f"unknown section; expected one of {', '.join(_SECTIONS)}"
    return f"unknown section; did you mean {near}?"


def _unknown_setting(section: str, name: str) -> str:
    prefix = section + "."
    names = [key[len(prefix) :] for key in SPECS_BY_KEY if key.startswith(prefix)]
    near = _closest(name, names)
    if near is not None:
        return f"unknown setting; did you mean {prefix}{near}?"
    elsewhere = _closest(name, (key.split(".", 1)[1] for key in SPECS_BY_KEY))
    if elsewhere is not None:  # in another section (server: {interval_s: 5})
        return f"unknown setting; did you mean {_keys_named(elsewhere)}?"
    return f"unknown setting; {section} has {', '.join(names)}"


def _name(key: Any) -> str:
    """A YAML key as it can be shown in a one-line message (empty or odd keys quoted)."""
    text = str(key)
    if not text or not text.isprintable() or len(text) > 60:
        return repr(text[:60])
    return text


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resolve(
    yaml_text: str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    *,
    yaml_source: str = "config",
) -> Settings:
    """Build Settings from YAML < environment < flags; raise ConfigError on the first bad value."""
    raw: dict[str, tuple[Any, str]] = {}
    if yaml_text:
        for key, value in _flatten_yaml(yaml_text, yaml_source).items():
            raw[key] = (value, key)
    env = env or {}
    flags = flags or {}
    for spec in SPECS:
        # Our own name wins over the Go load-watcher alias when both are set.
        for name in (*spec.env, spec.env_name):
            if name in env:
                raw[spec.key] = (env[name], name)
        if spec.flag is not None and flags.get(spec.flag) is not None:
            raw[spec.key] = (flags[spec.flag], "--" + spec.flag.replace("_", "-"))
    values: dict[str, Any] = {}
    for spec in SPECS:
        if spec.key not in raw:
            values[spec.key] = spec.default
            continue
        value, origin = raw[spec.key]
        try:
            values[spec.key] = spec.parse(_as_text(value))
        except ValueError as exc:
            name = spec.key if origin == spec.key else f"{spec.key} (from {origin})"
            raise ConfigError(name, str(exc)) from None
    settings = _build(values)
    _check(settings)
    return settings


def _build(values: Mapping[str, Any]) -> Settings:
    sections: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        prefix = section + "."
        fields = {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
        sections[section] = cls(**fields)
    return Settings(**sections)


def _check(settings: Settings) -> None:
    provider = settings.provider
    if provider.name != "host" and provider.name != "metrics-server" and not provider.address:
        raise ConfigError(
            "provider.address",
            f"required for provider {provider.name!r} (METRICS_PROVIDER_ADDRESS)",
        )
    if provider.token_file:
        _require_file("provider.token_file", provider.token_file)
    if provider.ca_file:
        _require_file("provider.ca_file", provider.ca_file)
    server = settings.server
    if server.auth_token_file:
        _require_file("server.auth_token_file", server.auth_token_file)
    if bool(server.tls_cert_file) != bool(server.tls_key_file):
        raise ConfigError("server.tls_key_file", "set both TLS files, or neither")
    for key in ("tls_cert_file", "tls_key_file"):
        path = getattr(server, key)
        if path:
            _require_file(f"server.{key}", path)
    if settings.journal.retention_s < 900:
        raise ConfigError("journal.retention_s", "must be at least 900 (the 15m window)")
    if provider.name == "influxdb":
        _check_influxdb(settings.influxdb)
    second = settings.corroborate
    if second.name and second.name not in ("host", "metrics-server") and not second.address:
        raise ConfigError("corroborate.address", f"required for provider {second.name!r}")
    kubeconfig = settings.kube.config
    if provider.name == "metrics-server" and kubeconfig:
        _require_file("kube.config", kubeconfig, " (KUBE_CONFIG)")


def _shown(path: str) -> str:
    return path if len(path) <= 200 else path[:200] + "..."


def _require_file(setting: str, path: str, note: str = "") -> None:
    """The setting must name an existing file; paths the OS refuses are reported too."""
    try:
        found = Path(path).is_file()
    except (OSError, ValueError) as exc:  # "File name too long", an embedded NUL byte
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(setting, f"unusable path ({reason}): {_shown(path)}{note}") from None
    if not found:
        raise ConfigError(setting, f"no such file: {_shown(path)}{note}")


def _check_influxdb(influx: InfluxDBSettings) -> None:
    names = ("database", "host_tag", "cpu_measurement", "cpu_field")
    for key in (*names, "memory_measurement", "memory_field"):
        if not getattr(influx, key):
            raise ConfigError(f"influxdb.{key}", "must not be empty")
    if influx.query_language == "flux" and not influx.org:
        raise ConfigError("influxdb.org", "required when influxdb.query_language is flux")


def load(path: str | None, env: Mapping[str, str], flags: Mapping[str, Any]) -> Settings:
    """Read the YAML file (if any) and resolve; file errors become ConfigError."""
    text = None
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConfigError("--config", f"cannot read {_shown(path)}: {reason}") from exc
        except ValueError as exc:  # not UTF-8 text, or a NUL byte in the path
            raise ConfigError("--config", f"cannot read {_shown(path)}: {exc}") from exc
    return resolve(text, env, flags, yaml_source=path or "config")


def markdown_table() -> str:
    """Every setting as a Markdown table (the README's configuration reference)."""
    rows = [
        "| setting (YAML) | environment | flag | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for spec in SPECS:
        env = ", ".join(f"`{name}`" for name in (spec.env_name, *spec.env))
        flag = f"`--{spec.flag.replace('_', '-')}`" if spec.flag else ""
        default = spec.default
        if isinstance(default, bool):
            shown = f"`{str(default).lower()}`"
        elif default is None or default == "":
            shown = "(none)"
        else:
            shown = f"`{default}`"
        rows.append(f"| `{spec.key}` | {env} | {flag} | {shown} | {spec.description} |")
    return "\n".join(rows) + "\n"


def effective(settings: Settings) -> dict[str, dict[str, Any]]:
    """The effective configuration as nested plain data, secrets masked."""
    out: dict[str, dict[str, Any]] = {}
    for spec in SPECS:
        section, name = spec.key.split(".", 1)
        value = getattr(getattr(settings, section), name)
        if spec.secret and value:
            value = "***"
        out.setdefault(section, {})[name] = value
    return out
