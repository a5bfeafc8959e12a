"""The README and docs/ stay short and true: every relative link and #anchor in them points at a file and a heading
that exist, no link is absolute (a path of one machine), the README stays a five-minute read (at most 250 lines),
and every setting the portal reads from the environment is in docs/configuration.md's table.

Pure Python: no database, no cluster. Anchors are the ones GitHub makes from headings (lower case, punctuation
dropped, spaces to hyphens, a repeated heading gets -1, -2, ...)."""

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250
# A five-minute read at a brisk 250 words a minute: lines alone let long ones through.
README_MAX_WORDS = 1250
CONFIGURATION = ROOT / "docs" / "configuration.md"

FENCED_BLOCK = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?^ {0,3}\1[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
INLINE_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
SETTINGS_ENV_READ = re.compile(r"\benv(?:\.\w+)?\(\s*\"([A-Z][A-Z0-9_]*)\"")


def prose(path: Path) -> str:
    """The text of a Markdown file without its code: links and headings inside code are not links or headings."""
    return CODE_SPAN.sub("", FENCED_BLOCK.sub("", path.read_text(encoding="utf-8")))


def anchors(path: Path) -> set[str]:
    """The #anchors GitHub gives the headings of a Markdown file."""
    text = FENCED_BLOCK.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    result = set()
    for match in HEADING.finditer(text):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))  # a link in a heading: its text
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def links(path: Path) -> list[str]:
    text = prose(path)
    return [m.group(1) for m in INLINE_LINK.finditer(text)] + [m.group(1) for m in REFERENCE_DEFINITION.finditer(text)]


def test_the_documents_are_there():
    assert README.exists()
    assert len(DOCUMENTS) > 1, "docs/*.md is where the README's long sections live"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_and_anchor_points_at_something(document: Path):
    broken = []
    for target in links(document):
        if SCHEME.match(target):  # https:, mailto: ... : not checked here
            continue
        if target.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", target):
            broken.append(f"{target}: absolute; links must be relative to the file")
            continue
        path_part, _, anchor = target.partition("#")
        linked = (document.parent / unquote(path_part)).resolve() if path_part else document
        if not linked.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor:
            if linked.suffix != ".md" or linked.is_dir():
                broken.append(f"{target}: an anchor into something that is not a Markdown file")
            elif unquote(anchor).lower() not in anchors(linked):
                broken.append(f"{target}: no heading with that anchor in {linked.relative_to(ROOT)}")
    assert not broken, f"{document.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_the_readme_is_a_five_minute_read():
    text = README.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the detail into docs/ and link to it"
    )
    words = len(text.split())
    assert words <= README_MAX_WORDS, (
        f"README.md has {words} words (at most {README_MAX_WORDS}): move the detail into docs/ and link to it"
    )


def test_every_setting_read_from_the_environment_is_in_the_configuration_table():
    configuration = CONFIGURATION.read_text(encoding="utf-8")
    read = {
        name
        for settings_module in (ROOT / "portal" / "settings").glob("*.py")
        for name in SETTINGS_ENV_READ.findall(settings_module.read_text(encoding="utf-8"))
    }
    assert read, "no environment reads found in portal/settings: has the pattern changed?"
    missing = sorted(name for name in read if f"`{name}`" not in configuration)
    assert not missing, f"settings read from the environment but not in docs/configuration.md's table: {missing}"
