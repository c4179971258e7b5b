"""Refuse a query text whose parse alone would cost too much, before the parser sees it.

The Rust parser's memory grows with the square of an expression's depth: 3,000 nested
``sum(`` or a chain of 3,000 ``+`` (15 kB of text) took over a gigabyte, and a body of the
size the API accepts would take far more. The depth of a PromQL tree is at most its
operators plus its parentheses and brackets, so their count bounds both the parse and the
evaluator's recursion; at ``MAX_TERMS`` the worst shape parses in a few megabytes.
Strings, label matchers and comments are not counted: only what can nest.
"""

from __future__ import annotations

import re

from loadwatcher.promql.values import ErrorType, QueryError

MAX_TERMS = 256

_STRING = r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`'
# What cannot nest (skipped), or one term: an opening parenthesis or bracket, an operator.
_TOKEN = re.compile(
    rf"""(?P<skip>{_STRING}|\#[^\n]*|\{{(?:{_STRING}|[^}}"'`])*\}})
    |(?P<term>[(\[]|==|!=|<=|>=|[-+*/%^<>]|(?<![\w:])(?:and|or|unless|atan2)(?![\w:]))""",
    re.VERBOSE | re.IGNORECASE,
)


def terms(text: str) -> int:
    """The operators, opening parentheses and brackets of ``text`` outside strings,
    matchers and comments: a bound on the depth of its tree."""
    return sum(1 for m in _TOKEN.finditer(text) if m.lastgroup == "term")


def check(text: str) -> None:
    """Raise a ``bad_data`` QueryError if ``text`` holds more than ``MAX_TERMS`` terms."""
    count = terms(text)
    if count > MAX_TERMS:
        raise QueryError(
            ErrorType.BAD_DATA,
            f'invalid parameter "query": the expression has {count:,} operators, parentheses '
            f"and brackets; this service parses at most {MAX_TERMS} (see docs/promql.md)",
        )
