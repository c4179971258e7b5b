"""Kubernetes quantities (exact, Go's rounding), Go arithmetic helpers, and pod parsing."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadwatcher.quantity import parse_quantity
from loadwatcher.scoring.gomath import (
    go_fdiv,
    go_idiv,
    go_idiv_np,
    go_round,
    go_round_np,
    wrap_int64,
)
from loadwatcher.scoring.pods import parse_pod


@pytest.mark.parametrize(
    ("text", "exact", "milli", "value"),
    [
        ("250m", Fraction(1, 4), 250, 1),
        ("1536Mi", Fraction(1536 << 20), 1536 * 2**20 * 1000, 1536 << 20),
        ("2e3", Fraction(2000), 2_000_000, 2000),
        ("128974848", Fraction(128974848), 128974848000, 128974848),
        ("1.5", Fraction(3, 2), 1500, 2),
        ("0", Fraction(0), 0, 0),
        ("1.5Gi", Fraction(3 << 29), (3 << 29) * 1000, 3 << 29),
        ("0.1m", Fraction(1, 10000), 1, 1),  # MilliValue rounds up
        ("1n", Fraction(1, 10**9), 1, 1),
        ("0.5n", Fraction(1, 10**9), 1, 1),  # parsing rounds up to whole nanos
        ("-1.5", Fraction(-3, 2), -1500, -2),  # away from zero
        ("+7k", Fraction(7000), 7_000_000, 7000),
        ("1E", Fraction(10**18), 10**21, 10**18),  # E alone is exa
        ("1e-3", Fraction(1, 1000), 1, 1),
        (".5", Fraction(1, 2), 500, 1),
        ("1.", Fraction(1), 1000, 1),
        ("12u", Fraction(12, 10**6), 1, 1),
        (3, Fraction(3), 3000, 3),
        (0.25, Fraction(1, 4), 250, 1),
    ],
)
def test_parse(text: str | int | float, exact: Fraction, milli: int, value: int) -> None:
    got = parse_quantity(text)
    assert (got.exact, got.milli_value(), got.value()) == (exact, milli, value)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "abc",
        "1K",
        "1e",
        "1.5.5",
        " 1",
        "1 ",
        "1Kib",
        "--1",
        "+",
        ".",
        "1e99999",
        "0x10",
        "1m1",
        True,
        None,
        float("nan"),
        float("inf"),
        [1],
    ],
)
def test_garbage_is_a_clear_value_error(bad: object) -> None:
    with pytest.raises(ValueError, match="invalid quantity") as info:
        parse_quantity(bad)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


@given(st.integers(-(10**12), 10**12), st.sampled_from(["", "m", "k", "Mi", "Gi", "e2"]))
def test_integer_with_suffix_is_exact(n: int, suffix: str) -> None:
    scale = {
        "": Fraction(1),
        "m": Fraction(1, 1000),
        "k": Fraction(1000),
        "Mi": Fraction(2**20),
        "Gi": Fraction(2**30),
        "e2": Fraction(100),
    }
    assert parse_quantity(f"{n}{suffix}").exact == n * scale[suffix]


def test_go_rounding_and_division() -> None:
    assert [go_round(x) for x in (0.5, 1.5, 2.5, -0.5, -2.5, 0.49999999999999994)] == [
        1,
        2,
        3,
        -1,
        -3,
        0,
    ]
    assert go_idiv(-7, 2) == -3 and go_idiv(7, -2) == -3 and go_idiv(-7, -2) == 3
    assert -7 // 2 == -4  # what Python's // would have done
    assert wrap_int64(2**63) == -(2**63) and wrap_int64(-(2**63) - 1) == 2**63 - 1
    assert go_fdiv(1.0, 0.0) == float("inf") and go_fdiv(-1.0, 0.0) == float("-inf")
    assert go_fdiv(0.0, 0.0) != go_fdiv(0.0, 0.0)  # NaN


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=20))
def test_go_round_np_matches_scalar(xs: list[float]) -> None:
    assert list(go_round_np(np.array(xs))) == [go_round(x) for x in xs]


@given(
    st.lists(
        st.tuples(st.integers(-(2**40), 2**40), st.integers(-1000, 1000).filter(bool)),
        min_size=1,
        max_size=20,
    )
)
def test_go_idiv_np_matches_scalar(pairs: list[tuple[int, int]]) -> None:
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    assert list(go_idiv_np(a, b)) == [go_idiv(x, y) for x, y in pairs]


def test_pod_spec_subset_and_manifests() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}}}
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
        "overhead": {"cpu": "10m"},
        "priority": 9000,
        "ownerKind": "DaemonSet",
    }
    p = parse_pod(spec)
    assert (p.requested.milli_cpu, p.requested.memory) == (2010, 1 << 30)
    assert (p.priority, p.owner_kind) == (9000, "DaemonSet")
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "ownerReferences": [{"kind": "ReplicaSet", "name": "web-1"}]},
        "spec": spec | {"priority": 100},
    }
    m = parse_pod(manifest)
    assert (m.name, m.owner_kind, m.priority, m.requested) == (
        "web",
        "ReplicaSet",
        100,
        p.requested,
    )
    ds = parse_pod(
        {
            "kind": "DaemonSet",
            "metadata": {"name": "agent"},
            "spec": {"template": {"spec": {"containers": []}}},
        }
    )
    assert ds.owner_kind == "DaemonSet"
    # PodLimits adds overhead only where a limit exists; PodRequests always
    assert p.k8s_sums(limits=True) == {"cpu": Fraction(101, 100)}
    assert p.k8s_sums(limits=False)["cpu"] == Fraction(201, 100)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([], "expected a mapping"),
        ({"containers": {}}, "containers: expected a list"),
        (
            {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]},
            r"containers\[0\].resources.requests.cpu: invalid quantity 'lots'",
        ),
        ({"containers": [], "priority": "high"}, "priority: expected an integer"),
        ({"kind": "Service", "spec": {}}, "unsupported manifest kind"),
        ({"kind": "Deployment", "spec": {}}, "no spec.template.spec"),
    ],
)
def test_bad_pods(spec: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_pod(spec)
