"""Resolution of every setting from YAML < environment < flags, given a catalogue.

Pure: it takes the YAML text, the environment mapping and the flag values, and returns
``Settings`` or raises ``ConfigError`` naming the setting. The Go load-watcher variables
(``METRICS_PROVIDER_NAME`` ...) are aliases of ours, so a deployment keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from loadwatcher.config import files
from loadwatcher.config.catalogue import Catalogue, installed
from loadwatcher.config.files import require_file
from loadwatcher.config.settings import Settings
from loadwatcher.errors import ConfigError

# The order in which an unknown section's message lists the sections: the order they came
# in (pinned by the tests of the messages); sections not named here follow in table order.
_LISTED_FIRST = (
    "server",
    "journal",
    "poll",
    "provider",
    "prometheus",
    "log",
    "analysis",
    "health",
    "corroborate",
    "query",
)


def _flatten_yaml(text: str, source: str, cat: Catalogue) -> dict[str, Any]:
    # Imported here: most starts have no configuration file, and each import delays serving.
    import yaml

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
        if section not in cat.section_names:
            raise ConfigError(_name(section), _unknown_section(str(section), cat))
        if not isinstance(body, dict):
            raise ConfigError(str(section), "must be a mapping")
        for name, value in body.items():
            key = f"{section}.{name}"
            if key not in cat.specs_by_key:
                raise ConfigError(
                    f"{section}.{_name(name)}", _unknown_setting(section, str(name), cat)
                )
            if isinstance(value, (dict, list)):
                raise ConfigError(key, "must be a scalar value")
            flat[key] = value
    return flat


def _closest(word: str, known: Iterable[str]) -> str | None:
    import difflib  # only a mistyped setting gets here

    found = difflib.get_close_matches(word, list(known), n=1)
    return found[0] if found else None


def _leaves(cat: Catalogue) -> Iterable[str]:
    return (key.split(".", 1)[1] for key in cat.specs_by_key)


def _keys_named(name: str, cat: Catalogue) -> str:
    """The settings whose name in their section is ``name``: ``a.x or b.x``."""
    return " or ".join(key for key in cat.specs_by_key if key.split(".", 1)[1] == name)


def _unknown_section(section: str, cat: Catalogue) -> str:
    if section in cat.specs_by_key:  # provider.address: x, flat instead of nested
        head, name = section.split(".", 1)
        return f"unknown section; write settings under their section ({head}: {{{name}: ...}})"
    near = _closest(section, cat.section_names)
    if near is None:  # a setting put at the top level (port: 2020)?
        leaf = _closest(section, _leaves(cat))
        near = _keys_named(leaf, cat) if leaf else None
    if near is None:
        first = [name for name in _LISTED_FIRST if name in cat.section_names]
        listed = first + [name for name in cat.section_names if name not in first]
        return f"unknown section; expected one of {', '.join(listed)}"
    return f"unknown section; did you mean {near}?"


def _unknown_setting(section: str, name: str, cat: Catalogue) -> str:
    prefix = section + "."
    names = [key[len(prefix) :] for key in cat.specs_by_key if key.startswith(prefix)]
    near = _closest(name, names)
    if near is not None:
        return f"unknown setting; did you mean {prefix}{near}?"
    elsewhere = _closest(name, _leaves(cat))
    if elsewhere is not None:  # in another section (server: {interval_s: 5})
        return f"unknown setting; did you mean {_keys_named(elsewhere, cat)}?"
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
    catalogue: Catalogue | None = None,
) -> Settings:
    """Build Settings from YAML < environment < flags; raise ConfigError on the first bad value."""
    cat = catalogue or installed()
    raw: dict[str, tuple[Any, str]] = {}
    if yaml_text:
        for key, value in _flatten_yaml(yaml_text, yaml_source, cat).items():
            raw[key] = (value, key)
    env = env or {}
    flags = flags or {}
    for spec in cat.specs:
        # Our own name wins over the Go load-watcher alias when both are set.
        for name in (*spec.env, spec.env_name):
            if name in env:
                raw[spec.key] = (env[name], name)
        if spec.flag is not None and flags.get(spec.flag) is not None:
            raw[spec.key] = (flags[spec.flag], "--" + spec.flag.replace("_", "-"))
    values: dict[str, Any] = {}
    for spec in cat.specs:
        if spec.key not in raw:
            values[spec.key] = spec.default
            continue
        value, origin = raw[spec.key]
        parse = spec.parse
        if spec.key == "provider.address":  # after provider.name, in the catalogue's order
            chosen = cat.providers.get(values.get("provider.name", ""))
            parse = (chosen.parse_address if chosen is not None else None) or parse
        try:
            values[spec.key] = parse(_as_text(value))
        except ValueError as exc:
            name = spec.key if origin == spec.key else f"{spec.key} (from {origin})"
            raise ConfigError(name, str(exc)) from None
    settings = _build(values, cat)
    _check(settings, cat)
    return settings


def _build(values: Mapping[str, Any], cat: Catalogue) -> Settings:
    own: dict[str, Any] = {}
    providers: dict[str, Any] = {}
    for section in cat.sections:
        prefix = section.name + "."
        fields = {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
        into = providers if section.name in cat.own_sections else own
        into[section.name] = section.settings(**fields)
    return Settings(**own, sections=providers)


def _check(settings: Settings, cat: Catalogue) -> None:
    provider = settings.provider
    chosen = cat.providers.get(provider.name)
    if chosen is not None and chosen.needs_address and not provider.address:
        raise ConfigError(
            "provider.address",
            f"required for provider {provider.name!r} (METRICS_PROVIDER_ADDRESS)",
        )
    needs_token = chosen is not None and chosen.needs_token
    if needs_token and not provider.token and not provider.token_file:
        raise ConfigError(
            "provider.token",
            f"required for provider {provider.name!r} (METRICS_PROVIDER_TOKEN), "
            "or provider.token_file",
        )
    if provider.token_file:
        require_file("provider.token_file", provider.token_file)
    if provider.ca_file:
        files.require_ca_bundle("provider.ca_file", provider.ca_file)
    server = settings.server
    if bool(server.tls_cert_file) != bool(server.tls_key_file):
        raise ConfigError("server.tls_key_file", "set both TLS files, or neither")
    for key in ("tls_cert_file", "tls_key_file"):
        path = getattr(server, key)
        if path:
            require_file(f"server.{key}", path)
    if server.tls_cert_file and server.tls_key_file:
        files.require_tls_pair("server.tls_cert_file", server.tls_cert_file, server.tls_key_file)
    for spec in cat.specs:  # the files a setting names, checked as serve will use them
        if spec.check is not None:
            head, name = spec.key.split(".", 1)
            value = getattr(getattr(settings, head), name)
            if value:
                spec.check(spec.key, value)
    if settings.journal.retention_s < 900:
        raise ConfigError("journal.retention_s", "must be at least 900 (the 15m window)")
    corroborating = settings.corroborate
    other = cat.providers.get(corroborating.name or "")
    if other is not None and other.needs_address and not corroborating.address:
        raise ConfigError("corroborate.address", f"required for provider {other.name!r}")
    if chosen is not None and chosen.check is not None:
        section = chosen.section
        chosen.check(settings.sections[section.name] if section is not None else None)


def load(
    path: str | None,
    env: Mapping[str, str],
    flags: Mapping[str, Any],
    *,
    catalogue: Catalogue | None = None,
) -> Settings:
    """Read the YAML file (if any) and resolve; file errors become ConfigError."""
    text = None
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConfigError("--config", f"cannot read {files.shown(path)}: {reason}") from exc
        except ValueError as exc:  # not UTF-8 text, or a NUL byte in the path
            raise ConfigError("--config", f"cannot read {files.shown(path)}: {exc}") from exc
    return resolve(text, env, flags, yaml_source=path or "config", catalogue=catalogue)


def markdown_table(catalogue: Catalogue | None = None) -> str:
    """Every setting as a Markdown table (the README's configuration reference)."""
    rows = [
        "| setting (YAML) | environment | flag | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for spec in (catalogue or installed()).specs:
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


def effective(settings: Settings, catalogue: Catalogue | None = None) -> dict[str, dict[str, Any]]:
    """The effective configuration as nested plain data, secrets masked."""
    out: dict[str, dict[str, Any]] = {}
    for spec in (catalogue or installed()).specs:
        section, name = spec.key.split(".", 1)
        value = getattr(getattr(settings, section), name)
        if spec.secret and value:
            value = "***"
        out.setdefault(section, {})[name] = value
    return out
