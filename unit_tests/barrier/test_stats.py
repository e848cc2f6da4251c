from framework.barrier.stats import BarrierStats


def test_timings_before_any_write_say_so() -> None:
    assert BarrierStats().timings() == "release -, write -"


def test_timings_are_nearest_rank_percentiles_in_ms() -> None:
    stats = BarrierStats()
    stats.release_s.extend([0.010, 0.030, 0.020])
    stats.write_s.extend([i / 1000 for i in range(1, 101)])  # 1 .. 100 ms
    assert stats.timings() == ("release p50 20 ms / p99 30 ms, write p50 50 ms / p99 99 ms")


def test_timings_keep_only_recent_writes() -> None:
    stats = BarrierStats()
    stats.write_s.extend([5.0] * 10 + [0.001] * 1000)
    assert stats.timings().endswith("write p50 1 ms / p99 1 ms")


def test_timings_say_what_was_written_ahead() -> None:
    stats = BarrierStats(ahead=7, holds=1, aborts=2)
    assert stats.timings() == "release -, write -, ahead 7 items (held 1, aborted 2)"


def test_timings_say_how_long_min_times_waited_for_the_committed_end() -> None:
    stats = BarrierStats()
    stats.fence_s.extend([0.001, 0.002, 0.040])
    stats.end_s.extend([0.001, 0.001, 0.003])
    assert stats.timings() == (
        "release -, write -, fence p50 2 ms / p99 40 ms (end query p50 1 ms / p99 3 ms)"
    )
