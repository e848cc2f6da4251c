"""Topic names per epoch: epoch 0 keeps the plain names, later epochs get fresh ones."""

from __future__ import annotations

from framework.wire.topics import Topics


def test_epoch_zero_keeps_the_plain_names() -> None:
    topics = Topics("wc")
    assert (topics.acks, topics.mintime, topics.dlq) == ("wc.acks", "wc.mintime", "wc.dlq")
    assert (topics.shuffle("3-group"), topics.state("3-group")) == (
        "wc.3-group",
        "wc.3-group.state",
    )
    assert topics.pre("5-sink") == "wc.5-sink.pre"


def test_a_later_epoch_renames_every_internal_topic_but_the_dead_letters() -> None:
    old, new = Topics("wc"), Topics("wc", 3)
    internal = ("acks", "mintime")
    for name in internal:
        assert getattr(new, name) == getattr(old, name).replace("wc.", "wc.e3.")
    assert new.shuffle("g") == "wc.e3.g" and new.state("g") == "wc.e3.g.state"
    assert new.pre("s") == "wc.e3.s.pre"
    assert new.dlq == old.dlq
