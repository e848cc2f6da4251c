"""Reading a flamepipe process's Prometheus endpoint in tests."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["scrape", "total"]


def scrape(url: str) -> dict[str, float]:
    """Every sample at ``<url>metrics`` by ``name|label=value|...``."""
    with urllib.request.urlopen(url + "metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + "".join(f"|{k}={v}" for k, v in sorted(s.labels.items()))
            out[key] = s.value
    return out


def total(samples: dict[str, float], name: str) -> float:
    """The sum of metric ``name`` over its labels."""
    return sum(v for k, v in samples.items() if k.split("|")[0] == name)
