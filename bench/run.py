"""mcpg benchmarks: every figure is a ratio against a reference measured in the same run on the same machine.

    python bench/run.py            # the full suite (about 25 minutes on 2 cores; 5b alone about 6)
    python bench/run.py --smoke    # every scenario at a tiny size, a few minutes
    python bench/run.py --only fanout,ingest

Prints a table and writes bench/results.json and docs/benchmarks.md (figures, machine, date, how to rerun).

Without --only, the results document is written afresh. With --only, the named scenarios' results are merged into
the existing results document (the --out file; bench/results.json unless --out names another, and nothing to
merge into if that file does not exist yet): their entries replace the same entries, every other scenario's
figures stay as they were, and the markdown is regenerated from the merged document. The document keeps the date,
duration and machine of the run it started from, and lists each merged --only run under `updates` (date,
scenarios, duration, machine), which the markdown names. A smoke run is never merged into a full run's document,
nor a full run into a smoke one (the run stops before measuring). A smoke run writes nothing unless given --out or
--docs.
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
import operator_scale
import polling
import report
import scaleout

FULL = {
    "sizes": [1, 100, 1000],
    "posts": 100,
    "post_budget_s": 40.0,
    "ingest_s": 10.0,
    "poll_uris": 1000,
    "poll_warmup_s": 12.0,
    "poll_window_s": 30.0,
    "mem_sessions": 1000,
    "mem_per_session": 10,
    "mem_pool": 1000,
    "capacity_sessions": 10000,
    "capacity_per_session": 10,
    "capacity_pool": 1000,
    "namespaces": 20,
    "per_ns": 10,
    "replicas": 1,
    "warmup": True,
    "scale_namespaces": 500,
    "scale_per_ns": 10,
    "rotations": 5,
    "rotation_replicas": 3,
    "scaleout_processes": 3,
    "scaleout_sessions": 1000,
    "scaleout_posts": 100,
    "scaleout_post_budget_s": 40.0,
    "scaleout_uris": 100,
    "scaleout_warmup_s": 12.0,
    "scaleout_intervals": 3,  # whole poll intervals (10 s each) counted for the upstream-load figure
    "scaleout_lease_ttl_s": 3.0,
    "scaleout_takeovers": 5,
}
SMOKE = {
    "sizes": [2],
    "posts": 5,
    "post_budget_s": 5.0,
    "ingest_s": 1.0,
    "poll_uris": 10,
    "poll_warmup_s": 0.5,
    "poll_window_s": 10.0,
    "mem_sessions": 4,
    "mem_per_session": 2,
    "mem_pool": 4,
    "capacity_sessions": 8,
    "capacity_per_session": 2,
    "capacity_pool": 4,
    "namespaces": 2,
    "per_ns": 1,
    "replicas": 1,
    "warmup": False,
    "scale_namespaces": 4,
    "scale_per_ns": 5,
    "rotations": 1,
    "rotation_replicas": 1,  # real gateway processes roll one at a time: 3 would triple every rollout
    "scaleout_processes": 3,
    "scaleout_sessions": 6,
    "scaleout_posts": 5,
    "scaleout_post_budget_s": 5.0,
    "scaleout_uris": 4,
    "scaleout_warmup_s": 1.0,
    "scaleout_intervals": 1,
    "scaleout_lease_ttl_s": 1.0,
    "scaleout_takeovers": 1,
}
SCENARIOS = ("fanout", "ingest", "signed", "polling", "memory", "eras", "capacity", "operator", "scale", "scaleout")


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
    if "signed" in only:
        timed("signed", lambda: ingest.run_signed(workdir, p["ingest_s"]))
    if "polling" in only:
        args = (workdir, p["poll_uris"], p["poll_warmup_s"], p["poll_window_s"], smoke)
        timed("polling", lambda: polling.run(*args))
    if "memory" in only:
        args2 = (workdir, p["mem_sessions"], p["mem_per_session"], p["mem_pool"])
        timed("memory", lambda: fanout.run_memory(*args2))
    if "eras" in only:
        args4 = (workdir, p["mem_sessions"], p["mem_per_session"], p["mem_pool"])
        timed("eras", lambda: fanout.run_per_era(*args4))
    if "capacity" in only:
        args3 = (workdir, p["capacity_sessions"], p["capacity_per_session"], p["capacity_pool"])
        timed("capacity", lambda: fanout.run_capacity(*args3))
    if "operator" in only:
        sizes = (p["namespaces"], p["per_ns"], p["rotations"], p["replicas"], p["rotation_replicas"], p["warmup"])
        timed("operator", lambda: convergence.run(workdir, *sizes))
    if "scale" in only:
        timed("scale", lambda: operator_scale.run(workdir, p["scale_namespaces"], p["scale_per_ns"]))
    if "scaleout" in only:
        keys = ("processes", "sessions", "posts", "post_budget_s", "uris", "warmup_s", "intervals", "lease_ttl_s")
        kwargs = {k: p[f"scaleout_{k}"] for k in (*keys, "takeovers")}
        kwargs["budget_s"] = kwargs.pop("post_budget_s")
        timed("scaleout", lambda: scaleout.run(workdir, **kwargs))
    return results


def base_document(path: Path | None, mode: str) -> dict[str, Any] | None:
    """The results document an --only run merges into: `path`'s, if it exists. Raises ValueError, saying why, on
    a document that cannot be read or holds the other mode's run (`main` then exits 2 before measuring anything)."""
    if path is None or not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not JSON ({e}): move it away or pass --out elsewhere") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), dict) or "mode" not in doc:
        raise ValueError(f"{path} is not a results document: move it away or pass --out elsewhere")
    if doc["mode"] != mode:
        raise ValueError(f"{path} holds a {doc['mode']} run; a {mode} run is not merged into it: pass --out elsewhere")
    return doc


def merge(base: dict[str, Any], doc: dict[str, Any], only: list[str]) -> dict[str, Any]:
    """`base` with `doc`'s results (and params) in place of its own, and `doc` recorded under `updates`."""
    update = {"date": doc["date"], "wall_s": doc["wall_s"], "only": only, "results": sorted(doc["results"])}
    update["machine"] = doc["machine"]
    return {
        **base,
        "params": {**base.get("params", {}), **doc["params"]},
        "results": {**base["results"], **doc["results"]},
        "updates": [*base.get("updates", []), update],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks every scenario runs, not its timings")
    ap.add_argument(
        "--only",
        default=None,
        help=f"comma-separated subset of {', '.join(SCENARIOS)}; merged into the existing results (see above)",
    )
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default bench/results.json; smoke: none)")
    ap.add_argument("--docs", type=Path, default=None, help="markdown report (default docs/benchmarks.md; smoke: none)")
    args = ap.parse_args(argv)
    only = list(SCENARIOS) if args.only is None else [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        ap.error(f"--only: unknown scenario(s) {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
    params = SMOKE if args.smoke else FULL
    root = Path(__file__).parent
    out = args.out or (None if args.smoke else root / "results.json")
    docs = args.docs or (None if args.smoke else root.parent / "docs" / "benchmarks.md")
    try:
        base = None if args.only is None else base_document(out, "smoke" if args.smoke else "full")
    except ValueError as e:
        ap.error(f"--only merges into the existing results, but {e}")
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
    if base is not None:
        doc = merge(base, doc, only)
    if out is not None:
        out.write_text(json.dumps(doc, indent=2) + "\n")
    if docs is not None:
        docs.parent.mkdir(parents=True, exist_ok=True)
        docs.write_text(report.markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
