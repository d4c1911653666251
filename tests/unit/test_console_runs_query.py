"""The runs page's query string: the CLI's filters checked against the contract, ages turned
into times, and links that carry only the filters and the index's cursor."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from services.console.runs_query import MAX_PAGE_RUNS, PAGE_RUNS, QueryError, count_label, parse


def test_the_filters_become_one_runs_list_request() -> None:
    query = parse(
        {
            "status": "operator",
            "runner_id": " runner-a ",
            "tenant": "acme",
            "reason": "native_event_replay_conflict",
            "older_than": "15m",
            "newer_than": "2d",
            "limit": "20",
            "cursor": "abc",
        }
    )
    req = query.request(now=1_800_000_000.0)
    assert (req.status, req.runner_id, req.tenant, req.reason) == (
        "operator",
        "runner-a",
        "acme",
        "native_event_replay_conflict",
    )
    assert req.updated_before == "2027-01-15T07:45:00.000Z"  # 15 minutes before now
    assert req.updated_after == "2027-01-13T08:00:00.000Z"  # 2 days before now
    assert (req.limit, req.cursor) == (20, "abc")


def test_no_filter_asks_for_every_run_and_an_age_before_1970_means_from_the_start() -> None:
    req = parse({}).request(now=1_800_000_000.0)
    assert (req.status, req.runner_id, req.tenant, req.reason, req.cursor) == (None,) * 5
    assert (req.updated_before, req.updated_after, req.limit) == (None, None, PAGE_RUNS)
    assert parse({"newer_than": "999999d"}).request(now=1_800_000_000.0).updated_after == (
        "1970-01-01T00:00:00.000Z"
    )


@pytest.mark.parametrize(
    ("raw", "limit"),
    [("", PAGE_RUNS), ("0", 1), ("5000", MAX_PAGE_RUNS), ("x", PAGE_RUNS), ("9" * 40, PAGE_RUNS)],
)
def test_the_page_size_stays_within_the_contracts_limit(raw: str, limit: int) -> None:
    assert parse({"limit": raw}).limit == limit


@pytest.mark.parametrize(
    "query",
    [
        {"status": "stuck"},
        {"runner_id": "has space"},
        {"runner_id": "r" * 65},
        {"tenant": "<b>"},
        {"reason": "because"},
        {"older_than": "17"},
        {"newer_than": "1w"},
        {"cursor": "c" * 1025},
    ],
)
def test_a_value_the_contract_refuses_is_a_message_that_does_not_repeat_it(query: dict[str, str]) -> None:
    with pytest.raises(QueryError) as raised:
        parse(query)
    (value,) = query.values()
    assert value not in raised.value.message


def test_links_carry_the_filters_and_the_cursor_only() -> None:
    query = parse({"status": "operator", "tenant": "acme", "runner_id": "", "limit": "10", "other": "x"})
    assert query.link() == "/runs?status=operator&tenant=acme&limit=10"
    target = urlsplit(query.link("b64/cur+sor="))
    assert parse_qs(target.query) == {
        "status": ["operator"],
        "tenant": ["acme"],
        "limit": ["10"],
        "cursor": ["b64/cur+sor="],
    }
    assert parse({}).link() == "/runs" and parse({"limit": str(PAGE_RUNS)}).link("c") == "/runs?cursor=c"


def test_counts_are_exact_up_to_the_cap() -> None:
    assert [count_label(n, 100) for n in (0, 99, 100, 101)] == ["0", "99", "100", "100+"]
