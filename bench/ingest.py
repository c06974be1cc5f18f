"""Scenario 2: webhook ingestion throughput with no subscribers, the server pinned to one CPU.

The load generator runs on the other CPU: `wrk` when installed (Debian: `apt-get install wrk`), else a Python
aiohttp process (bench/loadgen.py), named in the results. The reference is a bare ASGI callable returning the
same JSON, under the same uvicorn (same defaults: httptools and uvloop when installed).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import procs
from fanout import gateway_target

SERVER_CPU, LOAD_CPU = 0, 1
CONNECTIONS = 32

BARE_APP = """
import sys, uvicorn
BODY = b'{"ok":true,"uri":"bench://doc/0"}'
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False, backlog=2048)
"""


def load(url: str, seconds: float, workdir: Path) -> tuple[float, str]:
    """Requests/s of POSTs to `url` for `seconds`, from the load CPU; and the generator's name."""
    if shutil.which("wrk"):
        script = workdir / "post.lua"
        script.write_text('wrk.method = "POST"\nwrk.body = "{}"\nwrk.headers["Content-Type"] = "application/json"\n')
        argv = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{max(1, round(seconds))}s", "-s", str(script), url]
        out = subprocess.run(procs.pinned(argv, LOAD_CPU), capture_output=True, text=True, timeout=seconds + 30).stdout
        match = re.search(r"Requests/sec:\s+([\d.]+)", out)
        if match is None or "Non-2xx" in out:
            raise RuntimeError(f"wrk failed:\n{out}")
        return float(match.group(1)), "wrk"
    argv = [procs.PY, str(procs.HERE / "loadgen.py"), url, str(seconds), str(CONNECTIONS)]
    out = subprocess.run(procs.pinned(argv, LOAD_CPU), capture_output=True, text=True, timeout=seconds + 30).stdout
    return float(out.split()[-1]), "python aiohttp loadgen"


def run(workdir: Path, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    port = procs.free_port()
    bare = procs.reference(["-c", BARE_APP, str(port)], SERVER_CPU, stderr=subprocess.DEVNULL)
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/")
        load(f"http://127.0.0.1:{port}/webhooks/resource-updated/x", 1, workdir)  # warm-up
        rps, generator = load(f"http://127.0.0.1:{port}/webhooks/resource-updated/x", seconds, workdir)
        out["reference"] = {"rps": round(rps)}
    finally:
        bare.stop()
    gw, target = gateway_target(workdir, 1, cpu=SERVER_CPU)
    try:
        time.sleep(0.2)
        load(target.trigger(0), 1, workdir)
        rps, generator = load(target.trigger(0), seconds, workdir)
        out["gateway"] = {"rps": round(rps)}
    finally:
        gw.stop()
    out["generator"] = generator
    out["ratio"] = round(out["gateway"]["rps"] / out["reference"]["rps"], 2)
    out["bar"] = ">= 0.6x reference"
    out["met"] = out["ratio"] >= 0.6
    return out
