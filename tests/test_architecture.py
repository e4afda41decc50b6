"""The package's shape (docs/ARCHITECTURE.md), checked from the source: each layer imports only
from the layers below it, no import circle among specchat's modules, the core runs without
transformers, gradio, plotly or argparse, and no module grows past ~500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specchat"

# what each part of the package may import from specchat (its own part included)
ALLOWED = {
    "core": {"core"},
    "drafters": {"core", "drafters"},
    "errors": set(),
    "offline": set(),
    "progress": set(),
    "runtimes": {"core", "drafters", "runtimes", "errors", "progress", "offline"},
    "analysis": {"core", "drafters", "runtimes", "analysis", "errors", "progress"},
    # the service's interface: what the page and the commands use of a service (types only below it)
    "service_api": {"core", "drafters", "runtimes", "analysis", "errors"},
    "service": {"core", "drafters", "runtimes", "analysis", "errors", "progress", "service_api"},
    "options": {"drafters", "runtimes", "errors", "offline"},
    "conversation": {"core", "drafters"},
    "ui": {"core", "drafters", "runtimes", "analysis", "service", "service_api", "conversation", "options", "errors", "progress",
           "ui"},
    "commands": {"core", "drafters", "runtimes", "analysis", "service", "service_api", "conversation", "options", "errors",
                 "progress", "ui", "commands"},
    "__main__": {"commands"},
    "__init__": {"offline"},
}
CORE_FORBIDDEN = {"transformers", "gradio", "plotly", "argparse", "yaml", "pydantic", "bitsandbytes", "llama_cpp"}
MAX_LINES = 520  # "no room over ~500 lines"
MAX_FUNCTION_LINES = 120
# inside ui/, each folder imports only from those below it: html (HTML and the page's JS and CSS)
# < charts (Plotly figures) < session (one browser session, no gradio) < page (gradio); only the
# page imports gradio, so the sessions, the views and everything below them run and are tested
# without it
UI_ALLOWED = {
    "html": {"html"},
    "charts": {"html", "charts"},
    "session": {"html", "charts", "session"},
    "page": {"html", "charts", "session", "page"},
}
GRADIO_FOLDER = "page"
MAX_TOP_LEVEL_MODULES = 9


def modules() -> dict[str, Path]:
    """Dotted name → file, for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(specchat modules it imports, other top-level packages it imports), anywhere in the file."""
    ours, others = set(), set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            if target == "specchat" or target.startswith("specchat."):
                while target not in known and "." in target:
                    target = target.rpartition(".")[0]
                if target in known and target != "specchat":
                    ours.add(target)
            elif target and target != "__future__":
                others.add(target.split(".")[0])
    return ours, others


def part(module: str) -> str:
    rest = module.split(".", 1)[1] if "." in module else "__init__"
    return rest.split(".")[0]


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods))[0] - {name} for name, path in mods.items()}


def test_each_layer_imports_only_from_below():
    bad = []
    for name, deps in graph().items():
        allowed = ALLOWED[part(name)]
        bad += [f"{name} imports {dep}" for dep in sorted(deps) if part(dep) not in allowed]
    assert not bad, "\n".join(bad)


def test_no_import_circle():
    deps, state, cycles = graph(), {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(deps[node]):
            if nxt.startswith(node + "."):  # a package importing its own module is no circle
                continue
            if state.get(nxt) == "open":
                cycles.append(" -> ".join([*stack[stack.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in sorted(deps):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


def test_the_core_needs_no_model_library_ui_or_file_format():
    mods = modules()
    for name, path in mods.items():
        if part(name) == "core":
            others = imports(name, path, set(mods))[1]
            assert not others & CORE_FORBIDDEN, f"{name} imports {sorted(others & CORE_FORBIDDEN)}"


def test_no_module_over_about_500_lines_and_few_at_the_top():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def ui_folder(module: str) -> str | None:
    """``html``, ``charts``, ``session`` or ``page`` for a module of specchat.ui (None for the package)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["specchat", "ui"] else None


def test_every_ui_module_is_in_a_folder_that_imports_only_from_below():
    mods = modules()
    bad = []
    for name, deps in graph().items():
        folder = ui_folder(name)
        if part(name) != "ui" or name == "specchat.ui":  # the package itself: only the offline settings
            continue
        assert folder in UI_ALLOWED, f"{name}: a ui module outside html/, charts/, session/ and page/"
        bad += [f"{name} imports {dep}" for dep in sorted(deps)
                if part(dep) == "ui" and ui_folder(dep) is not None and ui_folder(dep) not in UI_ALLOWED[folder]]
        if folder != GRADIO_FOLDER and "gradio" in imports(name, mods[name], set(mods))[1]:
            bad.append(f"{name} imports gradio (only ui/page/ may)")
    assert not bad, "\n".join(bad)


def test_no_function_over_about_120_lines():
    long = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long[f"{name}.{node.name}"] = size
    assert not long, long


def test_the_service_interface_imports_no_model_library_at_run_time():
    """specchat.service_api names torch's and the analysis' types for the type checker only: the
    page's light modules and ``specchat --help`` import it without torch."""
    path = PACKAGE / "service_api.py"
    tree = ast.parse(path.read_text())
    for node in tree.body:  # the module's top level, outside `if TYPE_CHECKING:`
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specchat"):
            raise AssertionError(f"service_api imports {node.module} at run time")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            assert not {n.split(".")[0] for n in names} & (CORE_FORBIDDEN | {"torch", "numpy"}), names
