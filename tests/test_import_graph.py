"""The package's import graph: no cycle, and no arrow from a lower floor to a higher one.

Every `import` and `from ... import` counts, at module level and inside functions (a cycle made
of function-level imports still ties two modules together). Floors, bottom to top; an import may
point down or sideways within a floor, never up:
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).parents[1]
PACKAGE = ROOT / "opennmt_lite"

FLOORS = (
    ("base", ("opennmt_lite", "opennmt_lite.errors", "opennmt_lite.files", "opennmt_lite.outputs",
              "opennmt_lite.cpu", "opennmt_lite.recorder", "opennmt_lite.keras_backend")),
    ("config", ("opennmt_lite.config", "opennmt_lite.hyperparameters")),
    ("data", ("opennmt_lite.data",)),
    ("layers", ("opennmt_lite.layers",)),
    ("models", ("opennmt_lite.models",)),
    ("checkpointing", ("opennmt_lite.checkpointing",)),
    ("training", ("opennmt_lite.training",)),
    ("inference/export", ("opennmt_lite.inference", "opennmt_lite.export", "opennmt_lite.inspection")),
    ("build", ("opennmt_lite.build",)),
    ("serving", ("opennmt_lite.serving",)),
    ("commands", ("opennmt_lite.commands",)),
    ("command line", ("opennmt_lite.cli", "opennmt_lite.__main__", "opennmt_lite.onmt", "run")),
)
__doc__ += "\n".join(f"  {i} {name}: {', '.join(prefixes)}" for i, (name, prefixes) in enumerate(FLOORS))


def modules():
    """{module name: path} of every module of the package, and run.py."""
    found = {"run": ROOT / "run.py"}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(name, path, known):
    """The package modules that module `name` (at `path`) imports, anywhere in its code."""
    is_package = path.name == "__init__.py"
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from package import module` is an edge to the module (not to the package's
            # __init__, which every submodule import runs anyway); `from module import name`
            # an edge to the module
            submodules = [f"{module}.{alias.name}" for alias in node.names]
            candidates = ([] if all(s in known for s in submodules) else [module]) + submodules
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def floor(module):
    """The index in FLOORS of `module`: its longest matching prefix."""
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            # (the root package is its own floor, not a prefix of every module)
            inside = module.startswith(prefix + ".") and prefix != "opennmt_lite"
            if (module == prefix or inside) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def graph():
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return result


def test_every_module_has_a_floor():
    assert [m for m in modules() if floor(m) is None] == []


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_no_upward_import():
    upward = []
    for module, targets in sorted(graph().items()):
        for target in sorted(targets):
            if floor(target) > floor(module):
                upward.append(f"{module} ({FLOORS[floor(module)][0]}) -> {target} "
                              f"({FLOORS[floor(target)][0]})")
    assert upward == []


def test_the_walk_sees_function_level_and_relative_imports(tmp_path):
    """The checker itself: an import inside a function and a relative import are edges."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from pkg import high\n")
    (package / "high.py").write_text("from . import low\n")
    known = {"pkg": package / "__init__.py", "pkg.low": package / "low.py",
             "pkg.high": package / "high.py"}
    edges = {name: imported(name, path, known) for name, path in known.items()}
    assert edges["pkg.low"] == {"pkg.high"}
    assert edges["pkg.high"] == {"pkg.low"}
    assert cycles(edges) == [["pkg.high", "pkg.low"]]
