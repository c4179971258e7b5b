"""The files settings name, checked as the service uses them (``config.files``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadwatcher.config import files, resolve
from loadwatcher.errors import ConfigError
from loadwatcher.providers import registry
from tests.support.tls import make_pki


def _refused(fn, *args: str) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args)
    return str(info.value)


def test_token_files(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    assert _refused(files.require_tokens, "s", str(missing)) == f"s: no such file: {missing}"
    assert "is a directory" in _refused(files.require_tokens, "s", str(tmp_path))
    empty = tmp_path / "empty"
    empty.write_text("# comment\n\n   \n")
    assert _refused(files.require_tokens, "s", str(empty)).endswith(
        "holds no token: every request would be refused"
    )
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe secret\n")
    message = _refused(files.require_tokens, "s", str(binary))
    assert "not UTF-8" in message and "secret" not in message
    good = tmp_path / "good"
    good.write_text("# readers\ntoken-1\n")
    files.require_tokens("s", str(good))


def test_tls_files(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    files.require_tls_pair("c", str(pki.cert_file), str(pki.key_file))
    files.require_ca_bundle("ca", str(pki.ca_file))
    mismatch = _refused(files.require_tls_pair, "c", str(pki.cert_file), str(pki.client_key_file))
    assert "do not load" in mismatch
    assert "not a PEM CA bundle" in _refused(files.require_ca_bundle, "ca", str(pki.key_file))


def test_push_token_file_is_checked_whenever_set(tmp_path: Path) -> None:
    env = {"LOADWATCHER_PUSH_TOKEN_FILE": str(tmp_path / "absent"), "LOADWATCHER_JOURNAL_PATH": ""}
    with pytest.raises(ConfigError, match=r"push\.token_file: no such file"):
        resolve(None, {**env, "METRICS_PROVIDER_NAME": "push"}, catalogue=registry.catalogue())
    with pytest.raises(ConfigError, match=r"push\.token_file: no such file"):
        resolve(None, {**env, "LOADWATCHER_PUSH_RECEIVE": "true"}, catalogue=registry.catalogue())
