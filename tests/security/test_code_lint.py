"""A lint of `src/mlyard`, read with `ast`: no unpickling, no `torch.load` of full pickles in
server code, no `yaml.load`, no `eval`/`exec`, no shell, no archive extraction without a filter.

An exception is written as a `# safe: <reason>` comment on the line where the call starts. In
server code (the server, storage, web and api parts, which handle other users' bytes) unpickling
has no exception at all. The self-tests at the end run the checker on snippets, so that the lint
cannot silently stop finding what it looks for."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src" / "mlyard"
SERVER_PARTS = ("server", "storage", "web", "api")
SAFE = re.compile(r"#\s*safe:\s*\S")
UNPICKLERS = {"pickle.load", "pickle.loads", "pickle.Unpickler", "_pickle.load", "_pickle.loads",
              "_pickle.Unpickler", "dill.load", "dill.loads", "pandas.read_pickle"}
YAML_LOADERS = {"yaml.load", "yaml.load_all", "yaml.unsafe_load", "yaml.unsafe_load_all", "yaml.full_load",
                "yaml.full_load_all"}
SHELLS = {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput",
          "asyncio.create_subprocess_shell"}


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name it was imported as (`import pickle as p`, `from os import system`)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((keyword.value for keyword in call.keywords if keyword.arg == name), None)


def _is_constant(node: ast.expr | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _imported_modules(aliases: dict[str, str]) -> set[str]:
    return {dotted.split(".")[0] for dotted in aliases.values()}


def _call_offence(call: ast.Call, name: str | None, modules: set[str], server: bool) -> str | None:
    method = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if name in UNPICKLERS:
        return f"{name} (unpickling runs code from the bytes)"
    if name and name.split(".")[0] == "cPickle":
        return f"{name} (unpickling runs code from the bytes)"
    if server and name == "torch.load" and not _is_constant(_keyword(call, "weights_only"), True):
        return "torch.load without weights_only=True in server code"
    if name in YAML_LOADERS:
        return f"{name} (use yaml.safe_load)"
    if name in {"eval", "exec", "builtins.eval", "builtins.exec"}:
        return f"{name}()"
    if name in SHELLS:
        return f"{name} (runs a shell)"
    shell = _keyword(call, "shell")
    if shell is not None and not _is_constant(shell, False):
        return "shell=True"
    if method == "extractall" and "zipfile" in modules:
        return "zipfile extractall (no member filter; validate and write members one by one)"
    if method in {"extractall", "extract"} and "tarfile" in modules and _keyword(call, "filter") is None:
        return f"tarfile {method} without filter="
    if name == "shutil.unpack_archive" and _keyword(call, "filter") is None:
        return "shutil.unpack_archive without filter="
    return None


def _excused_lines(text: str) -> set[int]:
    """Lines with a `# safe: <reason>` comment (a real comment token, not text in a string)."""
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT and SAFE.match(token.string):
            lines.add(token.start[0])
    return lines


def offences(text: str, *, server: bool, filename: str = "<snippet>") -> list[tuple[int, str]]:
    """(line, what) for each forbidden use in the source `text`; `server`: the file is server code."""
    tree = ast.parse(text, filename=filename)
    aliases = _aliases(tree)
    modules = _imported_modules(aliases)
    excused = _excused_lines(text)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(name.split(".")[0] == "cPickle" for name in imported):
                found.append((node.lineno, "imports cPickle", False))
            continue
        if not isinstance(node, ast.Call):
            continue
        what = _call_offence(node, _dotted(node.func, aliases), modules, server)
        if what:
            unpickling = "unpickling" in what or "torch.load" in what or "cPickle" in what
            found.append((node.lineno, what, unpickling and server))
    # Unpickling in server code has no exception: a comment cannot make other users' bytes safe.
    return sorted((line, what) for line, what, absolute in found if absolute or line not in excused)


def _is_server_code(path: Path) -> bool:
    return path.relative_to(SOURCE).parts[0] in SERVER_PARTS


def _source_files() -> list[Path]:
    return sorted(path for path in SOURCE.rglob("*.py") if "__pycache__" not in path.parts)


def test_src_has_no_forbidden_calls() -> None:
    report = []
    for path in _source_files():
        for line, what in offences(path.read_text(encoding="utf-8"), server=_is_server_code(path), filename=str(path)):
            report.append(f"{path.relative_to(SOURCE.parents[1])}:{line}: {what}")
    for entry in report:
        print(entry)
    assert not report, "forbidden calls (add `# safe: <reason>` only where the reason holds):\n" + "\n".join(report)


def test_server_code_never_imports_the_sdk_checkpoint_loader() -> None:
    """The sdk's pickle loader is excused because only jobs run it; the server must not import it."""
    importers = []
    for path in _source_files():
        if not _is_server_code(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [f"{node.module}.{alias.name}" for alias in node.names]
                     if isinstance(node, ast.ImportFrom) and node.module else [])
            if any(name.startswith(("mlyard.sdk.checkpoint", "mlyard.sdk.load", "mlyard.sdk.restore")) or
                   name in {"mlyard.sdk"} for name in names):
                importers.append(f"{path.relative_to(SOURCE.parents[1])}:{node.lineno}")
    assert not importers, importers


