"""The shape of the code, checked: no import circle in the product or in devkit, no product function
over 60 lines (node schema declarations aside) or module over 400, benchmarks that reach the product
through public names alone, flipping none of its module flags, and no private devkit name used
outside its module. (The layer contracts themselves are pyproject.toml's [tool.importlinter], run
by `lint-imports` in CI.)"""

import ast
import os

import grimp
import pytest

from devkit.paths import ROOT

PRODUCT = os.path.join(ROOT, "eridiffusion")
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400


def python_files(folder):
    for directory, _, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(directory, name)


def import_circles(graph):
    """The strongly connected groups of more than one module in `graph` (Tarjan's algorithm)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = set()
            while not group or module not in group:
                group.add(stack.pop())
            on_stack.difference_update(group)
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return circles


@pytest.mark.parametrize("package, least_modules", [("eridiffusion", 80), ("devkit", 30)])
def test_the_product_and_devkit_have_no_import_circle(package, least_modules):
    graph = grimp.build_graph(package, cache_dir=None)
    assert len(graph.modules) > least_modules
    assert import_circles(graph) == []


def test_an_import_circle_is_found():
    """The check above can fail: a graph with a circle of three modules gives that circle."""
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"):
        graph.add_module(name)
    for importer, imported in (("pkg.a", "pkg.b"), ("pkg.b", "pkg.c"), ("pkg.c", "pkg.a"), ("pkg.d", "pkg.a")):
        graph.add_import(importer=importer, imported=imported)
    assert import_circles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_product_functions_fit_on_a_screen_and_modules_stay_under_400_lines():
    long_functions, long_modules = [], []
    for path in python_files(PRODUCT):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        where = os.path.relpath(path, ROOT)
        if len(source.splitlines()) > MAX_MODULE_LINES:
            long_modules.append((where, len(source.splitlines())))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "define_schema":
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long_functions.append((f"{where}:{node.lineno} {node.name}", lines))
    assert long_functions == [] and long_modules == []


def product_names_used(path):
    """(names imported from the product, assignments to attributes of product modules) in `path`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imported, modules, assigned = [], set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("eridiffusion"):
            for alias in node.names:
                imported.append(alias.name)
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name.startswith("eridiffusion"))
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in modules:
                assigned.append(f"{target.value.id}.{target.attr}")
    return imported, assigned


@pytest.mark.parametrize("path", sorted(python_files(os.path.join(ROOT, "bench"))), ids=os.path.basename)
def test_the_benchmarks_use_public_names_and_flip_no_module_flags(path):
    imported, assigned = product_names_used(path)
    assert [name for name in imported if name.startswith("_")] == []
    assert assigned == []


def test_a_private_import_or_a_flipped_flag_in_a_benchmark_is_found(tmp_path):
    bench = tmp_path / "bench.py"
    bench.write_text(
        "from eridiffusion.training.speed import fp8_products\n"
        "from eridiffusion.training.adapters.attach import _hidden\n"
        "fp8_products.MIN_MACS = 0\n"
    )
    assert product_names_used(str(bench)) == (["fp8_products", "_hidden"], ["fp8_products.MIN_MACS"])


def private_devkit_names(path):
    """The private names of devkit modules (`devkit.module._name`) that the file at `path` reaches:
    imported by name, or read as an attribute of an imported devkit module."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found, modules = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "devkit":
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{node.module}.{alias.name}")
                elif node.module == "devkit":
                    modules[alias.asname or alias.name] = f"devkit.{alias.name}"
        elif isinstance(node, ast.Import):
            modules.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("devkit.")})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if isinstance(node.value, ast.Name) and node.value.id in modules:
                found.append(f"{modules[node.value.id]}.{node.attr}")
    return found


def test_no_private_devkit_name_is_used_outside_its_module():
    folders = ("devkit", "tests", "bench", "demo", "scripts")
    files = [path for folder in folders for path in python_files(os.path.join(ROOT, folder))]
    assert len(files) > 150
    assert [(os.path.relpath(path, ROOT), name) for path in files for name in private_devkit_names(path)] == []


def test_a_private_devkit_name_imported_or_read_from_another_module_is_found(tmp_path):
    user = tmp_path / "user.py"
    user.write_text(
        "from devkit.tiny_flux import _helper, FLUX_WIDTH\n"
        "from devkit import workflow\n"
        "import devkit.tiny_models as registry\n"
        "workflow._is_widget(spec)\n"
        "registry._module, registry.TINY_FAMILIES, workflow.__doc__\n"
    )
    assert private_devkit_names(str(user)) == [
        "devkit.tiny_flux._helper",
        "devkit.workflow._is_widget",
        "devkit.tiny_models._module",
    ]
