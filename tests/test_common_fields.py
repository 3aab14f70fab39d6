"""``common.fields``: dicts of dataclass fields checked into configs and back, and the one ``KEY=VALUE`` parser."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llmsched_env.common.fields import (
    as_dataclass,
    check_fields,
    coerce,
    derived,
    field_problems,
    from_fields,
    option,
    parse_config,
    split_items,
    to_fields,
)


@dataclass(frozen=True)
class _Link:
    bandwidth: float
    latency_s: float = 0.0
    hops: tuple[int, ...] = field(default_factory=tuple)
    seconds_per_byte: float = derived()

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds_per_byte", 1.0 / self.bandwidth)


def test_round_trip_through_a_dict() -> None:
    link = _Link(5.0, 0.25, (1, 2))
    d = to_fields(link)
    assert d == {"bandwidth": 5.0, "latency_s": 0.25, "hops": (1, 2)}  # init=False fields are left out
    assert from_fields(_Link, "link", {"kind": "rdma", **d}, ignore=("kind",)) == link
    assert from_fields(_Link, "link", {"bandwidth": 1.0}) == _Link(1.0)  # defaults and factories fill in


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"bandwidth": 1.0, "latency": 2.0}, r"link: unknown field\(s\) \['latency'\]; known fields: \['bandwidth'"),
        ({"latency_s": 2.0}, r"link: missing field\(s\) 'bandwidth'"),
        ({"bandwidth": 1.0, "seconds_per_byte": 3.0}, r"unknown field\(s\) \['seconds_per_byte'\]"),
        ({"kind": "rdma", "bandwidth": 1.0}, r"unknown field\(s\) \['kind'\]"),  # only ignored when asked
    ],
)
def test_bad_keys_are_a_value_error_naming_them(data: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        from_fields(_Link, "link", data)


def test_a_derived_field_is_computed_and_left_out_of_repr_and_equality() -> None:
    link = _Link(4.0)
    assert link.seconds_per_byte == 0.25 and "seconds_per_byte" not in repr(link)
    object.__setattr__(link, "seconds_per_byte", 9.0)  # equality and hashing read the init fields only
    assert link == _Link(4.0) and hash(link) == hash(_Link(4.0))


def test_as_dataclass_takes_an_instance_or_a_dict() -> None:
    link = _Link(2.0)
    assert as_dataclass(_Link, "link", link) is link
    assert as_dataclass(_Link, "link", {"bandwidth": 2.0}) == link
    with pytest.raises(ValueError, match=r"link must be a _Link or a dict of its fields, got \[2\.0\]"):
        as_dataclass(_Link, "link", [2.0])


def test_check_fields_reports_every_missing_key_in_order() -> None:
    check_fields("owner", ["a"], known=["a", "b", "c"], required=["a"])
    with pytest.raises(ValueError, match=r"owner: missing field\(s\) 'c', 'b'"):
        check_fields("owner", ["a"], known=["a", "b", "c"], required=["c", "b"])


@dataclass(frozen=True)
class _Knobs:
    k: int = option(4, low=1)
    tail: int | None = 8
    rate: float = option(1.0, low=0, above=True)
    on: bool = False
    mode: str = option("a", choices=("a", "b"))
    path: Path | None = None

    def __post_init__(self) -> None:
        problems = field_problems(self, "knobs")
        if problems:
            raise ValueError("\n".join(problems))


def test_parse_config_coerces_each_value_to_its_fields_type() -> None:
    cfg = parse_config(
        _Knobs, ["k=2", " tail = end", "rate=0.5", "on=yes", "mode=b", "path=x/y"], "w", none={"tail": "end"}
    )
    assert cfg == _Knobs(k=2, tail=None, rate=0.5, on=True, mode="b", path=Path("x/y"))
    assert parse_config(_Knobs, [], "w") == _Knobs()
    for items, message in [
        (["k"], "w: knobs option 'k' is not key=value with key one of k, tail, rate, on, mode, path"),
        (["depth=3"], "w: knobs option 'depth=3' is not key=value"),
        (["k=1", "k=2"], "w: knobs option 'k' is given twice"),
        (["k=1.5"], "w: knobs.k must be an integer, got '1.5'"),
        (["tail=never"], "w: knobs.tail must be an integer or end, got 'never'"),
        (["rate=fast"], "w: knobs.rate must be a number, got 'fast'"),
        (["on=maybe"], "w: knobs.on must be true or false, got 'maybe'"),
        (["k=0"], "w: knobs: k must be an integer >= 1, got 0"),
        (["rate=0"], "w: knobs: rate must be a number > 0, got 0.0"),
        (["mode=c"], "w: knobs: mode must be one of a, b, got 'c'"),
    ]:
        with pytest.raises(ValueError) as err:
            parse_config(_Knobs, items, "w", "knobs", none={"tail": "end"})
        assert str(err.value).startswith(message), (items, str(err.value))


def test_field_problems_lists_every_bad_option_field() -> None:
    with pytest.raises(ValueError) as err:
        _Knobs(k=True, rate=float("inf"), mode=None)  # type: ignore[arg-type]
    assert str(err.value).splitlines() == [
        "knobs: k must be an integer >= 1, got True",
        "knobs: rate must be a number > 0, got inf",
        "knobs: mode must be one of a, b, got None",
    ]


def test_split_items_keeps_the_last_of_a_repeated_key_only_when_asked() -> None:
    assert split_items(["a=1", "b = x=y", "a=3"], "--hp", repeat=True) == {"a": "3", "b": "x=y"}
    with pytest.raises(ValueError, match=r"^tenant 'a' is not NAME=CLASS$"):
        split_items(["a"], "", what="tenant", form="NAME=CLASS")
    assert coerce("n", "7", "int") == 7 and coerce("s", "end", "str", none="end") is None
