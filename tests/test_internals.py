"""No module of app/, runner/ or ui/ reaches into another module's internals.

A name with a leading underscore (``_parse``) and a module with one (``app/x/_y.py``) belong
to their own module; everything else imports what a module exports. import-linter
(pyproject.toml) holds which packages may import which; this holds *what* they may import.
The test reads the source (``ast``), so it sees function-level imports too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "runner", "ui")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def reaches_into(source: str, module: str) -> Iterator[str]:
    """Each place ``source`` (the text of ``module``) uses another module's private name."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> the project module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    if any(_private(part) for part in alias.name.split(".")):
                        yield f"{module}:{node.lineno}: import {alias.name}"
                    if alias.asname:
                        modules[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES or node.module == module:
                continue
            if any(_private(part) for part in node.module.split(".")):
                yield f"{module}:{node.lineno}: from {node.module} import …"
            for alias in node.names:
                if _private(alias.name):
                    yield f"{module}:{node.lineno}: from {node.module} import {alias.name}"
                elif _is_module(f"{node.module}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            value = node.value
            while isinstance(value, ast.Attribute):
                value = value.value
            if isinstance(value, ast.Name) and value.id in modules:
                yield f"{module}:{node.lineno}: {ast.unparse(node)}"


def test_no_module_imports_another_modules_private_names() -> None:
    found = [
        place
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for place in reaches_into(path.read_text(encoding="utf-8"), _module_name(path))
    ]
    assert found == []


def test_the_check_sees_each_way_of_reaching_in() -> None:
    source = "\n".join(
        [
            "from app.units import _margin",
            "from app.hardware._probe import detect",
            "import app.hardware._probe",
            "import app.predict.speed as speed",
            "from app.planning import planner",
            "def f():",
            "    from app.model.spec import _shape",
            "    return speed._depth, planner._search(), app.units.GIB",
        ]
    )
    found = list(reaches_into(source, "ui.cli.x"))
    assert [place.split(": ", 1)[1] for place in found] == [
        "from app.units import _margin",
        "from app.hardware._probe import …",
        "import app.hardware._probe",
        "from app.model.spec import _shape",
        "speed._depth",
        "planner._search",
    ]


def test_a_module_may_use_its_own_private_names_and_anyones_public_ones() -> None:
    source = "\n".join(
        [
            "from app.units import GIB, format_bytes",
            "import app.predict.speed as speed",
            "def _helper(): return speed.tok_per_s, GIB",
            "x = _helper()",
        ]
    )
    assert list(reaches_into(source, "app.planning.words")) == []
