"""What the client needs to reach a protected watcher: a bearer token and a CA bundle.

A token comes from a file (the server's format: one token per line, ``#`` comments; the
first one is sent) or from the caller (the command line reads ``LOADWATCHER_TOKEN``). No
message here or elsewhere in the client ever contains the token: a file is named, never
quoted.
"""

from __future__ import annotations

import ssl

from loadwatcher.errors import ClientError

TOKEN_ENV = "LOADWATCHER_TOKEN"


class ClientOptionError(ClientError, ValueError):
    """A token or CA file the client cannot use (bad input: the command line exits 2)."""


def _checked(token: str, origin: str) -> str:
    token = token.strip()
    if not token:
        raise ClientOptionError(f"{origin} holds no token")
    # A header value cannot carry controls or spaces; such a token was never the server's.
    if not all("\x21" <= c <= "\x7e" for c in token):
        raise ClientOptionError(
            f"{origin} holds a token with characters an HTTP header cannot carry"
        )
    return token


def read_token_file(path: str) -> str:
    """The first token of ``path``; ClientOptionError naming the file (never its content)."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [line.strip() for line in fh]
    except FileNotFoundError:
        raise ClientOptionError(f"token file {path}: no such file") from None
    except IsADirectoryError:
        raise ClientOptionError(f"token file {path}: is a directory") from None
    except UnicodeDecodeError:
        raise ClientOptionError(f"token file {path}: not UTF-8 text") from None
    except OSError as exc:
        raise ClientOptionError(f"token file {path}: {exc.strerror or 'cannot read'}") from None
    tokens = [line for line in lines if line and not line.startswith("#")]
    return _checked(tokens[0] if tokens else "", f"token file {path}")


def resolve_token(token: str | None, token_file: str | None) -> str | None:
    """The token to send: from ``token_file`` when given, else ``token`` (checked), else None."""
    if token_file:
        return read_token_file(token_file)
    if token is not None and token.strip():
        return _checked(token, "the token given")
    return None


def ssl_context(ca_file: str | None) -> ssl.SSLContext | None:
    """A verifying context that trusts ``ca_file`` (PEM) only; None: the system's CAs."""
    if not ca_file:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except FileNotFoundError:
        raise ClientOptionError(f"CA file {ca_file}: no such file") from None
    except ssl.SSLError:
        raise ClientOptionError(f"CA file {ca_file}: not a PEM CA bundle") from None
    except OSError as exc:
        raise ClientOptionError(f"CA file {ca_file}: {exc.strerror or 'cannot read'}") from None
