"""The files settings name, checked the way ``serve`` uses them, so that ``config check``
refuses exactly what ``serve`` would: a missing file says "no such file", a token file
without a token, a certificate and key that do not load, a CA file that is no CA bundle.

Messages name the file, never quote it: token files hold secrets.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from loadwatcher.errors import ConfigError

__all__ = ["require_ca_bundle", "require_file", "require_tls_pair", "require_tokens"]


def shown(path: str) -> str:
    """``path`` as a message shows it (a very long one cut)."""
    return path if len(path) <= 200 else path[:200] + "..."


def require_file(setting: str, path: str, note: str = "") -> None:
    """The setting must name an existing file; paths the OS refuses are reported too."""
    try:
        found = Path(path).is_file()
        directory = not found and Path(path).is_dir()
    except (OSError, ValueError) as exc:  # "File name too long", an embedded NUL byte
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(setting, f"unusable path ({reason}): {shown(path)}{note}") from None
    if directory:
        raise ConfigError(setting, f"is a directory, not a file: {shown(path)}{note}")
    if not found:
        raise ConfigError(setting, f"no such file: {shown(path)}{note}")


def require_tokens(setting: str, path: str) -> None:
    """A file of bearer tokens (one per line, ``#`` comments) that holds at least one."""
    require_file(setting, path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(setting, f"{shown(path)} is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(setting, f"cannot read {shown(path)}: {exc.strerror or exc}") from None
    if not any(line.strip() and not line.strip().startswith("#") for line in text.splitlines()):
        raise ConfigError(setting, f"{shown(path)} holds no token: every request would be refused")


def require_tls_pair(cert_setting: str, cert_file: str, key_file: str) -> None:
    """A certificate chain and its private key (PEM) that load together."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as exc:
        reason = exc.reason or "not PEM"
        raise ConfigError(
            cert_setting,
            f"{shown(cert_file)} and its key do not load as a PEM certificate chain and "
            f"matching private key ({reason})",
        ) from None
    except OSError as exc:
        raise ConfigError(cert_setting, f"cannot read {shown(cert_file)}: {exc.strerror}") from None


def require_ca_bundle(setting: str, path: str) -> None:
    """A CA bundle (PEM) that verification can use."""
    require_file(setting, path)
    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError:
        raise ConfigError(setting, f"{shown(path)} is not a PEM CA bundle") from None
    except OSError as exc:
        raise ConfigError(setting, f"cannot read {shown(path)}: {exc.strerror}") from None
