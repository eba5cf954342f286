"""The floors of ARCHITECTURE.md hold: no import cycle, no import from a lower floor upward.

Every ``import`` of the package is read with `ast` (module level and function-local alike; only
``if TYPE_CHECKING:`` blocks are skipped) and resolved to a module of the package.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "bertfamily"


def floors() -> dict[str, int]:
    """Top-level unit of the package (``"build"``, ``"modules"``, ...) → its floor number, read
    from the table in ARCHITECTURE.md (``| N name | `a`, `b/` | ...``)."""
    table: dict[str, int] = {}
    for line in (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*(\d+)\s+[^|]*\|([^|]*)\|", line)
        if m:
            for name in re.findall(r"`([^`]+)`", m.group(2)):
                table[name.rstrip("/")] = int(m.group(1))
    return table


def modules() -> dict[str, Path]:
    """Dotted module name → file, for every module of the package."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules that module ``name`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "bertfamily")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "bertfamily":
                continue
            for alias in node.names:  # `from pkg import submodule` names a module
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m in known and m != name}


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_module_has_a_floor(graph):
    table = floors()
    assert table, "ARCHITECTURE.md has no floor table"
    missing = sorted({unit(m) for m in graph} - set(table))
    assert not missing, f"modules without a floor in ARCHITECTURE.md: {missing}"


def test_no_import_from_a_lower_floor_to_a_higher_one(graph):
    table = floors()
    upward = [
        f"{a} (floor {table[unit(a)]}) imports {b} (floor {table[unit(b)]})"
        for a, targets in graph.items()
        for b in targets
        if table.get(unit(b), -1) > table.get(unit(a), 99)
    ]
    assert not upward, "\n".join(sorted(upward))


def test_no_import_cycle(graph):
    # Tarjan's strongly connected components; any component of two or more is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_sees_function_local_and_relative_imports(tmp_path):
    """The parser must catch what it is meant to catch (else the tests above cannot fail)."""
    known = modules()
    model = imports("bertfamily.model", PACKAGE / "model.py", known)
    assert "bertfamily.checkpoints.io" in model and "bertfamily.config" in model
    probe = tmp_path / "encoder.py"
    probe.write_text("def f():\n    from ..build import build_model\n    from . import attention\n")
    found = imports("bertfamily.modules.encoder", probe, known)
    assert found == {"bertfamily.build", "bertfamily.modules.attention"}


def test_model_has_no_family_knowledge():
    source = (PACKAGE / "model.py").read_text(encoding="utf-8")
    families = [
        "bert",
        "albert",
        "roberta",
        "distilbert",
        "spanbert",
        "deberta",
        "longformer",
        "tinybert",
        "electra",
    ]
    words = set(re.findall(r"[a-z]+", source.lower()))
    assert not words & set(families), f"family names in model.py: {sorted(words & set(families))}"
    assert "attention_kind" not in source


def test_import_bertfamily_does_not_import_torch():
    code = "import sys, bertfamily; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_loader_resolves_names_through_one_resolver(graph):
    """One resolver (floor 0, `resources.resolve.resolve_model`) turns a directory, a resource
    name or a cached ``org/name`` into a directory, for the CLI and the Python loaders alike."""
    assert floors()["resources"] == 0
    for loader in (
        "bertfamily.pretrained",
        "bertfamily.tokenization.tokenizer",
        "bertfamily.pipelines.embedding.embed",
        "bertfamily.inference.loading",
        "bertfamily.serve.app",
        "bertfamily.cli.common",  # model_path: every --model / --teacher / MODEL option
    ):
        assert "bertfamily.resources.resolve" in graph[loader], loader
    callers = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "resolve.py" and "= resolve_model_dir(" in p.read_text(encoding="utf-8")
    ]
    assert not callers, f"resolve_model_dir called outside resolve_model: {callers}"
