"""The subpackages stay in layers: storage < log < read < delta, iceberg < write < maintenance < table < cli, each
importing only from its own subpackage and the layers below (top-level modules such as ``errors`` and
``statistics`` serve all), at module level or inside a function alike; the two table-format mirrors (``delta``,
``iceberg``) share a layer and neither imports the other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LEVELS = [["storage"], ["log"], ["read"], ["delta", "iceberg"], ["write"], ["maintenance"], ["table"], ["cli"]]
LAYERS = [layer for level in LEVELS for layer in level]
PACKAGE = Path(__file__).resolve().parents[2] / "src" / "parquet_sink"


def _imported_layers(path: Path) -> list[tuple[str, str]]:
    """(layer, import statement) of every import of a subpackage in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                names = [node.module or ""]
            elif node.level == 2:  # from ..layer import x / from .. import layer
                names = [node.module] if node.module else [alias.name for alias in node.names]
            names = [n.removeprefix("parquet_sink.").split(".")[0] for n in names if n]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names if a.name.startswith("parquet_sink.")]
        found += [(name, ast.unparse(node)) for name in names if name in LAYERS]
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_a_layer_above_it(layer: str) -> None:
    level = next(i for i, names in enumerate(LEVELS) if layer in names)
    above = {name for names in LEVELS[level:] for name in names} - {layer}  # its peers too
    wrong = [
        f"{path.relative_to(PACKAGE)}: {statement}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for imported, statement in _imported_layers(path)
        if imported in above
    ]
    assert not wrong, wrong
    assert list((PACKAGE / layer).rglob("*.py")), f"no module in {layer}/"
