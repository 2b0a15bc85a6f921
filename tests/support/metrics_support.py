"""Reading a Prometheus exposition in tests: a sample's value by name and labels, parsed with
prometheus_client's own parser (not by matching the text's layout)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str, name: str, **labels: str) -> list[float]:
    """Values of the samples called `name` whose labels include `labels`."""
    return [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def sample(text: str, name: str, **labels: str) -> float | None:
    """The sum of the matching samples' values; None if there is none."""
    found = samples(text, name, **labels)
    return sum(found) if found else None
