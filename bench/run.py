"""mcpg benchmarks: every figure is a ratio against a reference measured in the same run on the same machine.

    python bench/run.py            # the full suite (about 10 minutes on 2 cores)
    python bench/run.py --smoke    # every scenario at a tiny size, well under a minute
    python bench/run.py --only fanout,ingest

Prints a table and writes bench/results.json and docs/benchmarks.md (figures, machine, date, how to rerun).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import convergence
import fanout
import ingest
import polling
import report

FULL = {
    "sizes": [1, 100, 1000],
    "posts": 100,
    "post_budget_s": 40.0,
    "ingest_s": 10.0,
    "poll_uris": 1000,
    "poll_warmup_s": 12.0,
    "poll_window_s": 25.0,
    "mem_sessions": 1000,
    "mem_per_session": 10,
    "mem_pool": 1000,
    "namespaces": 20,
    "per_ns": 10,
    "replicas": 1,
    "warmup": True,
    "rotations": 5,
    "rotation_replicas": 3,
}
SMOKE = {
    "sizes": [2],
    "posts": 5,
    "post_budget_s": 5.0,
    "ingest_s": 1.0,
    "poll_uris": 10,
    "poll_warmup_s": 0.5,
    "poll_window_s": 10.5,
    "mem_sessions": 4,
    "mem_per_session": 2,
    "mem_pool": 4,
    "namespaces": 2,
    "per_ns": 1,
    "replicas": 1,
    "warmup": False,
    "rotations": 1,
    "rotation_replicas": 1,  # real gateway processes roll one at a time: 3 would triple every rollout
}
SCENARIOS = ("fanout", "ingest", "polling", "memory", "operator")


def run(only: list[str], p: dict[str, Any], smoke: bool, workdir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}

    def timed(name: str, fn: Any) -> None:
        started = time.monotonic()
        print(f"== {name} ...", file=sys.stderr, flush=True)
        out = fn()
        if name == "operator":
            for key, value in out.items():
                value["wall_s"] = round(time.monotonic() - started, 1)
                results[key] = value
        else:
            out["wall_s"] = round(time.monotonic() - started, 1)
            results[name] = out

    if "fanout" in only:
        timed("fanout", lambda: fanout.run_latency(workdir, p["sizes"], p["posts"], p["post_budget_s"]))
    if "ingest" in only:
        timed("ingest", lambda: ingest.run(workdir, p["ingest_s"]))
    if "polling" in only:
        args = (workdir, p["poll_uris"], p["poll_warmup_s"], p["poll_window_s"], smoke)
        timed("polling", lambda: polling.run(*args))
    if "memory" in only:
        args2 = (workdir, p["mem_sessions"], p["mem_per_session"], p["mem_pool"])
        timed("memory", lambda: fanout.run_memory(*args2))
    if "operator" in only:
        sizes = (p["namespaces"], p["per_ns"], p["rotations"], p["replicas"], p["rotation_replicas"], p["warmup"])
        timed("operator", lambda: convergence.run(workdir, *sizes))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks every scenario runs, not its timings")
    ap.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated subset of {', '.join(SCENARIOS)}")
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default bench/results.json; smoke: none)")
    ap.add_argument("--docs", type=Path, default=None, help="markdown report (default docs/benchmarks.md; smoke: none)")
    args = ap.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    params = SMOKE if args.smoke else FULL
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcpg-bench-") as tmp:
        results = run(only, params, args.smoke, Path(tmp))
    doc = {
        "mode": "smoke" if args.smoke else "full",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.monotonic() - started, 1),
        "machine": report.machine(),
        "params": params,
        "results": results,
    }
    print(report.table(results))
    root = Path(__file__).parent
    out = args.out or (None if args.smoke else root / "results.json")
    docs = args.docs or (None if args.smoke else root.parent / "docs" / "benchmarks.md")
    if out is not None:
        out.write_text(json.dumps(doc, indent=2) + "\n")
    if docs is not None:
        docs.parent.mkdir(parents=True, exist_ok=True)
        docs.write_text(report.markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
