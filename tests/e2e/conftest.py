"""Browser fixtures: Debian's Chromium (never a downloaded browser) driven by Playwright's Python package, and a
folder for screenshots (`.state/screenshots/`, not committed)."""

import os
import shutil
from pathlib import Path

import pytest

SCREENSHOTS = Path(__file__).resolve().parents[2] / ".state" / "screenshots"
# Chromium's own network chatter is refused on machines without internet; these flags keep it quiet.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    path = os.environ.get("RESERVOIR_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail("Debian's chromium is missing: `make test` installs it (scripts/services.sh)")
    return path


@pytest.fixture(scope="module")
def browser():
    # Playwright's sync API runs an event loop in this thread; the tests still use the ORM synchronously.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900}, locale="en-GB")
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm asks with window.confirm
    yield page
    context.close()


@pytest.fixture
def shoot(page):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def shoot(name: str, *, full_page: bool = True) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        return path

    return shoot
