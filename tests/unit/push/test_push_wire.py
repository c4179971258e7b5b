"""``push.wire``'s span numbering against a plain dict, over spans of any length: the
word-compare path (spans up to 256 bytes) and the hashed one for longer values (hypothesis).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadwatcher.push import wire
from tests.support.fuzzing import examples

# Short, long (past 32 words: hashed) and ones that differ only in their last byte.
contents = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"x" * 300, b"x" * 299 + b"y", b"x" * 257, b"v" * 256, b"v" * 255 + b"w"]),
    st.binary(min_size=250, max_size=600),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(contents, min_size=1, max_size=12), st.data())
def test_spans_are_numbered_by_their_content(parts: list[bytes], data: st.DataObject) -> None:
    """Each span's number names its content, equal contents share one number, and only the
    distinct contents are listed; spans overlap and reach the end of the body."""
    body = b"".join(parts)
    starts = np.cumsum([0, *map(len, parts)])[:-1]
    spans = [(int(s), len(p)) for s, p in zip(starts, parts, strict=True)]
    # Spans of the body that are not whole parts: overlapping ones, and its very end.
    for _ in range(data.draw(st.integers(0, 4))):
        a = data.draw(st.integers(0, len(body)))
        spans.append((a, data.draw(st.integers(0, len(body) - a))))
    pos = np.array([p for p, _ in spans], np.int64)
    length = np.array([n for _, n in spans], np.int64)
    codes, values = wire.unique_spans(wire.Buffer(body), pos, length)
    assert [values[c] for c in codes.tolist()] == [body[p : p + n] for p, n in spans]
    assert len(set(values)) == len(values)
