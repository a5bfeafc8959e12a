"""Every message a user can meet has its Simplified Chinese translation: the catalogue has no untranslated or fuzzy
entry, and extracting the messages afresh from the source (as `makemessages` does) finds none missing from it."""

import shutil
import subprocess
from pathlib import Path

from django.conf import settings
from django.core.management import call_command

PO = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
# The options the catalogue is made with (docs/translations.md, "Translations").
MAKEMESSAGES = {
    "locale": ["zh_Hans"],
    "no_location": True,
    "no_obsolete": True,
    "ignore_patterns": [".venv/*", "node_modules/*", "tests/*", "bench/*", "devcluster/*", ".state/*"],
    "verbosity": 0,
}


def _statistics(po: Path) -> str:
    done = subprocess.run(["msgfmt", "--check", "--statistics", "-o", "/dev/null", str(po)], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    return done.stderr.decode().strip().splitlines()[-1]


def test_the_catalogue_has_no_untranslated_or_fuzzy_message():
    statistics = _statistics(PO)
    assert "untranslated" not in statistics and "fuzzy" not in statistics, statistics


def test_no_message_of_the_source_is_missing_from_the_catalogue(tmp_path, monkeypatch):
    """makemessages writes into `./locale`: it runs in a directory of links to the source, with a copy of the
    catalogue, so that the real one is left alone."""
    base = Path(settings.BASE_DIR)
    for entry in base.iterdir():
        if entry.name not in {"locale", ".git"}:
            (tmp_path / entry.name).symlink_to(entry)
    copy = tmp_path / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
    copy.parent.mkdir(parents=True)
    shutil.copy(PO, copy)
    before = PO.read_bytes()
    monkeypatch.chdir(tmp_path)
    call_command("makemessages", symlinks=True, **MAKEMESSAGES)
    assert PO.read_bytes() == before
    statistics = _statistics(copy)
    assert "untranslated" not in statistics and "fuzzy" not in statistics, (
        f"{statistics}: run `manage.py makemessages -l zh_Hans --no-location --no-obsolete` (docs/translations.md)"
        " and translate"
    )
