"""How invoice lines are worded. A line keeps its description as a msgid and arguments (`jobs.models.Words`); the
dates among those arguments have always been stored as text in ISO order ("2026-03-01 00:00", "2026-03"), and
stored rows never change (a closed month's lines are frozen). So the dates are put in the reader's format when the
line is read: the arguments named in `STORED_DATES` of the messages below are parsed back and shown with the
reader's language's format (`portal/formats`: 2026-03-01 00:00 in English, 2026年3月1日 00:00 in Chinese). A text
that does not parse (a row written some other way) is shown as stored."""

from dataclasses import dataclass
from datetime import datetime

from django.utils.formats import date_format
from django.utils.translation import gettext_noop

from jobs.models import Words

RESERVATION_FEE = gettext_noop("Reservation of %(gpus)s GPUs in %(pool)s, %(start)s → %(end)s")
CORRECTION = gettext_noop("Correction for %(month)s: %(what)s")
LENDING_CREDIT = gettext_noop("Credit for idle reserved GPUs lent to other teams in %(pool)s")

STORED_DATETIME = "%Y-%m-%d %H:%M"  # how `start`/`end` are stored (UTC, as the pages show times)
STORED_MONTH = "%Y-%m"

# msgid -> {argument: (how it is stored, the Django format it is shown with)}
STORED_DATES = {
    RESERVATION_FEE: {
        "start": (STORED_DATETIME, "SHORT_DATETIME_FORMAT"),
        "end": (STORED_DATETIME, "SHORT_DATETIME_FORMAT"),
    },
    CORRECTION: {"month": (STORED_MONTH, "YEAR_MONTH_FORMAT")},
}


def stored_datetime(value: datetime) -> str:
    return f"{value:{STORED_DATETIME}}"


@dataclass(frozen=True)
class StoredDate:
    """A date argument kept as text: in the active language's format when the message is put together."""

    text: str
    stored_as: str
    shown_as: str

    def __str__(self) -> str:
        try:
            value = datetime.strptime(self.text, self.stored_as)
        except (TypeError, ValueError):
            return str(self.text)
        return date_format(value if "%H" in self.stored_as else value.date(), self.shown_as)


def line_words(msgid: str, args: dict) -> Words:
    """A line's description (msgid and stored arguments) as words whose dates follow the reader's format; nested
    words (a correction names the line it corrects) are read the same way."""
    dates = STORED_DATES.get(msgid, {})
    readable = {}
    for name, value in args.items():
        if isinstance(value, Words):
            value = {"msgid": value.msgid, "args": value.stored_args}
        if isinstance(value, dict) and value.keys() == {"msgid", "args"}:
            readable[name] = line_words(value["msgid"], value["args"])
        elif name in dates and isinstance(value, str):
            readable[name] = StoredDate(value, *dates[name])
        else:
            readable[name] = value
    return Words(msgid, readable)
