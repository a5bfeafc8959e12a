"""English dates as the portal has always shown them (ISO order, 24-hour clock); the rest is Django's `en`.

Pages name these formats (`|date:"SHORT_DATETIME_FORMAT"`), never a pattern, so that each language gets its own.
"""

SHORT_DATE_FORMAT = "Y-m-d"  # 2026-12-01
SHORT_DATETIME_FORMAT = "Y-m-d H:i"  # 2026-12-01 14:30
DATETIME_FORMAT = "Y-m-d H:i:s"  # 2026-12-01 14:30:05
