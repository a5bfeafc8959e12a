"""Simplified Chinese: Django's `zh_Hans` dates (2026年12月1日, 2026年12月), with seconds where the portal shows
them, and money grouped by thousands with a comma as Chinese invoices and banks write it (Django's `zh_Hans` has no
separator and groups by four); the rest is Django's."""

DATETIME_FORMAT = "Y年n月j日 H:i:s"  # 2026年12月1日 14:30:05
THOUSAND_SEPARATOR = ","
NUMBER_GROUPING = 3
