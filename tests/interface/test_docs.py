"""The README and the pages of docs/ are well-formed Markdown whose links all land.

No network and no site build (CI builds the site with ``mkdocs build --strict``): each page is
read as text and checked for closed code fences with no heading inside them, relative links
that resolve to a file and, with an ``#anchor``, to a heading of that file under both the
GitHub and the MkDocs slug rules; the README stays a short landing page that holds the two
set-up commands, the second of which ``.ci/run`` runs verbatim. The checker itself is tested
on bad snippets, so it can fail.
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
README_MAX_LINES = 300

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
# a heading of prose inside a fence: two or more '#' (a one-'#' line is a shell or Python comment)
PROSE_HEADING = re.compile(r"^ {0,3}#{2,6} \S")
SNIPPET = re.compile(r'^--8<-- "([^"]+)"\s*$')
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"(?<!\!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...
SETUP_SECTION = "## Set-up: the two commands"


# ---- the checker ---------------------------------------------------------------------------


def expand_snippets(text: str, base: Path = ROOT) -> str:
    """The text with every ``--8<-- "path"`` line (pymdownx.snippets, paths from the repository
    root) replaced by that file's text, as MkDocs renders the page."""
    out = []
    for line in text.splitlines():
        m = SNIPPET.match(line)
        out.append((base / m.group(1)).read_text(encoding="utf-8") if m else line)
    return "\n".join(out)


def fence_problems(text: str) -> list[str]:
    """Unbalanced or suspicious code fences, as ``line N: ...`` messages.

    Fences follow CommonMark: a fence closes only on a bare fence of the same character, at
    least as long. An opening fence with an info string (```` ```bash ````) inside an open fence,
    a heading of two or more ``#`` inside a fence, an unclosed fence at the end, and an odd
    number of fence lines are all reported."""
    problems = []
    open_at = 0
    opener = ""
    fence_lines = 0
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            fence_lines += 1
        if not open_at:
            if m:
                open_at, opener = n, m.group(1)
            continue
        if m and m.group(1)[0] == opener[0] and len(m.group(1)) >= len(opener):
            if not m.group(2).strip():
                open_at = 0
                continue
            problems.append(f"line {n}: fence {line.strip()!r} inside the fence of line {open_at}")
        elif PROSE_HEADING.match(line):
            where = f"inside the fence of line {open_at}"
            problems.append(f"line {n}: heading {line.strip()!r} {where}")
    if open_at:
        problems.append(f"line {open_at}: fence never closed")
    if fence_lines % 2:
        problems.append(f"{fence_lines} fence lines (odd)")
    return problems


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside code fences, with inline code removed."""
    out = []
    opener = ""
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if opener:
            if m and m.group(1)[0] == opener[0] and len(m.group(1)) >= len(opener):
                if not m.group(2).strip():
                    opener = ""
            continue
        if m:
            opener = m.group(1)
            continue
        out.append((n, INLINE_CODE.sub("", line)))
    return out


def heading_texts(text: str) -> list[str]:
    """The text of every ATX heading outside code fences, Markdown markup removed (as it is
    when the slug is made: code keeps its content, a link keeps its text)."""
    out = []
    opener = ""
    for line in text.splitlines():
        m = FENCE.match(line)
        if opener:
            if m and m.group(1)[0] == opener[0] and len(m.group(1)) >= len(opener):
                if not m.group(2).strip():
                    opener = ""
            continue
        if m:
            opener = m.group(1)
            continue
        h = HEADING.match(line)
        if h:
            title = INLINE_CODE.sub(lambda c: c.group(2), h.group(2))
            title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)
            title = re.sub(r"<[^>]+>", "", title)
            title = re.sub(r"(\*\*|__|\*|(?<!\w)_|_(?!\w))", "", title)
            out.append(title.strip())
    return out


def github_slug(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped (letters of any script, digits,
    ``_`` and ``-`` kept), each space a ``-``."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def mkdocs_slug(title: str) -> str:
    """Python-Markdown's ``toc`` slugify (MkDocs' default): ASCII only, punctuation dropped,
    lower case, runs of spaces and ``-`` one ``-``."""
    value = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def anchors(text: str) -> set[str]:
    """The anchors that exist under both slug rules (duplicates numbered as each renderer
    numbers them: GitHub ``-1``, MkDocs ``_1``)."""
    both = set()
    seen_gh: dict[str, int] = {}
    seen_md: dict[str, int] = {}
    for title in heading_texts(text):
        gh, md = github_slug(title), mkdocs_slug(title)
        if gh in seen_gh:
            seen_gh[gh] += 1
            gh = f"{gh}-{seen_gh[gh]}"
        else:
            seen_gh[gh] = 0
        if md in seen_md:
            seen_md[md] += 1
            md = f"{md}_{seen_md[md]}"
        else:
            seen_md[md] = 0
        if gh == md:
            both.add(gh)
    return both


def link_targets(text: str) -> list[tuple[int, str]]:
    """(line, target) of every inline link, image and reference definition outside code."""
    out = []
    for n, line in prose_lines(text):
        for pattern in (LINK, IMAGE, REFERENCE):
            out.extend((n, m.group(1)) for m in pattern.finditer(line))
    return out


def link_problems(path: Path, text: str | None = None) -> list[str]:
    """Relative links of the page at ``path`` that do not resolve: a missing file, or an
    ``#anchor`` that is not a heading of the target (under both slug rules)."""
    text = expand_snippets(path.read_text(encoding="utf-8") if text is None else text)
    problems = []
    for n, target in link_targets(text):
        if EXTERNAL.match(target) or target.startswith("/"):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"line {n}: {target}: no file {dest}")
            continue
        if anchor:
            if dest.is_dir() or dest.suffix != ".md":
                problems.append(f"line {n}: {target}: an anchor into a file that is not Markdown")
                continue
            dest_text = text if dest == path else dest.read_text(encoding="utf-8")
            if anchor not in anchors(expand_snippets(dest_text)):
                problems.append(f"line {n}: {target}: no heading #{anchor} in {dest.name}")
    return problems


