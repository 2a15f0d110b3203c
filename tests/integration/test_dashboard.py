"""The Grafana dashboard (deploy/grafana/xbng.json) against a running xbngd:
every metric that a panel's PromQL (or a template variable) queries is in
the /metrics of an xbngd in fleet mode (one etcd member in the lab), which
exports the standalone families and the fleet ones; and every label value a
query matches on (kind="drop", reason=~"drop_policed_.*") is one that some
sample of that metric carries. A misspelt metric, label or value in a panel
would show an empty graph in Grafana and fails here.

The expressions are parsed, not grepped: string literals, ranges, label
lists of by/without/on/ignoring/group_*, PromQL functions and keywords are
told apart from the metric names and their matchers.
"""
from __future__ import annotations

import copy
import json
import os
import re
import unittest

from xbnglab import prom
from xbnglab.etcd import FleetNode
from xbnglab.fixture import LabSuite
from xbnglab.lab import wait_for
from xbnglab.xbngd import find_pass_obj

DASHBOARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                         "grafana", "xbng.json")

# PromQL's functions and aggregation operators (Prometheus 2.x).
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp",
    "clamp_max", "clamp_min", "count_over_time", "day_of_month", "day_of_week", "day_of_year",
    "days_in_month", "delta", "deriv", "exp", "floor", "histogram_quantile", "holt_winters",
    "hour", "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time", "ln",
    "log10", "log2", "max_over_time", "min_over_time", "minute", "month", "predict_linear",
    "present_over_time", "quantile_over_time", "rate", "resets", "round", "scalar", "sgn", "sort",
    "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "time",
    "timestamp", "vector", "year",
}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile"}
FUNCTIONS |= AGGREGATIONS
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
OTHER_KEYWORDS = {"offset", "bool", "and", "or", "unless", "atan2", "inf", "nan"}

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+)(?![A-Za-z0-9_:])
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<var>\$\{?\w+\}?)
  | (?P<punct>==|!=|=~|!~|>=|<=|[-+*/%^<>=(){},@])
""", re.X)


def _tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot parse {expr[pos:pos + 20]!r} in {expr!r}")
        pos = m.end()
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
    return out


def selectors(expr: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """The vector selectors of a PromQL expression: (metric, [(label, op, value)])."""
    toks, out, i = _tokens(expr), [], 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if kind == "ident" and text in LABEL_LIST_KEYWORDS:
            i += 1
            if i < len(toks) and toks[i][1] == "(":  # (label, ...): never metrics
                while toks[i][1] != ")":
                    i += 1
                i += 1
            continue
        if kind == "ident" and text in AGGREGATIONS and nxt in ("by", "without"):
            i += 1  # sum by (label) (...)
            continue
        if kind == "ident" and nxt == "(":
            if text not in FUNCTIONS:
                raise ValueError(f"{text}() is no PromQL function in {expr!r}")
            i += 1
            continue
        if kind == "ident" and text.lower() in OTHER_KEYWORDS:
            i += 1
            continue
        if kind == "punct" and text == "{":
            raise ValueError(f"a selector without a metric name in {expr!r}")
        if kind != "ident":
            i += 1
            continue
        matchers = []
        i += 1
        if i < len(toks) and toks[i][1] == "{":
            i += 1
            while toks[i][1] != "}":
                if toks[i][1] == ",":
                    i += 1
                    continue
                (lk, label), (_, op), (vk, value) = toks[i], toks[i + 1], toks[i + 2]
                if lk != "ident" or op not in ("=", "!=", "=~", "!~") or vk != "string":
                    raise ValueError(f"bad matcher {label}{op}{value} in {expr!r}")
                matchers.append((label, op, json.loads(value) if value[0] == '"' else value[1:-1]))
                i += 3
            i += 1
        out.append((text, matchers))
    return out


def dashboard_queries(doc: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query template variable."""
    out = []

    def walk(panels):
        for p in panels:
            if p.get("type") == "row":
                walk(p.get("panels", []))
                continue
            targets = p.get("targets", [])
            if not targets:
                raise AssertionError(f"panel {p.get('title')!r} has no query")
            for t in targets:
                out.append((f"panel {p['title']!r} {t.get('refId')}", t["expr"]))
    walk(doc["panels"])
    for v in doc.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q)
        if not m:
            raise AssertionError(f"variable {v['name']}: unsupported query {q!r}")
        out.append((f"variable ${v['name']}", m.group(1)))
    return out


