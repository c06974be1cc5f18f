"""The caps fitted to the container's memory limit: the limit read from cgroup trees (v2, v1, nested, unlimited,
unreadable) laid out under tmp_path, the arithmetic of the fit, and a fitted configuration that stays valid and is
what a `Gateway` serves, at start and after a swap."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mcpg_gateway import memory_fit
from mcpg_gateway.contract import check, config
from mcpg_gateway.gateway import Gateway, Options
from mcpg_testing.configs import gateway_config, watched

MIB = 1024 * 1024
REPO = Path(__file__).resolve().parents[3]
V1_UNLIMITED = "9223372036854771712"
CONTAINER = "/kubepods/burstable/pod1/abc"


def _tree(root: Path, cgroup: str, files: dict[str, str]) -> Path:
    """`root` holding /proc/self/cgroup (`cgroup`) and each of `files` (a path under /sys/fs/cgroup: its text)."""
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    for path, text in files.items():
        file = root / "sys/fs/cgroup" / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
    return root


def _stat(limit: str) -> str:
    return f"cache 0\nrss 0\nhierarchical_memory_limit {limit}\nhierarchical_memsw_limit {limit}\n"


def test_cgroup_v2_memory_max_is_the_limit(tmp_path: Path) -> None:
    root = _tree(tmp_path, "0::/pod/app\n", {"pod/app/memory.max": f"{256 * MIB}\n", "pod/memory.max": "max\n"})
    assert memory_fit.container_limit(root) == 256 * MIB


def test_cgroup_v2_a_parents_smaller_limit_binds_the_child(tmp_path: Path) -> None:
    files = {"a/b/c/memory.max": "max\n", "a/b/memory.max": f"{128 * MIB}\n", "a/memory.max": f"{512 * MIB}\n"}
    assert memory_fit.container_limit(_tree(tmp_path, "0::/a/b/c\n", files)) == 128 * MIB


def test_cgroup_v2_max_everywhere_is_no_limit(tmp_path: Path) -> None:
    root = _tree(tmp_path, "0::/a\n", {"a/memory.max": "max\n", "memory.max": "max\n"})
    assert memory_fit.container_limit(root) is None


def test_cgroup_v2_in_a_namespace_reads_the_root(tmp_path: Path) -> None:
    assert memory_fit.container_limit(_tree(tmp_path, "0::/\n", {"memory.max": f"{300 * MIB}\n"})) == 300 * MIB


def test_cgroup_v1_prefers_the_hierarchical_limit(tmp_path: Path) -> None:
    cgroup = "5:cpu,cpuacct:/x\n4:memory:/process_api/1/test\n0::/\n"
    files = {
        "memory/process_api/1/test/memory.stat": _stat(str(256 * MIB)),
        "memory/process_api/1/test/memory.limit_in_bytes": V1_UNLIMITED,
    }
    assert memory_fit.container_limit(_tree(tmp_path, cgroup, files)) == 256 * MIB


def test_cgroup_v1_without_a_stat_reads_limit_in_bytes(tmp_path: Path) -> None:
    files = {"memory/app/memory.limit_in_bytes": f"{64 * MIB}\n"}
    assert memory_fit.container_limit(_tree(tmp_path, "4:memory:/app\n", files)) == 64 * MIB


def test_cgroup_v1_in_a_container_falls_back_to_the_mounts_root(tmp_path: Path) -> None:
    # The container sees its own cgroup at the mount's root, though /proc/self/cgroup names the host's path.
    files = {"memory/memory.limit_in_bytes": str(256 * MIB), "memory/memory.stat": _stat(str(256 * MIB))}
    assert memory_fit.container_limit(_tree(tmp_path, f"9:memory:{CONTAINER}\n", files)) == 256 * MIB


def test_cgroup_v1_unlimited_is_no_limit(tmp_path: Path) -> None:
    files = {"memory/memory.limit_in_bytes": V1_UNLIMITED, "memory/memory.stat": _stat(V1_UNLIMITED)}
    assert memory_fit.container_limit(_tree(tmp_path, "4:memory:/\n", files)) is None


def test_hybrid_takes_the_smaller_of_v1_and_v2(tmp_path: Path) -> None:
    files = {"memory.max": f"{512 * MIB}\n", "memory/app/memory.limit_in_bytes": str(256 * MIB)}
    assert memory_fit.container_limit(_tree(tmp_path, "4:memory:/app\n0::/\n", files)) == 256 * MIB


@pytest.mark.parametrize("text", ["", "garbage\n", "-1\n", "0\n"])
def test_an_unparsable_limit_is_no_limit(tmp_path: Path, text: str) -> None:
    assert memory_fit.container_limit(_tree(tmp_path, "0::/a\n", {"a/memory.max": text})) is None


def test_no_proc_no_sys_is_no_limit(tmp_path: Path) -> None:
    assert memory_fit.container_limit(tmp_path) is None
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("4:memory:/gone\n0::/gone\n")
    assert memory_fit.container_limit(tmp_path) is None


def test_an_unreadable_limit_file_is_no_limit(tmp_path: Path) -> None:
    root = _tree(tmp_path, "0::/a\n", {})
    (root / "sys/fs/cgroup/a/memory.max").mkdir(parents=True)  # a directory: reading it fails
    assert memory_fit.container_limit(root) is None


def test_a_path_leading_out_of_the_mount_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "sys/memory.max").parent.mkdir(parents=True)
    (tmp_path / "sys/memory.max").write_text(str(MIB))  # outside /sys/fs/cgroup: never read
    root = _tree(tmp_path, "0::/../..\n", {"memory.max": f"{256 * MIB}\n"})
    assert memory_fit.container_limit(root) == 256 * MIB


def test_256_mib_lowers_the_default_totals_by_one_factor() -> None:
    result = memory_fit.fit(config.LimitsConfig(), 256 * MIB)
    limits = result.limits
    assert (limits.sessions_total, limits.listen_streams_total, limits.watches_total) == (3359, 172, 172)
    assert (limits.sessions_per_principal, limits.watches_per_principal) == (128, 10)  # already within
    assert limits.listen_streams_per_principal == 64
    assert memory_fit.fit(config.LimitsConfig(), 170 * MIB).limits.listen_streams_per_principal == 52  # its total
    assert memory_fit.COSTS.of(limits) <= memory_fit.COSTS.budget(256 * MIB)
    assert {c.field for c in result.lowered} == {
        "sessions_total",
        "listen_streams_total",
        "watches_total",
    }


def test_the_fitted_totals_fill_the_budget_without_passing_it() -> None:
    for mib in (200, 256, 384, 490, 500):
        result = memory_fit.fit(config.LimitsConfig(), mib * MIB)
        budget = memory_fit.COSTS.budget(mib * MIB)
        used = memory_fit.COSTS.of(result.limits)
        assert used <= budget
        assert budget - used < memory_fit.SESSION_BYTES + memory_fit.LISTEN_STREAM_BYTES + memory_fit.WATCH_BYTES


def test_caps_that_fit_are_left_as_configured() -> None:
    limits = config.LimitsConfig(
        sessions_total=500, listen_streams_total=20, listen_streams_per_principal=20, watches_total=20
    )
    result = memory_fit.fit(limits, 256 * MIB)
    assert result.limits is limits
    assert result.lowered == ()


def test_no_limit_fits_nothing() -> None:
    limits = config.LimitsConfig()
    assert memory_fit.fit(limits, None) == memory_fit.Fit(limits)


def test_a_limit_below_an_idle_gateway_leaves_one_of_each() -> None:
    result = memory_fit.fit(config.LimitsConfig(), 100 * MIB)
    for total, each in memory_fit.PER_PRINCIPAL.items():
        assert getattr(result.limits, total) == getattr(result.limits, each) == 1
    assert "no room beyond an idle gateway" in result.describe()


def test_the_fitted_limits_stay_a_valid_configuration() -> None:
    limits = config.LimitsConfig(
        sessions_per_principal=10_000, watches_per_principal=512, listen_streams_per_principal=512
    )
    for mib in (64, 128, 256, 300, 512, 1024, 4096):
        fitted = memory_fit.fit(limits, mib * MIB).limits
        assert config.LimitsConfig.model_validate(fitted.model_dump()) == fitted
        assert fitted.sessions_per_principal == fitted.sessions_total  # lowered with its total, never above it


def test_other_limits_are_untouched() -> None:
    limits = config.LimitsConfig(connections=1000, upstream_connections=7, header_timeout_s=3)
    fitted = memory_fit.fit(limits, 256 * MIB).limits
    assert (fitted.connections, fitted.upstream_connections, fitted.header_timeout_s) == (1000, 7, 3)


def test_the_line_says_what_was_lowered_from_what_to_what_and_why() -> None:
    line = memory_fit.fit(config.LimitsConfig(), 256 * MIB).describe()
    assert "256 MiB" in line
    assert "sessions_total 10000 -> 3359" in line
    assert "listen_streams_total 512 -> 172" in line
    assert "watches_total 512 -> 172" in line
    assert "26.0 KB a session" in line
    assert "25%" in line


def test_one_warning_when_lowered_one_info_when_it_fits(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=memory_fit.__name__)
    memory_fit.log(memory_fit.fit(config.LimitsConfig(), 256 * MIB))
    memory_fit.log(memory_fit.fit(config.LimitsConfig(), 8192 * MIB))
    memory_fit.log(memory_fit.fit(config.LimitsConfig(), None))  # no limit: nothing to say
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
    assert "fit the container memory limit of 8192 MiB as configured" in caplog.records[1].getMessage()


def _config(**limits: int) -> config.GatewayConfig:
    raw = gateway_config(watched("reports", "drive://folder/reports", {"type": "webhook", "token": "t"}))
    raw["gateway"]["limits"] = limits
    return check.load(raw, environ={})


async def test_a_gateway_serves_the_fitted_caps_and_shows_them() -> None:
    gw = Gateway(_config(), Options(memory_limit_bytes=256 * MIB))
    try:
        assert gw.config.gateway.limits.sessions_total == 3359
        assert gw.metrics.registry.get_sample_value("mcpg_limit_fitted", {"limit": "sessions_total"}) == 3359
        assert gw.metrics.registry.get_sample_value("mcpg_limit_fitted", {"limit": "watches_total"}) == 172
    finally:
        await gw.aclose()


async def test_a_swapped_configuration_is_fitted_the_same_way(caplog: pytest.LogCaptureFixture) -> None:
    gw = Gateway(_config(), Options(memory_limit_bytes=256 * MIB))
    try:
        caplog.set_level(logging.INFO, logger=memory_fit.__name__)
        caplog.clear()  # the start's own line
        same = _config()
        gw.swap(same, gw.verify(same))
        assert gw.config.gateway.limits.watches_total == 172
        assert caplog.records == []  # the same fit is not said again
        bigger = _config(sessions_total=20_000, sessions_per_principal=20_000)
        gw.swap(bigger, gw.verify(bigger))
        limits = gw.config.gateway.limits
        assert limits == memory_fit.fit(bigger.gateway.limits, 256 * MIB).limits
        assert (limits.sessions_total, limits.sessions_per_principal, limits.watches_total) == (3541, 3541, 90)
        assert gw.metrics.registry.get_sample_value("mcpg_limit_fitted", {"limit": "watches_total"}) == 90
        assert [r.levelno for r in caplog.records] == [logging.WARNING]
    finally:
        await gw.aclose()


async def test_without_a_limit_the_gateway_serves_the_caps_as_configured() -> None:
    cfg = _config()
    gw = Gateway(cfg, Options())
    try:
        assert gw.config is cfg
        assert gw.metrics.registry.get_sample_value("mcpg_limit_fitted", {"limit": "sessions_total"}) == 10_000
    finally:
        await gw.aclose()


def _holds(mib: int) -> tuple[str, str, str]:
    limits = memory_fit.fit(config.LimitsConfig(), mib * MIB).limits
    return f"{limits.sessions_total:,}", f"{limits.listen_streams_total:,}", f"{limits.watches_total:,}"


def test_the_chart_and_the_reference_say_what_a_memory_limit_holds() -> None:
    chart = " ".join(line.strip(" #") for line in (REPO / "charts/mcpg/values.yaml").read_text().splitlines())
    reference = (REPO / "docs/reference.md").read_text()
    small = "256Mi holds {} sessions, {} listen streams and {} watches".format(*_holds(256))
    assert small in chart
    assert f"limits.memory {small}" in reference
    assert _holds(512) == ("10,000", "512", "512")
    assert "512Mi all of them" in chart
    assert "512Mi all of them" in reference
    assert _holds(500) != ("10,000", "512", "512")  # so "all of them" is news at 512Mi
