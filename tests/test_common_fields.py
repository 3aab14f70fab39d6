"""``common.fields``: dicts of dataclass fields checked into configs (unknown and missing keys named) and back."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from llmsched_env.common.fields import as_dataclass, check_fields, derived, from_fields, to_fields


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
