"""Binary operators: arithmetic, comparisons (filtering or ``bool``) and the set operators,
between scalars and vectors, with Prometheus's vector matching (``on``/``ignoring``,
``group_left``/``group_right``) and its errors.

Matching is worked out once per pair of rows (label sets do not change between steps);
what Prometheus checks per step — a match group with two series on its "one" side, or two
results with one label set — is checked on the presence of the rows at each step.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import promql_parser

from loadwatcher._types import BoolArray, FloatArray
from loadwatcher.promql.values import (
    METRIC_NAME,
    ErrorType,
    Labels,
    QueryError,
    Scalar,
    Vector,
    merged,
    unsupported,
    without_name,
)

ARITHMETIC = frozenset({"+", "-", "*", "/", "%", "^"})
COMPARISON = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET = frozenset({"and", "or", "unless"})


def elementwise(op: str, lhs: FloatArray, rhs: FloatArray) -> tuple[FloatArray, BoolArray]:
    """Go's float arithmetic (``%`` is ``math.Mod``: the sign of the dividend) and, for a
    comparison, the left value with whether it holds."""
    with np.errstate(all="ignore"):
        if op == "+":
            return lhs + rhs, np.ones(np.shape(lhs), bool)
        if op == "-":
            return lhs - rhs, np.ones(np.shape(lhs), bool)
        if op == "*":
            return lhs * rhs, np.ones(np.shape(lhs), bool)
        if op == "/":
            return lhs / rhs, np.ones(np.shape(lhs), bool)
        if op == "%":
            return np.fmod(lhs, rhs), np.ones(np.shape(lhs), bool)
        if op == "^":
            return np.power(lhs, rhs), np.ones(np.shape(lhs), bool)
        holds = {
            "==": np.equal,
            "!=": np.not_equal,
            ">": np.greater,
            "<": np.less,
            ">=": np.greater_equal,
            "<=": np.less_equal,
        }[op](lhs, rhs)
    return np.asarray(lhs, np.float64), np.asarray(holds, bool)


def operator(node: promql_parser.BinaryExpr) -> str:
    op = str(node.op)
    if op not in ARITHMETIC | COMPARISON | SET:
        raise unsupported(f"the binary operator {op!r}")
    return op


def scalars(op: str, lhs: Scalar, rhs: Scalar) -> Scalar:
    value, holds = elementwise(op, lhs.values, rhs.values)
    if op in COMPARISON:
        value = holds.astype(np.float64)  # the parser allows scalar comparisons only with bool
    return Scalar(value)


def vector_scalar(op: str, vec: Vector, scalar: Scalar, swap: bool, return_bool: bool) -> Vector:
    """``vec op scalar``, or ``scalar op vec`` when ``swap``: a comparison keeps the
    vector's value whichever side it is on."""
    s = np.broadcast_to(scalar.values[None, :], vec.values.shape)
    lv, rv = (s, vec.values) if swap else (vec.values, s)
    value, holds = elementwise(op, lv, rv)
    if op in COMPARISON and swap:
        value = vec.values
    present = vec.present.copy()
    if return_bool:
        value = holds.astype(np.float64)
    elif op in COMPARISON:
        present &= holds
    drop = op in ARITHMETIC or return_bool
    labels = [without_name(lab) for lab in vec.labels] if drop else list(vec.labels)
    return merged(Vector(labels, np.where(present, value, 0.0), present).pruned())


def _signature(labels: Labels, on: bool, names: frozenset[str]) -> Labels:
    if on:
        return tuple(p for p in labels if p[0] in names)
    return tuple(p for p in labels if p[0] not in names and p[0] != METRIC_NAME)


# The parser's enums are not hashable: compared one by one.
_CARDS = (
    (promql_parser.VectorMatchCardinality.OneToOne, "one-to-one"),
    (promql_parser.VectorMatchCardinality.ManyToOne, "many-to-one"),
    (promql_parser.VectorMatchCardinality.OneToMany, "one-to-many"),
    (promql_parser.VectorMatchCardinality.ManyToMany, "many-to-many"),
)


def _matching(node: promql_parser.BinaryExpr) -> tuple[bool, frozenset[str], str, list[str]]:
    """(on?, matching labels, cardinality, group_x labels)."""
    mod = node.modifier
    if mod is None:
        return False, frozenset(), "one-to-one", []
    on = mod.matching is not None and mod.matching.type == promql_parser.LabelModifierType.Include
    names = frozenset(mod.matching.labels) if mod.matching is not None else frozenset()
    card = next(text for known, text in _CARDS if mod.card == known)
    fill = mod.fill_values
    if fill is not None and (fill.lhs is not None or fill.rhs is not None):
        raise unsupported("fill() in vector matching")
    return on, names, card, list(mod.group_labels or [])


