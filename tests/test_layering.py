"""Layering: core imports no server / runtime code, and core's modules import each other
without a cycle (use cases sit over the dependency bundle, not over the service facade)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ferrex

PACKAGE = Path(ferrex.__file__).parent


def _imports(path: Path) -> set[str]:
    """Modules of ferrex imported at module level or in functions (TYPE_CHECKING included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ferrex"):
            found.add(node.module)
            for alias in node.names:  # from ferrex.core import errors
                found.add(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ferrex"))
    return found


def _core_modules() -> dict[str, Path]:
    """core's modules by dotted name, those of its packages (core/recall/) included."""
    modules: dict[str, Path] = {}
    for path in (PACKAGE / "core").rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 2:  # not ferrex.core itself
            modules[".".join(parts)] = path
    return modules


def _core_graph() -> dict[str, set[str]]:
    modules = _core_modules()
    return {name: _imports(path) & set(modules) for name, path in modules.items()}


def test_core_imports_no_server_or_runtime_code() -> None:
    for path in (PACKAGE / "core").rglob("*.py"):
        outer = {
            m
            for m in _imports(path)
            if m.startswith(("ferrex.server", "ferrex.runtime", "ferrex.cli"))
        }
        assert not outer, (path.name, outer)


_SQL = re.compile(
    r"\b(?:SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|PRAGMA|VACUUM)\b|\bWHERE\b|"
    r"\bIS (?:NOT )?NULL\b|\bORDER BY\b|\w+ = \?"
)


def test_core_holds_no_sql_text() -> None:
    """SQL lives in the store adapter: core asks typed questions (``core/ports.py``), so a
    renamed column breaks the adapter's code, never a string no type checker sees."""
    for path in (PACKAGE / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and _SQL.search(text):
                raise AssertionError(f"{path.name}: SQL text {node.value[:60]!r}")


def test_core_modules_import_each_other_without_a_cycle() -> None:
    graph = _core_graph()
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for other in sorted(graph[name]):
            if state.get(other) == 1:
                cycle = [*path[path.index(other) :], other] if other in path else [name, other]
                raise AssertionError(" -> ".join(cycle))
            if other not in state:
                visit(other, [*path, other])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


# --------------------------------------------------------------------------- capabilities

# core/ by capability: what each folder may import from the others (the rest of core is the
# kernel: the record, the ports, requests and results, the clock, errors, and the composition
# root, service.py and deps.py, which wires every capability). The map is acyclic: no capability
# reaches back into one that builds on it.
CAPABILITIES: dict[str, set[str]] = {
    "matching": set(),
    "secrets": set(),
    "index": set(),
    "lifecycle": {"index"},
    "reading": {"lifecycle"},
    "ingest": {"index", "lifecycle", "matching", "secrets"},
    "recall": {"index", "ingest", "lifecycle", "matching"},
    "ops": {"index", "lifecycle", "secrets"},
}
# Kernel modules every capability builds on: they import no capability.
KERNEL_LEAVES = ("clock", "conditions", "errors", "ids", "memory", "ports")
# Only the operator's work and the sweep of stored secrets sit over the service facade.
OVER_THE_SERVICE = ("ferrex.core.ops.", "ferrex.core.secrets.sweep")


def _capability(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[2] in CAPABILITIES else None


def test_core_is_grouped_by_capability() -> None:
    """Every folder of core/ is a capability of the map (a new folder chooses its place)."""
    folders = {p.name for p in (PACKAGE / "core").iterdir() if (p / "__init__.py").exists()}
    assert folders == set(CAPABILITIES), folders ^ set(CAPABILITIES)


def test_capabilities_import_each_other_only_as_the_map_says() -> None:
    crossing: list[str] = []
    for name, imported in _core_graph().items():
        own = _capability(name)
        for other in imported:
            theirs = _capability(other)
            if own is not None and theirs not in (None, own) and theirs not in CAPABILITIES[own]:
                crossing.append(f"{name} -> {other}")
            if other == "ferrex.core.service" and not name.startswith(OVER_THE_SERVICE):
                crossing.append(f"{name} -> {other}")
        if name.removeprefix("ferrex.core.") in KERNEL_LEAVES:
            crossing.extend(f"{name} -> {o}" for o in imported if _capability(o) is not None)
    assert not crossing, crossing


def test_the_capability_map_has_no_cycle() -> None:
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name not in done:
            for other in CAPABILITIES[name]:
                visit(other, (*path, name))
            done.add(name)

    for name in CAPABILITIES:
        visit(name, ())


def test_the_server_answers_the_handshake_without_importing_the_engine() -> None:
    """What `ferrex` imports before it answers initialize and tools/list: the MCP SDK and
    ferrex's own light modules, not the engine (numpy, the model runtime, the index); those load
    when the engine opens, after the handshake (docs/performance.md)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import ferrex.cli, ferrex.server.app, ferrex.runtime.shared, ferrex.datadir\n"
        "heavy = ('numpy', 'fastembed', 'onnxruntime', 'qdrant_edge', 'ferrex.core.service')\n"
        "print(' '.join(sorted(m for m in heavy if m in sys.modules)))\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert found.stdout.strip() == "", found.stdout


def test_every_operation_resolves_and_the_link_serves_them_all() -> None:
    """The registry names each operation once; its code references resolve (a moved module
    breaks here, not in a call), and the link serves every operation the engine dispatches."""
    from ferrex import registry
    from ferrex.runtime.link import ENGINE_OPS
    from ferrex.server.tools import TOOL_NAMES, TOOLS

    assert len(registry.NAMES) == len(registry.OPERATIONS) == len(set(registry.NAMES))
    assert tuple(ENGINE_OPS) == registry.NAMES
    assert [t.name for t in TOOLS] == list(TOOL_NAMES) == list(registry.TOOL_NAMES)
    for op in registry.OPERATIONS:
        assert callable(registry.resolve(op.use_case)), op.name
        for reference in (op.request, op.present, op.answer):
            if reference is not None:
                assert registry.resolve(reference) is not None, (op.name, reference)
        if op.tool is not None:  # what tools/list shows is made from these
            assert op.request is not None and op.answer is not None, op.name
        if op.cli is not None:  # each CLI flag names a field of the request model
            from ferrex.cli.parser import field_kind

            model = registry.resolve(op.request or "")
            for flag in op.cli.flags:
                assert field_kind(model, flag.field)[0] is not None, (op.name, flag.field)
            if op.cli.render is not None:
                assert callable(registry.resolve(op.cli.render)), op.name


# The operator commands of the CLI by name: commands, not operations, though some share
# a name (init, doctor, export, import; rebuild-index is the rebuild operation's command).
_COMMANDS_NOT_OPERATIONS = {("cli/main.py", "_operator_commands")}


def _operation_name_collections(
    path: Path, names: set[str], skip: set[str] | None = None
) -> list[int]:
    """Lines of ``path`` where a literal list, tuple, set or dict names two operations or
    more (as string constants): a second copy of the operation list. ``skip``: functions
    whose literals are left out."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(inner)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef) and function.name in (skip or set())
        for inner in ast.walk(function)
    }
    lines: list[int] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items: list[ast.expr | None] = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        else:
            continue
        named = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
        if len(named) >= 2:
            lines.append(node.lineno)
    return lines


def test_the_operation_names_are_listed_in_one_place() -> None:
    """Adding an operation is one registry entry: no other module of src/ lists them."""
    from ferrex import registry

    names = set(registry.NAMES)
    found: dict[str, list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        skip = {function for file, function in _COMMANDS_NOT_OPERATIONS if file == where}
        lines = [] if where == "registry.py" else _operation_name_collections(path, names, skip)
        if lines:
            found[where] = lines
    assert found == {}, found
    entries = [
        node
        for node in ast.walk(ast.parse((PACKAGE / "registry.py").read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "Operation"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]
    assert sorted(e.args[0].value for e in entries) == sorted(names)  # type: ignore[attr-defined]


def test_a_second_list_of_operation_names_is_found(tmp_path: Path) -> None:
    """The check above can fail."""
    module = tmp_path / "copy.py"
    module.write_text('OPS = ("ping", "store")\nKEYS = {"recall": 1, "stats": 2}\nONE = ["x"]\n')
    assert _operation_name_collections(module, {"ping", "store", "recall", "stats"}) == [1, 2]


def test_every_setting_chooses_whether_it_crosses_to_another_process() -> None:
    """What a joining process is told is an allow-list; secrets never cross."""
    from ferrex.config import Settings
    from ferrex.runtime.operations import ENGINE_SETTINGS, PROCESS_SETTINGS, engine_settings

    fields = set(Settings.model_fields)
    chosen = ENGINE_SETTINGS | PROCESS_SETTINGS
    assert fields == chosen, fields ^ chosen
    assert not ENGINE_SETTINGS & PROCESS_SETTINGS
    told = engine_settings(Settings(qdrant_api_key="k" * 20, http_token="t" * 32))
    assert set(told) == ENGINE_SETTINGS
    assert "k" * 20 not in str(told) and "t" * 32 not in str(told)


def test_core_reads_only_its_settings() -> None:
    """Use cases get ``CoreSettings`` (config/core.py): the tuning sections and a few keys, never
    a credential, an engine's address or a model path. Only the facade (core/service.py), which
    the wiring hands the whole ``Settings``, imports it."""
    from ferrex.config import Settings
    from ferrex.config.core import CORE_SETTINGS, CoreSettings

    exposed = {n for n in dir(CoreSettings) if not n.startswith("_")}
    assert exposed == set(CORE_SETTINGS), exposed ^ set(CORE_SETTINGS)
    for kept_out in ("qdrant_api_key", "http_token", "qdrant_url", "qdrant", "model_path"):
        assert kept_out not in exposed
    # A view of the live settings: a section swapped in is what core reads next.
    settings = Settings(qdrant_api_key="k" * 20)
    core = CoreSettings(settings)
    assert not hasattr(core, "qdrant_api_key")
    settings.retrieval = settings.retrieval.model_copy(update={"min_score": 0.5})
    assert core.retrieval.min_score == 0.5
    importers = [
        path.relative_to(PACKAGE).as_posix()
        for path in (PACKAGE / "core").rglob("*.py")
        if "ferrex.config.Settings" in _imports(path)
        or "ferrex.config.settings.Settings" in _imports(path)
    ]
    assert importers == ["core/service.py"], importers


# --------------------------------------------------------------------------- import cycles


def _all_modules() -> dict[str, Path]:
    """Every module of ferrex by dotted name (a package by its own name, for its __init__)."""
    modules: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The ferrex modules ``path`` imports when it runs, at module level or in a function
    (``if TYPE_CHECKING:`` blocks left out). ``from ferrex.a import b`` is ferrex.a.b when b is
    a module, else ferrex.a."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found & modules


def _import_cycles() -> list[set[str]]:
    """The strongly connected groups (of two or more modules, or one importing itself) of
    src/'s import graph (Tarjan's algorithm)."""
    modules = _all_modules()
    graph = {name: _runtime_imports(path, set(modules)) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def connect(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in sorted(graph[name]):
            if other not in index:
                connect(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == name:
                    break
            if len(group) > 1 or name in graph[name]:
                groups.append(group)

    for name in sorted(graph):
        if name not in index:
            connect(name)
    return groups


def test_the_cycle_finder_finds_a_cycle(tmp_path: Path) -> None:
    """The check below can fail: two modules importing each other (one in a function) are
    a cycle, and a TYPE_CHECKING import is not."""
    one = tmp_path / "one.py"
    one.write_text("import ferrex.two\n")
    two = tmp_path / "two.py"
    two.write_text("def f():\n    from ferrex import one\n")
    three = tmp_path / "three.py"
    three.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ferrex.one\n")
    names = {"ferrex.one", "ferrex.two", "ferrex.three"}
    assert _runtime_imports(one, names) == {"ferrex.two"}
    assert _runtime_imports(two, names) == {"ferrex.one"}
    assert _runtime_imports(three, names) == set()


def test_src_has_no_import_cycle() -> None:
    """No module of src/ imports (at module level or in a function) one that imports it back,
    directly or around a loop. (Importing ferrex.a.b runs ferrex/a/__init__.py first; that is
    not counted as ferrex.a.b importing ferrex.a.)"""
    modules = _all_modules()
    assert "ferrex.cli.main" in modules and "ferrex.core.service" in modules
    assert _import_cycles() == []


def test_tests_share_code_only_through_support() -> None:
    """Test modules import shared code from tests/support/, never from another test module
    or from a conftest (pytest loads those itself)."""
    tests = Path(__file__).resolve().parent
    wrong: list[str] = []
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            wrong.extend(
                f"{path.relative_to(tests)}: {name}"
                for name in names
                if (name.startswith("tests.") and not name.startswith("tests.support"))
                or name.split(".")[-1] == "conftest"
                or name.split(".")[-1].startswith("test_")
            )
    assert not wrong, wrong


# --------------------------------------------------------------------------- the code map

CONTINUATION = 24  # a map line this indented continues the entry above it


def _code_map() -> dict[str, set[str]]:
    """docs/design.md's code map: each folder it names (relative to src/, "ferrex/core/ingest")
    with the modules it lists there."""
    design = (PACKAGE.parents[1] / "docs" / "design.md").read_text()
    block = design.split("## Code map", 1)[1].split("```", 2)[1]
    listed: dict[str, set[str]] = {}
    stack: list[str] = []
    current: list[str] = []
    for line in block.strip("\n").splitlines():
        indent = len(line) - len(line.lstrip())
        first = line.split()[0]
        if first.endswith("/"):
            stack = [*stack[: indent // 2], first.strip("/").removeprefix("src/")]
            current = stack
        elif indent < CONTINUATION:
            current = stack[: indent // 2]
        listed.setdefault("/".join(current), set()).update(re.findall(r"\b\w+\.py\b", line))
    return listed


def test_the_code_map_matches_the_tree() -> None:
    """Every folder and module the map names exists; every package is in it, and every module
    of core/ (the capabilities are the part of the map a reader navigates by)."""
    listed = _code_map()
    src = PACKAGE.parent
    missing = [
        f"{folder}/{name}"
        for folder, names in listed.items()
        for name in names | {"__init__.py"}
        if not (src / folder / name).is_file()
        and not (folder == "ferrex" and name == "__init__.py")
    ]
    assert not missing, f"named in docs/design.md's code map but not in src/: {missing}"
    packages = {
        str(p.parent.relative_to(src)) for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE
    }
    assert packages <= set(listed), f"packages missing from the code map: {packages - set(listed)}"
    unlisted = [
        str(p.relative_to(src))
        for p in (PACKAGE / "core").rglob("*.py")
        if p.name != "__init__.py" and p.name not in listed.get(str(p.parent.relative_to(src)), ())
    ]
    assert not unlisted, f"core modules missing from the code map: {unlisted}"
