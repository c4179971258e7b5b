"""Evaluate a parsed PromQL expression over a query's steps (pure: no clock but the
budget's, no I/O).

The expression is parsed by ``promql_parser`` (the Rust parser of Prometheus's grammar);
this module walks its tree. Every construct outside the subset of docs/promql.md is a
``bad_data`` error that names it, never an approximate answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import promql_parser

from loadwatcher._types import IntArray
from loadwatcher.promql import aggregate, binary, functions, guard, selectors
from loadwatcher.promql.storage import Storage
from loadwatcher.promql.values import (
    Budget,
    ErrorType,
    QueryError,
    Scalar,
    Text,
    Value,
    Vector,
    merged,
    no_same_labels,
    unsupported,
    without_name,
)


@dataclass(frozen=True)
class Result:
    """A query's answer: ``kind`` is Prometheus's ``resultType``."""

    kind: str  # "vector", "matrix", "scalar" or "string"
    value: Value
    steps: IntArray


def parse(text: str) -> promql_parser.Expr:
    if not text.strip():
        raise QueryError(ErrorType.BAD_DATA, 'invalid parameter "query": empty query')
    guard.check(text)
    try:
        return promql_parser.parse(text)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a panic in the Rust parser is not an Exception
        raise QueryError(
            ErrorType.BAD_DATA, f'invalid parameter "query": parse error: {exc}'
        ) from None


def instant(storage: Storage, text: str, at_ms: int, budget: Budget) -> Result:
    """``/api/v1/query``: the expression at one time (ms)."""
    node = _unwrap(parse(text))
    steps = np.array([at_ms], np.int64)
    if isinstance(node, promql_parser.MatrixSelector):
        points = selectors.raw(storage, node, at_ms, budget)
        budget.check_series(len(points.labels))
        return Result("matrix", points, steps)
    return _result(_evaluated(storage, steps, budget, node), steps, budget)


def range_query(
    storage: Storage,
    text: str,
    start_ms: int,
    end_ms: int,
    step_ms: int,
    budget: Budget,
) -> Result:
    """``/api/v1/query_range``: the expression at ``start``, ``start + step``, ... ``<= end``."""
    node = _unwrap(parse(text))
    if isinstance(node, promql_parser.MatrixSelector):
        raise QueryError(
            ErrorType.BAD_DATA,
            'invalid expression type "range vector" for range query, must be Scalar or '
            "instant Vector",
        )
    if isinstance(node, promql_parser.StringLiteral):
        raise QueryError(
            ErrorType.BAD_DATA,
            'invalid expression type "string" for range query, must be Scalar or instant Vector',
        )
    steps = np.arange(start_ms, end_ms + 1, step_ms, dtype=np.int64)
    result = _result(_evaluated(storage, steps, budget, node), steps, budget)
    return Result("matrix", result.value, steps)


def _result(value: Value, steps: IntArray, budget: Budget) -> Result:
    if isinstance(value, Vector):
        value = merged(value.pruned())
        budget.check_series(len(value.labels))
        order = sorted(range(len(value.labels)), key=value.labels.__getitem__)
        return Result("vector", value.rows(order) if value.labels else value, steps)
    if isinstance(value, Scalar):
        return Result("scalar", value, steps)
    if isinstance(value, Text):
        return Result("string", value, steps)
    return Result("matrix", value, steps)


def _evaluated(
    storage: Storage, steps: IntArray, budget: Budget, node: promql_parser.Expr
) -> Value:
    try:
        return _Evaluator(storage, steps, budget).eval(node)
    except RecursionError:  # guard.MAX_TERMS keeps well inside the limit: this is a margin
        raise QueryError(
            ErrorType.BAD_DATA, 'invalid parameter "query": the expression nests too deeply'
        ) from None


def _unwrap(node: promql_parser.Expr) -> promql_parser.Expr:
    while isinstance(node, promql_parser.ParenExpr):
        node = node.expr
    return node


class _Evaluator:
    def __init__(self, storage: Storage, steps: IntArray, budget: Budget) -> None:
        self.storage, self.steps, self.budget = storage, steps, budget

    def eval(self, node: promql_parser.Expr) -> Value:
        self.budget.check_time()
        if isinstance(node, promql_parser.ParenExpr):
            return self.eval(node.expr)
        if isinstance(node, promql_parser.NumberLiteral):
            return Scalar(np.full(self.steps.shape[0], node.val))
        if isinstance(node, promql_parser.StringLiteral):
            return Text(node.val)
        if isinstance(node, promql_parser.VectorSelector):
            return selectors.instant(self.storage, node, self.steps, self.budget)
        if isinstance(node, promql_parser.UnaryExpr):
            return self._negate(self.eval(node.expr))
        if isinstance(node, promql_parser.BinaryExpr):
            return self._binary(node)
        if isinstance(node, promql_parser.AggregateExpr):
            return self._aggregate(node)
        if isinstance(node, promql_parser.Call):
            return self._call(node)
        if isinstance(node, promql_parser.SubqueryExpr):
            raise unsupported("a subquery")
        if isinstance(node, promql_parser.MatrixSelector):
            raise QueryError(
                ErrorType.BAD_DATA,
                f"a range vector ({node}) can only be a function's argument here",
            )
        raise unsupported(f"the expression {node}")

    def _negate(self, value: Value) -> Value:
        if isinstance(value, Scalar):
            return Scalar(-value.values)
        assert isinstance(value, Vector)
        out = Vector([without_name(lab) for lab in value.labels], -value.values, value.present)
        no_same_labels(out)
        return out

    def _binary(self, node: promql_parser.BinaryExpr) -> Value:
        op = binary.operator(node)
        return_bool = node.modifier is not None and node.modifier.return_bool
        lhs, rhs = self.eval(node.lhs), self.eval(node.rhs)
        if isinstance(lhs, Scalar) and isinstance(rhs, Scalar):
            return binary.scalars(op, lhs, rhs)
        if isinstance(lhs, Vector) and isinstance(rhs, Scalar):
            return binary.vector_scalar(op, lhs, rhs, False, return_bool)
        if isinstance(lhs, Scalar) and isinstance(rhs, Vector):
            return binary.vector_scalar(op, rhs, lhs, True, return_bool)
        assert isinstance(lhs, Vector) and isinstance(rhs, Vector)
        if op in binary.SET:
            return binary.set_operation(op, lhs, rhs, node)
        return binary.vectors(op, lhs, rhs, node, return_bool)

    def _aggregate(self, node: promql_parser.AggregateExpr) -> Value:
        op = str(node.op)
        if op not in aggregate.OPERATORS:
            raise unsupported(f"the aggregation {op}()")
        param = None
        if op in aggregate.WITH_PARAM:
            assert node.param is not None  # the parser requires it
            value = self.eval(node.param)
            assert isinstance(value, Scalar)
            param = value
        vec = self.eval(node.expr)
        assert isinstance(vec, Vector)
        without, names = aggregate.grouping(node)
        return aggregate.aggregate(op, vec, without, names, param)

    def _call(self, node: promql_parser.Call) -> Value:
        name = node.func.name
        args = list(node.args)
        if name in selectors.OVER_TIME:
            matrix = _unwrap(args[-1])
            if isinstance(matrix, promql_parser.SubqueryExpr):
                raise unsupported("a subquery")
            assert isinstance(matrix, promql_parser.MatrixSelector)
            param = None
            if name == "quantile_over_time":
                value = self.eval(args[0])
                assert isinstance(value, Scalar)
                param = value.values
            return selectors.over_time(name, self.storage, matrix, self.steps, self.budget, param)
        if name not in functions.NAMES:
            raise unsupported(f"the function {name}()")
        return functions.call(name, [self.eval(a) for a in args], self.steps, self.budget)