def missing(doc: dict, exposition: str) -> list[str]:
    """What the dashboard queries that the exposition does not have."""
    series = prom.series(exposition)
    problems = []
    for where, expr in dashboard_queries(doc):
        sels = selectors(expr)
        if not sels:
            problems.append(f"{where}: no metric in {expr!r}")
        for name, matchers in sels:
            if name not in series:
                problems.append(f"{where}: {name} is not in /metrics")
                continue
            for lab, op, value in matchers:
                if "$" in value or op in ("!=", "!~"):
                    continue  # Grafana variables; exclusions match anything else
                hit = (lambda s: s.get(lab) == value) if op == "=" else \
                      (lambda s: re.fullmatch(value, s.get(lab, "")) is not None)
                if not any(hit(s) for s in series[name]):
                    problems.append(f"{where}: no sample of {name} has {lab}{op}{value!r}")
    return problems


class SelectorParsingTest(unittest.TestCase):
    def test_metrics_and_matchers_are_told_from_functions_and_labels(self):
        self.assertEqual(
            selectors('histogram_quantile(0.99, sum by (le, method) '
                      '(rate(xbng_a_bucket{instance=~"$instance",kind="drop"}[$__rate_interval])))'),
            [("xbng_a_bucket", [("instance", "=~", "$instance"), ("kind", "=", "drop")])])
        self.assertEqual(selectors('8 * sum without (port) (increase(a[5m] offset 1h)) > 0 '
                                   'and on (node) b'), [("a", []), ("b", [])])
        self.assertEqual(selectors('sum by (reason) (rate(m{kind="x"}[1m])) / max without(a) (n)'),
                         [("m", [("kind", "=", "x")]), ("n", [])])
        self.assertEqual(selectors("time() - xbng_start_time_seconds"),
                         [("xbng_start_time_seconds", [])])
        with self.assertRaises(ValueError):
            selectors("rte(xbng_a[5m])")


class DashboardTest(LabSuite):
    @classmethod
    def setUpLab(cls):
        with open(DASHBOARD) as f:
            cls.doc = json.load(f)
        cls.start_etcd(members=1)
        cls.node = n = FleetNode(cls.x.lab, 1, cls.etcd_ns, cls.peer, find_pass_obj())
        n.start(members=(0,))
        wait_for(lambda: n.metrics().get("xbng_fleet_synced") == 1, 30, 0.2,
                 "the fleet node to sync")
        cls.exposition = n.scrape(timeout=10)

    def panels(self) -> list[dict]:
        out = []
        for p in self.doc["panels"]:
            out += p.get("panels", []) if p.get("type") == "row" else [p]
        return out

    def test_every_queried_metric_is_exported(self):
        queries = dashboard_queries(self.doc)
        names = {n for _, e in queries for n, _ in selectors(e)}
        print(f"\n  {len(queries)} queries, {len(names)} metrics: {' '.join(sorted(names))}")
        self.assertEqual(missing(self.doc, self.exposition), [])

    def test_a_misspelt_metric_or_label_value_is_found(self):
        for old, new in (("xbng_watchers{", "xbng_watcher{"),
                         ('kind="drop"', 'kind="dropped"'),
                         ('reason=~"drop_policed_.*"', 'reason=~"policed_.*"'),
                         ("xbng_fleet_synced{", "xbng_fleet_sync{")):
            bad = copy.deepcopy(self.doc)
            targets = [t for p in bad["panels"] for t in p.get("targets", []) if old in t["expr"]]
            self.assertTrue(targets, old)
            targets[0]["expr"] = targets[0]["expr"].replace(old, new, 1)
            self.assertNotEqual(missing(bad, self.exposition), [], new)

    def test_the_panels_operators_asked_for(self):
        titles = {p["title"] for p in self.panels()}
        for t in ("Per-port traffic", "Drops by reason", "Punts", "DHCP and RA answered",
                  "DHCP and RA refused", "Policed traffic", "API connections and watchers",
                  "Fleet status"):
            self.assertIn(t, titles)
        # The datasource is a variable: the dashboard imports into any Grafana.
        ds = [v for v in self.doc["templating"]["list"] if v["type"] == "datasource"]
        self.assertEqual([(v["name"], v["query"]) for v in ds], [("datasource", "prometheus")])
        for p in self.panels():
            self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
        ids = [p["id"] for p in self.doc["panels"]]
        ids += [q["id"] for p in self.doc["panels"] for q in p.get("panels", [])]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are unique")


if __name__ == "__main__":
    unittest.main()
