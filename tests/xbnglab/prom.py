"""The Prometheus text exposition format (what xbngd's /metrics serves), read
strictly: every line is a comment, empty, or a sample ``name{labels} value``;
anything else fails the test that reads it.
"""
from __future__ import annotations

import re
from typing import NamedTuple

_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Sample(NamedTuple):
    name: str
    labels: dict
    value: float
    key: str  # the sample as written before its value: 'name{labels}'


def samples(text: str) -> list[Sample]:
    """Every sample of an exposition, in order (label values as written)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise AssertionError(f"not a sample line: {line!r}")
        out.append(Sample(m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3)),
                          line.rpartition(" ")[0]))
    return out


def series(text: str) -> dict[str, list[dict]]:
    """metric name -> the label sets of its samples."""
    out: dict[str, list[dict]] = {}
    for s in samples(text):
        out.setdefault(s.name, []).append(s.labels)
    return out


def by_key(text: str) -> dict[str, float]:
    """'name{labels}' (as written) -> value."""
    return {s.key: s.value for s in samples(text)}


def values(text: str, prefix: str = "") -> dict[str, float]:
    """metric name -> value, for the metrics whose name starts with prefix
    (of a metric with several label sets, the last sample)."""
    return {s.name: s.value for s in samples(text) if s.name.startswith(prefix)}


def value(text: str, name: str) -> float:
    """The value of the first sample of metric name; KeyError if it has none."""
    for s in samples(text):
        if s.name == name:
            return s.value
    raise KeyError(name)
