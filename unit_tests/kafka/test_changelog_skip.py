"""`ChangelogReader.skip_own`: only a gap-free run of own records at the position is skipped."""

from __future__ import annotations

from framework.kafka.changelog import ChangelogReader


def reader(position: int | None) -> ChangelogReader:
    changelog = ChangelogReader("unused:9092", "app.g.state", 0)  # connects only to read
    changelog.reset(position)
    return changelog


def test_own_records_right_at_the_position_are_skipped() -> None:
    changelog = reader(10)
    assert changelog.skip_own([10, 11, 12])
    assert changelog.position == 13


def test_anything_else_leaves_the_position_alone() -> None:
    for position, offsets in (
        (None, [0, 1]),  # never read: the records before ours are unknown
        (10, []),
        (10, [11, 12]),  # offset 10 is someone else's
        (10, [10, 12]),  # so is 11
        (10, [10, -1, 12]),  # no delivery report for one record
        (10, [10, 11, 11]),
        (10, [10, 9]),
    ):
        changelog = reader(position)
        assert not changelog.skip_own(offsets), (position, offsets)
        assert changelog.position == position
