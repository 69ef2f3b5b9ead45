"""lint.metric_names reads PromQL with a real parser: the names a rule or panel reads decide rule-test files,
replay layers and the cardinality budget."""

import pytest

from hpcobs.lang import lint


@pytest.mark.parametrize(
    "expr, names",
    [
        ("a atan2 b", {"a", "b"}),
        ("x * Inf", {"x"}),
        ("-Inf < x or NaN > y", {"x", "y"}),
        ("deadbeef + face", {"deadbeef", "face"}),
        ('e * abc_total{job="x"}', {"e", "abc_total"}),
        ("0x1f * cafe", {"cafe"}),
        ("1e3 * E1", {"E1"}),
        ('{__name__="up", job="x"}', {"up"}),
        ('{__name__=~"up|down"}', set()),
        ('label_replace(up, "dst", "$1", "src", "(node_load1)")', {"up"}),
        ("sum by (gpu, node) (rate(c_total[5m]))", {"c_total"}),
        ("x * on (node) group_left (model) y unless ignoring (gpu) z", {"x", "y", "z"}),
        ("max_over_time(rate(c[5m])[1h:1m] @ 100 offset 1h)", {"c"}),
        ('count_values("v", info{a="by (x)"}) by (v)', {"info"}),
        ("nvidia:gpu:utilization:ratio > bool 0.5", {"nvidia:gpu:utilization:ratio"}),
        # RE2 accepts these regexes where the parser's regex engine does not; a `=~` inside a value is text.
        ('fs{mountpoint!~"{{a}}", job="=~\'{{"} / fs_size{a=~"x{2}{{"}', {"fs", "fs_size"}),
    ],
)
def test_metric_names_of_promql(expr, names):
    assert lint.metric_names(expr) == names


@pytest.mark.parametrize(
    "expr, names",
    [
        ('sum(rate(x{node=~"$node", gpu=~"${gpu:regex}", job="[[job]]"}[$__rate_interval]))', {"x"}),
        ("sum(increase(x[$__range])) / $__range_s", {"x"}),
        ("sum_over_time(x[$window:$step] offset $shift)", {"x"}),
        ("topk($n, x) * $factor", {"x"}),
        ('label_values(up{cluster="$cluster", job=~"a|b"}, instance)', {"up"}),
        ("label_values(instance)", set()),
        ("query_result(topk(5, sum by (node) (x)))", {"x"}),
    ],
)
def test_metric_names_of_dashboard_expressions(expr, names):
    """Grafana variables and template queries are replaced before parsing, as Grafana interpolates them."""
    assert lint.metric_names(expr) == names


def test_an_expression_that_is_not_promql_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"not PromQL .*sum\(x\[5m\]"):
        lint.metric_names("sum(x[5m]")


def test_the_caller_gets_its_own_set():
    lint.metric_names("a + b").add("c")
    assert lint.metric_names("a + b") == {"a", "b"}


@pytest.mark.parametrize(
    "expr, counts",
    [
        ("count by (cluster, node) (max by (cluster, node, gpu) (x) > 0)", True),
        ('count by (cluster, node) (ib_state{state!="ACTIVE"})', True),
        ('label_replace(count by (node) (x == 1), "state", "failed", "", "")', True),
        (
            'label_replace(count by (n) (x > 0), "s", "a", "", "")'
            ' or label_replace(count by (n) (y > 0), "s", "b", "", "")',
            True,
        ),
        ("count by (node) (x > bool 0)", False),  # 0 or 1 for every series: counts them all
        ("count by (node) (x) > 0", False),  # a filter on the count, not on what is counted
        ('count by (node) (x{state="a>b"})', False),  # a `>` inside a label value is text
        ("sum by (node) (x > 0)", False),
        ("count by (node) (x > 0) or sum by (node) (y)", False),
    ],
)
def test_a_condition_count_is_read_from_the_syntax_tree(expr, counts):
    """The budget counts a record of a condition only for the faulty part of the fleet (hpcobs.build.cardinality)."""
    assert lint.counts_a_condition(expr) is counts
