"""The chart's Grafana dashboard and PrometheusRule query metrics the programs really expose.

Every PromQL expression in `charts/mcpg/dashboards/mcpg.json` and `templates/prometheusrule.yaml` is reduced to
the metric names it selects (a small tokenizer: strings, label matchers, ranges and the label lists of
`by`/`without`/`on`/`ignoring`/`group_*` are dropped, then every identifier not a function or keyword is a
metric). Each must be a series the gateway's or the operator's registry exposes, as Prometheus names it
(counters with `_total`, histograms with `_bucket`/`_sum`/`_count`), or one of a few named external metrics.
A renamed metric breaks this test instead of a dashboard nobody looks at until an incident.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from mcpg_gateway import metrics as gateway_metrics
from mcpg_operator import metrics as operator_metrics

CHART = Path(__file__).parents[3] / "charts" / "mcpg"
DASHBOARD = CHART / "dashboards" / "mcpg.json"
RULES = CHART / "templates" / "prometheusrule.yaml"

EXTERNAL = frozenset({"kube_deployment_spec_replicas", "kube_deployment_status_replicas_available"})
"""Metrics of other programs the alerts use: kube-state-metrics' view of the gateway Deployments."""

_FUNCTION_NAMES = """
abs absent absent_over_time avg avg_over_time bottomk ceil changes clamp clamp_max clamp_min count
count_over_time count_values day_of_month day_of_week day_of_year days_in_month delta deriv exp floor group
histogram_avg histogram_count histogram_fraction histogram_quantile histogram_stddev histogram_stdvar
histogram_sum holt_winters hour idelta increase irate label_join label_replace last_over_time ln log10 log2 max
max_over_time min min_over_time minute month predict_linear present_over_time quantile quantile_over_time rate
resets round scalar sgn sort sort_desc sqrt stddev stddev_over_time stdvar stdvar_over_time sum sum_over_time
time timestamp topk vector year
"""
FUNCTIONS = frozenset(_FUNCTION_NAMES.split())
"""PromQL's functions and aggregations: followed by `(`, an application, not a metric."""
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"})
LABEL_LISTS = ("by", "without", "on", "ignoring", "group_left", "group_right")

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_BRACKETS = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]")
_LABEL_LIST = re.compile(rf"\b({'|'.join(LABEL_LISTS)})\s*\([^()]*\)")
_VARIABLE = re.compile(r"\$\{?\w+\}?")
_TOKEN = re.compile(r"[0-9][0-9a-zA-Z_.]*|([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana's `$variables` allowed)."""
    text = _VARIABLE.sub("", _STRING.sub('""', expr))
    text = _BRACKETS.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)  # `sum by (le) (` becomes `sum (`: an aggregation applied
    names: set[str] = set()
    for token in _TOKEN.finditer(text):
        name, call = token.group(1), token.group(2)
        if name is None or name in KEYWORDS or (call and name in FUNCTIONS):
            continue  # a number or duration, a keyword, or a function applied
        names.add(name)  # a metric; also an unknown "function" (a misspelt rate( is not one Prometheus has)
    return names


def exposed(registry: CollectorRegistry) -> set[str]:
    """Every series name `registry` exposes, as Prometheus scrapes it, whether or not a child exists yet."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
    suffixes |= {"summary": ("", "_sum", "_count", "_created"), "info": ("_info",)}
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def known_metrics() -> set[str]:
    gateway = gateway_metrics.Metrics().registry
    gateway_metrics.BusMetrics(gateway)  # registered only on a gateway with a bus: the dashboard may show it
    return exposed(gateway) | exposed(operator_metrics.REGISTRY) | EXTERNAL


def unknown(exprs: Iterable[str], known: set[str]) -> dict[str, set[str]]:
    """Each expression naming a metric not in `known`, with those names."""
    found = {expr: metric_names(expr) - known for expr in exprs}
    return {expr: names for expr, names in found.items() if names}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    """The targets' queries and the metric selector of each `label_values(selector, label)` variable."""
    exprs = [t["expr"] for p in _panels(dashboard["panels"]) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        found = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable.get("definition", ""))
        if variable["type"] == "query":
            assert found, f"variable {variable['name']}: only label_values(selector, label) is checked"
            exprs.append(found.group(1))
    return exprs


def rule_exprs(template: str) -> list[str]:
    """The `expr:` of every alert in the template, each on one line (the template promises that)."""
    exprs = re.findall(r"^\s*expr:\s*(.+)$", template, flags=re.MULTILINE)
    assert len(exprs) == len(re.findall(r"^\s*- alert:", template, flags=re.MULTILINE)), "an expr spans lines"
    return exprs


def test_every_dashboard_query_names_a_metric_the_programs_expose() -> None:
    exprs = dashboard_exprs(json.loads(DASHBOARD.read_text()))
    assert len(exprs) >= 20
    assert unknown(exprs, known_metrics()) == {}


def test_every_alert_names_a_metric_the_programs_expose_or_kube_state_metrics() -> None:
    exprs = rule_exprs(RULES.read_text())
    assert len(exprs) == 5
    assert all("{{" not in expr for expr in exprs), "a templated expr would escape this check"
    assert unknown(exprs, known_metrics()) == {}


def test_the_panels_the_operators_expect_are_on_the_dashboard() -> None:
    queried = set().union(*map(metric_names, dashboard_exprs(json.loads(DASHBOARD.read_text()))))
    assert {
        "mcpg_watch_active_watchers",
        "mcpg_watch_fired_total",
        "mcpg_watch_notifications_sent_total",
        "mcpg_watch_poll_failures_total",
        "mcpg_watch_source_losses_total",
        "mcpg_watch_sources_down",
        "mcpg_webhook_requests_total",
        "mcpg_auth_failures_total",
        "mcpg_subscribers",
        "mcpg_operator_token_transitions_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
    } <= queried


def test_a_made_up_or_misspelt_metric_is_reported() -> None:
    known = known_metrics()
    exprs = [
        'sum by (strategy) (rate(mcpg_watch_fires_total{namespace=~"$namespace"}[$__rate_interval]))',
        "histogram_quantile(0.9, rate(controller_runtime_reconcile_time_seconds[5m]))",  # no _bucket
        "mcpg_watch_fired",  # the family, without the _total Prometheus exposes
        "rat(mcpg_watch_fired_total[5m])",  # not a function: a name the check must see
        "sum(rate(mcpg_watch_fired_total[5m]))",
    ]
    assert unknown(exprs, known) == {
        exprs[0]: {"mcpg_watch_fires_total"},
        exprs[1]: {"controller_runtime_reconcile_time_seconds"},
        exprs[2]: {"mcpg_watch_fired"},
        exprs[3]: {"rat"},
    }


def test_the_tokenizer_skips_labels_strings_ranges_functions_and_keywords() -> None:
    expr = (
        'kube_deployment_spec_replicas{deployment="not_a_metric"} > 0 and on (namespace, deployment) '
        "max without (pod) (a_metric offset 1h) / ignoring (le) group_left (job) sum by (le) "
        '(rate(b_metric:ratio[$__rate_interval] @ 1609746000)) > bool 1e3 unless label_replace(c_metric, "x", '
        '"$1", "y", "(.*)")'
    )
    assert metric_names(expr) == {"kube_deployment_spec_replicas", "a_metric", "b_metric:ratio", "c_metric"}
