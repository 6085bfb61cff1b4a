"""The eleven-week map of the course.

The book's table of contents, the intro's map and the part pages all read
this one list, kept as data in ``data/journey.json``. The map's figure lives
in ``gpucourse.chapters.course`` (still importable from here).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpucourse.moved import served_from


@dataclass(frozen=True)
class Week:
    weeks: tuple[int, int]
    part: str
    title: str
    topics: str


PARTS = ("Foundations", "Memory and networks", "Kernels")
ROMAN = ("I", "II", "III")

# The journey itself is data (data/journey.json), one row per block of weeks.
JOURNEY_PATH = Path(__file__).with_name("data") / "journey.json"


def _read_journey() -> tuple[Week, ...]:
    rows = json.loads(JOURNEY_PATH.read_text())
    return tuple(Week(tuple(row["weeks"]), row["part"], row["title"], row["topics"])
                 for row in rows)


JOURNEY: tuple[Week, ...] = _read_journey()


def weeks_label(week: Week) -> str:
    first, last = week.weeks
    return f"Week {first}" if first == last else f"Weeks {first}-{last}"


# The map's figure lives with the book's introduction (gpucourse.chapters.course),
# which imports the journey above; it is served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.course", (
    'plot_journey',
))
