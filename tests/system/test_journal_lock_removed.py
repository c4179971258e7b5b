"""A clean stop leaves no ``<db>.lock`` behind; while the holder runs, a second process is
refused the journal, and its own stop removes nothing. Real service processes, host
provider (no backend needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.faults import Service

pytestmark = pytest.mark.alone


def test_clean_stop_removes_the_lock_file_and_only_the_holders(tmp_path: Path) -> None:
    db = tmp_path / "lw.db"
    lock_file = Path(f"{db}.lock")
    first = Service.host(db, tmp_path / "first.log").start()
    second = Service.host(db, tmp_path / "second.log")
    try:
        first.wait_status("/readyz", 200, timeout_s=20)
        first.wait_until("the journal locked", lock_file.exists)
        assert lock_file.read_text().strip() == str(first.pid)
        second.start()
        second.wait_status("/readyz", 200, timeout_s=20)
        second.wait_until(
            "the second one refused the journal",
            lambda: "is in use by another process" in second.log_text(),
        )
        assert f"PID {first.pid}" in second.log_text()
        code, _ = second.terminate(15)
        assert code == 0, second.log_tail()
        assert lock_file.read_text().strip() == str(first.pid)  # the refused one removed nothing
        code, _ = first.terminate(15)
        assert code == 0, first.log_tail()
    finally:
        for service in (first, second):
            if service.running():
                service.kill()
    assert not lock_file.exists()
    assert db.exists()  # the journal itself stays, of course
    assert "Traceback" not in first.log_text() + second.log_text()
