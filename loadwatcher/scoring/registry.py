"""The scoring plugins, each declared once: its names, its args, what it reads, its score.

A plugin module under ``loadwatcher.scoring.plugins`` declares a module-level ``PLUGIN``
(a :class:`Plugin`); the registry finds every such module on first use, so adding a plugin
is one new module. The profile run (``profile``), ``score --plugin``, its help, ``--case``
and the table's columns all read this registry. :func:`register` adds a plugin from
elsewhere (a test's, say); :func:`unregister` removes it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from loadwatcher._types import BoolArray
from loadwatcher.scoring.cluster import Cluster
from loadwatcher.scoring.common import BatchScores
from loadwatcher.scoring.pods import Pod

__all__ = [
    "TRIMARAN_DATA_SOURCE_ARGS",
    "Plugin",
    "always",
    "canonical_name",
    "default_names",
    "get",
    "names",
    "parse_plugin_args",
    "plugins",
    "register",
    "unregister",
]

A = TypeVar("A")


def always(pod: Pod) -> bool:
    """A ``fallback`` predicate: every pod."""
    return True


@dataclass(frozen=True)
class Plugin(Generic[A]):
    """One scoring plugin as a scheduler profile would run it.

    ``score(cluster, pod, args, keep)`` scores every row of ``cluster``; ``keep`` marks the
    rows no Filter plugin rejected (a plugin that normalises over the scored nodes reads
    it). ``filters``: a Filter plugin, run before the others, whose rejections leave the
    node set. ``fallback(pod)``: whether stale or missing nodes are scored by allocation for
    this pod (None: never). ``windows(args)``: rollup windows read besides the snapshot's
    own (the command line fetches them). ``reads`` and ``divides_by`` say, for ``--help``,
    what the plugin takes from the watcher and which node resource (capacity or
    allocatable) it divides by. ``order`` places it in the default profile and the table.
    """

    name: str  # upstream name, e.g. TargetLoadPacking
    short: str  # the table's column, e.g. TLP
    order: int
    parse_args: Callable[[Mapping[str, Any]], A]  # upstream JSON names -> typed args
    score: Callable[[Cluster, Pod, A, BoolArray], BatchScores]
    reads: str
    divides_by: str
    filters: bool = False
    fallback: Callable[[Pod], bool] | None = None
    windows: Callable[[A], frozenset[str]] | None = None
    aliases: tuple[str, ...] = ()  # other accepted spellings besides name and short
    # In ``score``'s default plugin set. The default scheduler's own scorers (baselines for
    # ``simulate``) are not: ``score`` answers what the load-aware plugins would do.
    default: bool = True
    # Upstream argument keys scoring does not read. ``inert_args`` change how the plugin
    # reaches its data, not the score (any value is accepted); ``unsupported_args`` would
    # change the score in ways not implemented here (accepted only unset: null, false, empty).
    inert_args: frozenset[str] = frozenset()
    unsupported_args: frozenset[str] = frozenset()

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every accepted spelling (matched case-insensitively)."""
        return (self.name, self.short, *self.aliases)


_PLUGINS: dict[str, Plugin[Any]] = {}
_loaded = False


def _load_builtins() -> None:
    """Register the ``PLUGIN`` of every module under ``loadwatcher.scoring.plugins``, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from loadwatcher.scoring import plugins as package

    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        plugin = getattr(importlib.import_module(info.name), "PLUGIN", None)
        if isinstance(plugin, Plugin):
            register(plugin)


def register(plugin: Plugin[A]) -> Plugin[A]:
    """Add ``plugin``; ValueError when one of its spellings is another plugin's."""
    _load_builtins()
    taken = {s.lower(): p.name for p in _PLUGINS.values() for s in p.spellings}
    for spelling in plugin.spellings:
        other = taken.get(spelling.lower())
        if other is not None:
            raise ValueError(f"plugin {plugin.name}: {spelling!r} already names {other}")
    _PLUGINS[plugin.name] = plugin
    return plugin


def unregister(name: str) -> None:
    """Remove the plugin of upstream name ``name`` (nothing when it is not registered)."""
    _PLUGINS.pop(name, None)


def plugins() -> tuple[Plugin[Any], ...]:
    """Every registered plugin, in profile order."""
    _load_builtins()
    return tuple(sorted(_PLUGINS.values(), key=lambda p: (p.order, p.name)))


def names() -> tuple[str, ...]:
    """The upstream names of every registered plugin, in profile order."""
    return tuple(p.name for p in plugins())


def default_names() -> tuple[str, ...]:
    """The plugins ``score`` runs when none is named, in profile order."""
    return tuple(p.name for p in plugins() if p.default)


def canonical_name(name: str) -> str:
    """The plugin's upstream name from any accepted spelling; ValueError if unknown."""
    wanted = name.lower()
    for plugin in plugins():
        if any(s.lower() == wanted for s in plugin.spellings):
            return plugin.name
    others = [s for p in plugins() for s in (p.short, *p.aliases)]
    raise ValueError(
        f"unknown plugin {name!r}; expected one of {', '.join(names())} (or {', '.join(others)})"
    )


def get(name: str) -> Plugin[Any]:
    """The plugin of upstream name (or any accepted spelling) ``name``; ValueError if unknown."""
    _load_builtins()
    plugin = _PLUGINS.get(name)
    return plugin if plugin is not None else _PLUGINS[canonical_name(name)]


def parse_plugin_args(name: str, raw: Any) -> Any:
    """Typed arguments for plugin ``name`` from its upstream JSON form (None = defaults).

    Strict, as kube-scheduler decodes its configuration: a key the plugin's ``parse_args``
    never looks at is refused with its path, so that a typo cannot silently leave an
    argument at its default."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{name} args: expected a mapping")
    plugin = get(name)
    seen = _Watched(raw)
    args = plugin.parse_args(seen)
    for key in sorted(plugin.unsupported_args & set(raw)):
        if raw[key]:
            raise ValueError(
                f"{name} args.{key}: not supported by this scorer (only unset), got {raw[key]!r}"
            )
    allowed = seen.asked | plugin.inert_args | plugin.unsupported_args | _TYPE_META
    unknown = sorted(set(raw) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed - _TYPE_META))
        raise ValueError(f"{name} args.{unknown[0]}: unknown key (known: {known})")
    return args


# The Trimaran plugins' args say where to read the metrics (TrimaranSpec): not the score.
TRIMARAN_DATA_SOURCE_ARGS = frozenset({"metricProvider", "watcherAddress"})

# A pluginConfig entry's args may carry their own type (``apiVersion``, ``kind``).
_TYPE_META = frozenset({"apiVersion", "kind"})


class _Watched(Mapping[str, Any]):
    """A read-only mapping that remembers which keys were asked for."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = raw
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.asked.add(key)
        return self._raw[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.asked.add(key)
        return key in self._raw

    def __iter__(self) -> Iterator[str]:
        # Whoever walks every key takes them all as known.
        self.asked.update(self._raw)
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)
