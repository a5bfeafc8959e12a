"""Shared fixtures: a user of each role around one team; the cluster fixtures come from the plugins below."""

import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.core.cache import cache
from django.utils import translation

from portal.choices import Role
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytest_plugins = ["devcluster.pytest_plugin", "tests.clusterkit", "tests.faultkit"]


@pytest.fixture(autouse=True)
def _fresh_rate_limit_counters():
    """API throttle counters live in the cache: every test starts with none."""
    cache.clear()


@pytest.fixture(autouse=True)
def _default_language():
    """Every test starts in the default language: a request of a user who reads Chinese activates it for the
    thread (portal.middleware.UserLanguageMiddleware), and the test client serves requests in the test's thread."""
    translation.activate(settings.LANGUAGE_CODE)
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _celery_join_flag_cleared():
    """Every test starts with Celery's "joining a result here would block" flag cleared. It is one flag for the whole
    process, which an eager `apply_async` (task_always_eager) sets around its task and puts back afterwards: two
    threads doing so at once (a cluster test's own and the sync's, say) can put it back in the wrong order and leave it
    set, after which every `.apply().get()` of a later test raised "Never call result.get() within a task!"
    (`tests/test_celery_join_flag.py` shows the interleaving)."""
    from celery.result import _set_task_join_will_block

    _set_task_join_will_block(False)


@pytest.fixture(scope="session")
def compiled_translations():
    """`make install` compiles the catalogue; a bare pytest run compiles it here when it is missing or stale."""
    po = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
    mo = po.with_suffix(".mo")
    if not mo.exists() or mo.stat().st_mtime < po.stat().st_mtime:
        subprocess.run(["msgfmt", "-o", str(mo), str(po)], check=True)
        from django.utils.translation import trans_real

        trans_real._translations = {}
        trans_real._active = trans_real.Local()
    return mo


@pytest.fixture
def team(db):
    return TeamFactory(slug="alpha", name="Alpha")


@pytest.fixture
def other_team(db):
    return TeamFactory(slug="beta", name="Beta")


@pytest.fixture
def researcher(team):
    return MembershipFactory(team=team, role=Role.RESEARCHER, user=UserFactory(username="rita")).user


@pytest.fixture
def lead(team):
    return MembershipFactory(team=team, role=Role.LEAD, user=UserFactory(username="leo")).user


@pytest.fixture
def platform_admin(db):
    return UserFactory(username="ada", is_platform_admin=True, is_staff=True, is_superuser=True)


@pytest.fixture
def outsider(other_team):
    return MembershipFactory(team=other_team, role=Role.LEAD, user=UserFactory(username="otto")).user
