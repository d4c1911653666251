"""`python -m continuity.tools.bench.profile_top`: a py-spy raw profile's functions by the share of
samples where they run themselves and where they are on the stack (lines of one function add up)."""

from __future__ import annotations

from continuity.tools.bench.profile_top import function_of, top

RAW = [
    "main (app.py:1);handle (app.py:10);send (redis.py:5) 6\n",
    "main (app.py:1);handle (app.py:12);send (redis.py:7) 2\n",
    "main (app.py:1);handle (app.py:14) 2\n",
    "garbage line\n",
]


def test_a_functions_lines_add_up() -> None:
    assert function_of("send (redis.py:5)") == "send (redis.py)"
    assert function_of("<module> (<frozen runpy>:88)") == "<module> (<frozen runpy>)"


def test_own_and_total_shares_of_all_samples() -> None:
    lines = top(RAW).splitlines()
    assert lines[0].startswith("10 samples")
    own = lines[2 : lines.index("total %  function")]
    total = lines[lines.index("total %  function") + 1 :]
    assert own == ["   80.0  send (redis.py)", "   20.0  handle (app.py)"]
    assert "  100.0  main (app.py)" in total and "   80.0  send (redis.py)" in total


def test_under_keeps_the_stacks_through_a_function() -> None:
    lines = top(RAW, under="send").splitlines()
    own = lines[2 : lines.index("total %  function")]
    assert own == ["   80.0  send (redis.py)"]  # still shares of all 10 samples


def test_no_samples() -> None:
    assert top([]) == "no samples"
