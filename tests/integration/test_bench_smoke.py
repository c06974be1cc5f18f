"""The benchmark suite's smoke mode runs end to end: every scenario yields a figure and its reference.

Timings and bars are not asserted: this is not a timed test (the full run, `python bench/run.py`, is).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_bench_smoke_mode_yields_every_figure_and_its_reference(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    docs = tmp_path / "benchmarks.md"
    argv = [sys.executable, str(ROOT / "bench" / "run.py"), "--smoke", "--out", str(out), "--docs", str(docs)]
    # About 3 minutes on 2 busy cores (the operator scenario starts real gateway pods); the bound is only there
    # so a hang fails, and a loaded CI machine once took past 300 s.
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(out.read_text())["results"]
    for size, row in results["fanout"]["sizes"].items():
        assert row["gateway"]["p99_ms"] > 0, size
        assert row["reference"]["p99_ms"] > 0, size
        assert row["wire"]["p99_ms"] > 0, size
        # CPU time counts in clock ticks (10 ms): a few posts at this size may measure 0, never less.
        assert min(row[kind]["cpu_ms_per_fire"] for kind in ("gateway", "reference", "wire")) >= 0, size
        assert row["gateway"]["posts"] == row["reference"]["posts"] == row["wire"]["posts"] > 0
    assert results["ingest"]["gateway"]["rps"] > 0
    assert results["ingest"]["reference"]["rps"] > 0
    assert results["signed"]["gateway"]["per_cpu_s"] > 0
    assert results["signed"]["reference"]["per_cpu_s"] > 0
    assert results["polling"]["gateway"]["polls"] > 0
    assert results["polling"]["reference"]["polls"] > 0
    assert len(results["polling"]["ratios"]) == 1  # smoke: one round, both measured together
    assert results["memory"]["gateway"]["rss_mb"] > 0
    assert results["memory"]["reference"]["rss_mb"] > 0
    assert results["memory"]["wire"]["rss_mb"] > 0
    for era in ("legacy", "listen"):
        assert results["eras"][era]["gateway"]["rss_mb"] > 0
        assert results["eras"][era]["wire"]["rss_mb"] > 0
    assert results["capacity"]["gateway"]["rss_mb"] > 0
    assert results["capacity"]["wire"]["rss_mb"] > 0
    assert results["capacity"]["sessions"] == 8
    convergence = results["convergence"]
    assert convergence["gateway"]["converged_s"] > 0
    assert convergence["reference"]["kubectl_apply_s"] > 0
    assert convergence["reference"]["rendered_rollout_s"] > 0
    # per namespace: the configuration Secret, ServiceAccount, Role, RoleBinding, Service and Deployment
    assert convergence["reference"]["rendered_objects"] == 6 * convergence["namespaces"]
    assert convergence["ratio_rendered"] > 0
    assert results["rotation"]["gateway"]["retired_max_s"] > 0
    assert results["rotation"]["gateway"]["edit_served_max_s"] > 0
    assert results["rotation"]["streams"]["opened"] > 0
    assert results["rotation"]["reference"]["rollout_median_s"] > 0
    assert results["rotation"]["reference"]["pause_rollout_median_s"] > 0
    scale = results["scale"]
    assert scale["gateway"]["converged_s"] > 0
    assert scale["reference"]["rendered_rollout_s"] > 0
    assert scale["gateway"]["operator_peak_rss_mb"] > 0
    for size in ("full", "half"):
        assert scale["resync"][size]["passes"] >= scale["resync"][size]["namespaces"] > 0, size
        assert scale["resync"][size]["writes"] >= 0, size
    upstream = results["scaleout"]["upstream"]
    shares = upstream["gateway"]["shares"]
    assert set(shares) == set(upstream["gateway"]["reads_per_process"])
    if upstream["gateway"]["reads"]:  # smoke's window may hold no read
        assert abs(sum(s["polls"] for s in shares.values()) - 1) < 0.01
    text = docs.read_text()
    assert "vs kubectl apply of the ResourceWatches" in text
    assert "vs applying the rendered objects and waiting for the same rollouts" in text
    assert "| 6. rotation and a watch edit in place" in text