# The checker itself, on one snippet per pattern.
CAUGHT = {
    "import pickle\npickle.load(f)": "pickle.load",
    "import pickle as p\np.loads(b)": "pickle.loads",
    "from pickle import loads\nloads(b)": "pickle.loads",
    "import cPickle": "imports cPickle",
    "import yaml\nyaml.load(text, Loader=yaml.Loader)": "yaml.load",
    "import yaml\nyaml.unsafe_load(text)": "yaml.unsafe_load",
    "eval('1')": "eval()",
    "exec('x = 1')": "exec()",
    "import subprocess\nsubprocess.run('ls', shell=True)": "shell=True",
    "import subprocess\nsubprocess.Popen(['ls'], shell=flag)": "shell=True",
    "import os\nos.system('ls')": "os.system",
    "from os import popen\npopen('ls')": "os.popen",
    "import tarfile\nwith tarfile.open(p) as t:\n    t.extractall(d)": "tarfile extractall without filter=",
    "import tarfile\nt = tarfile.open(p)\nt.extract(m, d)": "tarfile extract without filter=",
    "import zipfile\nzipfile.ZipFile(p).extractall(d)": "zipfile extractall",
    "import torch\ntorch.load(p)": "torch.load without weights_only=True",
    "import torch\ntorch.load(p, weights_only=False)": "torch.load without weights_only=True",
}
ALLOWED = [
    "import yaml\nyaml.safe_load(text)",
    "import subprocess\nsubprocess.run(['ls'], shell=False)",
    "import tarfile\ntarfile.open(p).extractall(d, filter='data')",
    "import torch\ntorch.load(p, weights_only=True)",
    "import re\nre.compile('x').match('x')",
    "import pickle\npickle.dump(x, f)",
    "import os\nos.system('ls')  # safe: fixed command, no user text",
]


def test_the_checker_catches_each_pattern() -> None:
    missed = [snippet for snippet, what in CAUGHT.items()
              if not any(what in found for _, found in offences(snippet, server=True))]
    assert not missed, f"the lint no longer catches: {missed}"


def test_the_checker_lets_safe_code_and_explicit_exceptions_pass() -> None:
    flagged = {snippet: offences(snippet, server=True) for snippet in ALLOWED}
    assert all(not found for found in flagged.values()), flagged


def test_an_exception_needs_a_real_comment_with_a_reason() -> None:
    assert offences("import os\nos.system('ls')  # safe:", server=False)  # no reason
    assert offences("import os\nos.system('ls #  safe: text')", server=False)  # inside a string
    assert offences("import os\n# safe: a line above\nos.system('ls')", server=False)


def test_unpickling_in_server_code_has_no_exception() -> None:
    snippet = "import pickle\npickle.load(f)  # safe: trusted"
    assert offences(snippet, server=False) == []
    assert offences(snippet, server=True) == [(2, "pickle.load (unpickling runs code from the bytes)")]


def test_torch_load_outside_server_code_is_the_jobs_own_business() -> None:
    assert offences("import torch\ntorch.load(p, weights_only=False)", server=False) == []