def set_operation(op: str, lhs: Vector, rhs: Vector, node: promql_parser.BinaryExpr) -> Vector:
    """``and``, ``or``, ``unless``: per step, by the signatures present on each side."""
    on, names, _, _ = _matching(node)
    steps = lhs.present.shape[1]
    sig_l = [_signature(lab, on, names) for lab in lhs.labels]
    sig_r = [_signature(lab, on, names) for lab in rhs.labels]
    right_has: dict[Labels, BoolArray] = {}
    for sig, row in zip(sig_r, rhs.present, strict=True):
        right_has[sig] = right_has.get(sig, np.zeros(steps, bool)) | row
    none = np.zeros(steps, bool)
    if op == "and":
        mask = np.array([right_has.get(sig, none) for sig in sig_l]).reshape(lhs.present.shape)
        present = lhs.present & mask
        return Vector(lhs.labels, lhs.values, present).pruned()
    if op == "unless":
        mask = np.array([right_has.get(sig, none) for sig in sig_l]).reshape(lhs.present.shape)
        return Vector(lhs.labels, lhs.values, lhs.present & ~mask).pruned()
    left_has: dict[Labels, BoolArray] = {}
    for sig, row in zip(sig_l, lhs.present, strict=True):
        left_has[sig] = left_has.get(sig, np.zeros(steps, bool)) | row
    mask = np.array([left_has.get(sig, none) for sig in sig_r]).reshape(rhs.present.shape)
    out = Vector(
        lhs.labels + rhs.labels,
        np.concatenate([lhs.values, rhs.values]),
        np.concatenate([lhs.present, rhs.present & ~mask]),
    )
    return merged(out.pruned())


def vectors(
    op: str, lhs: Vector, rhs: Vector, node: promql_parser.BinaryExpr, return_bool: bool
) -> Vector:
    """``lhs op rhs`` between two instant vectors (not a set operator)."""
    on, names, card, include = _matching(node)
    if card == "one-to-many":
        lhs, rhs = rhs, lhs
    one_side = "left" if card == "one-to-many" else "right"
    steps = lhs.present.shape[1]
    by_sig: dict[Labels, list[int]] = defaultdict(list)
    for i, lab in enumerate(rhs.labels):
        by_sig[_signature(lab, on, names)].append(i)
    for sig, rows in by_sig.items():
        if len(rows) > 1 and bool((rhs.present[rows].sum(axis=0) > 1).any()):
            raise QueryError(
                ErrorType.EXECUTION,
                f"found duplicate series for the match group {_text(sig)} on the {one_side} "
                "hand-side of the operation; many-to-many matching not allowed: matching "
                "labels must be unique on one side",
            )
    out_labels: list[Labels] = []
    out_values: list[FloatArray] = []
    out_present: list[BoolArray] = []
    matched: dict[Labels, BoolArray] = {}
    for i, lab in enumerate(lhs.labels):
        sig = _signature(lab, on, names)
        for j in by_sig.get(sig, ()):
            both = lhs.present[i] & rhs.present[j]
            if not bool(both.any()):
                continue
            vl, vr = lhs.values[i], rhs.values[j]
            if card == "one-to-many":
                vl, vr = vr, vl
            value, holds = elementwise(op, vl, vr)
            present = both.copy()
            if return_bool:
                value = holds.astype(np.float64)
            elif op in COMPARISON:
                present &= holds
            if card == "one-to-one":
                seen = matched.get(sig, np.zeros(steps, bool))
                if bool((seen & present).any()):
                    raise QueryError(
                        ErrorType.EXECUTION,
                        "multiple matches for labels: many-to-one matching must be explicit "
                        "(group_left/group_right)",
                    )
                matched[sig] = seen | present
            out_labels.append(
                _result_labels(lab, rhs.labels[j], op, on, names, card, include, return_bool)
            )
            out_values.append(np.where(present, value, 0.0))
            out_present.append(present)
    if not out_labels:
        return Vector.empty(steps)
    out = Vector(out_labels, np.array(out_values), np.array(out_present)).pruned()
    if card != "one-to-one" and len(set(out.labels)) != len(out.labels):
        _unique_groups(out)
    return merged(out)


def _unique_groups(vec: Vector) -> None:
    seen: dict[Labels, BoolArray] = {}
    for lab, row in zip(vec.labels, vec.present, strict=True):
        before = seen.get(lab)
        if before is not None and bool((before & row).any()):
            raise QueryError(
                ErrorType.EXECUTION,
                "multiple matches for labels: grouping labels must ensure unique results",
            )
        seen[lab] = row if before is None else before | row


def _result_labels(
    lhs: Labels,
    rhs: Labels,
    op: str,
    on: bool,
    names: frozenset[str],
    card: str,
    include: list[str],
    return_bool: bool,
) -> Labels:
    out = dict(lhs)
    if op in ARITHMETIC or return_bool:
        out.pop(METRIC_NAME, None)
    if card == "one-to-one":
        if on:
            out = {k: v for k, v in out.items() if k in names}
        else:
            for name in names:
                out.pop(name, None)
    one = dict(rhs)
    for name in include:  # group_x labels come from the "one" side
        if one.get(name, ""):
            out[name] = one[name]
        else:
            out.pop(name, None)
    return tuple(sorted(out.items()))


def _text(labels: Labels) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels) + "}"