def setup_commands(readme: str) -> list[str]:
    """The commands of the README's set-up section: the one line of each of its code blocks."""
    section = readme.split(SETUP_SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```bash\n(.*?)^```$", section, flags=re.M | re.S)
    return [b.strip() for b in blocks]


# ---- the checker on bad snippets (so the checks below can fail) ----------------------------


def test_fence_checker_finds_the_broken_readme_pattern():
    # the README's old bug: a fence lost its opening line, so every later block was inverted
    bad = "text\ny = 2\n```\n\n## Pretraining\n\n```bash\nrun\n```\n"
    assert fence_problems(bad) == [
        "line 5: heading '## Pretraining' inside the fence of line 3",
        "line 7: fence '```bash' inside the fence of line 3",
        "3 fence lines (odd)",
    ]
    # two lost openings give an even number of fence lines; the structure still shows them
    problems = fence_problems(bad + "z = 3\n```\n")
    assert "line 7: fence '```bash' inside the fence of line 3" in problems
    assert not any("odd" in p for p in problems)


def test_fence_checker_accepts_comments_and_longer_fences():
    good = "```bash\n# a comment\nls\n```\n\n````markdown\n```python\nx\n```\n````\n"
    assert fence_problems(good) == []
    assert fence_problems("```\nopen\n") == ["line 1: fence never closed", "1 fence lines (odd)"]


def test_link_checker_finds_missing_files_and_anchors(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Model directories (`config.json`)\n")
    page = tmp_path / "page.md"
    text = (
        "# Page\n\n## Set-up: the two commands\n\n"
        "[ok](other.md#model-directories-configjson) [ok](#set-up-the-two-commands) "
        "[ok](https://example.org/x#y) `[not a link](nowhere.md)`\n"
        "[bad](missing.md) [bad](other.md#nope) [bad](#nope)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    page.write_text(text)
    problems = link_problems(page)
    assert len(problems) == 3, problems
    assert "missing.md" in problems[0]
    assert "#nope in other.md" in problems[1]
    assert "#nope in page.md" in problems[2]


def test_slugs_follow_github_and_mkdocs():
    assert github_slug("What is refused, and why") == "what-is-refused-and-why"
    assert mkdocs_slug("What is refused, and why") == "what-is-refused-and-why"
    assert github_slug("DeBERTa-v2/v3") == mkdocs_slug("DeBERTa-v2/v3") == "deberta-v2v3"
    # the renderers differ here, so such an anchor is refused
    assert github_slug("a -- b") != mkdocs_slug("a -- b")
    assert "a-b" not in anchors("## a -- b\n")
    assert anchors("## Speed\n\n## Speed\n") == {"speed"}  # -1 vs _1: not common to both


# ---- the pages -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_fences_are_balanced(path):
    assert fence_problems(expand_snippets(path.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert link_problems(path) == []


def test_readme_is_a_landing_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines"
    # it links into the docs rather than holding them
    assert sum("](docs/" in line for line in lines) >= 10


def test_readme_has_the_two_setup_commands_and_ci_runs_the_second():
    commands = setup_commands(README.read_text(encoding="utf-8"))
    assert len(commands) == 2, commands
    run, test = commands
    assert "\n" not in run and "\n" not in test
    assert run.startswith("python3 -m venv .venv && ") and " && bertfamily embed " in run
    assert test.startswith("python3 -m venv .venv && ") and test.endswith("python -m pytest -q")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test in ci, ".ci/run must run the README's test command verbatim"


def test_api_pages_name_objects_that_exist():
    """Every ``::: dotted.name`` of docs/api/ is a module of the package or a name in one (a
    typo would otherwise surface only when the site is built)."""
    names = []
    for page in sorted((DOCS / "api").glob("*.md")):
        names += re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), flags=re.M)
    assert names, "docs/api/ documents nothing"
    for name in names:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ModuleNotFoundError:
                continue
            for attr in parts[i:]:
                assert hasattr(obj, attr), f"{name}: {'.'.join(parts[:i])} has no {attr}"
                obj = getattr(obj, attr)
            break
        else:
            pytest.fail(f"{name}: no such module")
