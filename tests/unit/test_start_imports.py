"""What the service imports before it serves: every import delays a restarted service's
first answer (and stays resident), so what only some requests or commands need is imported
when they come. The routes that import theirs late still answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loadwatcher import app
from loadwatcher.http import api
from tests.support.service import settings

# PyYAML: a --config file and `config check`; the others: GET /openapi.json and GET /.
LATE = (
    "yaml",
    "difflib",
    "loadwatcher.http.openapi",
    "loadwatcher.http.statuspage",
    "loadwatcher.http.statusrows",
    "loadwatcher.http.statuslist",
    "loadwatcher.http.statusnode",
    "loadwatcher.http.charts",
    "loadwatcher.http.timeline",
    "loadwatcher.push.line_protocol",
    "loadwatcher.http.promapi",
    "promql_parser",
)


def test_serving_imports_neither_yaml_nor_what_only_some_routes_need(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from loadwatcher import app, cli\n"
        "from loadwatcher.http import api\n"
        "args = cli.build_parser(scoring=False).parse_args(['serve'])\n"
        "api.make_app(app.build_engine(cli._settings(args)))\n"
        f"print(sorted(m for m in {LATE!r} if m in sys.modules))"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LOADWATCHER_", "METRICS_PROVIDER_"))
    }
    env["LOADWATCHER_JOURNAL_PATH"] = ""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert done.stdout.strip() == "[]", done.stdout


async def test_the_routes_that_import_late_answer(aiohttp_client) -> None:
    engine = app.build_engine(settings({}))
    try:
        client = await aiohttp_client(api.make_app(engine))
        spec = await client.get("/openapi.json")
        assert spec.status == 200
        assert "/watcher" in (await spec.json())["paths"]
        page = await client.get("/")
        assert page.status == 200 and page.content_type == "text/html"
        assert 'id="no-snapshot"' in await page.text()
        bad = await client.get("/", params={"sort": "nope"})
        assert bad.status == 400 and (await bad.json())["error"] == "bad_sort"
    finally:
        await engine.close()
