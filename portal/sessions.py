"""The database session store, refusing session keys that Django never issues.

Django's keys are 32 lowercase letters and digits. A forged cookie holding anything else (a NUL character,
say) would otherwise reach PostgreSQL, which rejects it, and turn every page into a 500."""

import re

from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore

VALID_KEY = re.compile(r"^[a-z0-9]{8,40}\Z")


class SessionStore(DatabaseSessionStore):
    def _validate_session_key(self, key):
        return bool(key) and bool(VALID_KEY.match(key))
