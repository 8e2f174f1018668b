"""The library's layers, measured from its sources: every `#include "<folder>/..."` in src/**/*.h and
src/**/*.cpp is an edge from the including file's folder to <folder>, and the folders must keep this
order, lowest first (a folder includes its own files and those of lower levels, never a folder of
its own level or above):

    0  core                        tensor, dtype, allocators, threads, atomic_file
    1  ops                         the com.onnxtrain operator table and the optimizer rows
    2  ir, distributed             the graph and its ONNX I/O, typing; the communicator, reductions,
                                   rank agreement (kernels run collectives, so distributed sits below)
    3  io, kernels, autodiff       .npy/.npz; compute; gradient rules (each needs only ir and below)
    4  runtime                     planner passes, executor, partial runs
    5  train                       graph passes, losses, schedules, checkpoint formats
    6  api                         every public class: sessions, Trainer, agent, C++ entry points

Also measured: no cycle among the folders (whatever the order says); the public headers
(include/onnxtrain) include no internal folder; the folders below train do not reach the public
session header (include/onnxtrain/session.h, directly or through other public headers: they take
public types from the small vocabulary headers: tensor, dtype, value, device, error); no C++ file
under src/ is over 1,500 lines except the rule table (src/autodiff/rules.cpp), and
src/api/training_session.cpp is at most 600; the com.onnxtrain domain string is written once. A new folder under src/ fails until it is given a level
here. Each failure names the file and the include."""
import os
import re
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")
PUBLIC = os.path.join(ROOT, "include", "onnxtrain")

LEVELS = {
    "core": 0,
    "ops": 1,
    "ir": 2, "distributed": 2,
    "io": 3, "kernels": 3, "autodiff": 3,
    "runtime": 4,
    "train": 5,
    "api": 6,
}
MAX_LINES = 1500
MAX_LINES_EXCEPT = {"src/autodiff/rules.cpp"}
SESSION_LINES = ("src/api/training_session.cpp", 600)

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources():
    for dirpath, _, files in os.walk(SRC):
        for f in sorted(files):
            if f.endswith((".h", ".cpp")):
                path = os.path.join(dirpath, f)
                yield os.path.relpath(path, ROOT).replace(os.sep, "/"), open(path, encoding="utf-8").read()


def folder_of(rel):
    return rel.split("/")[1]  # src/<folder>/...


def includes(text):
    return INCLUDE.findall(text)


def folder_edges():
    """(from folder, to folder, file, include) for every include of another src folder."""
    folders = set(os.listdir(SRC))
    for rel, text in sources():
        here = folder_of(rel)
        for inc in includes(text):
            top = inc.split("/")[0]
            if "/" in inc and top in folders and top != here:
                yield here, top, rel, inc


def test_every_folder_has_a_level():
    folders = sorted(d for d in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, d)))
    missing = [d for d in folders if d not in LEVELS]
    assert not missing, f"src/{missing[0]} has no level in {__file__}: place it in LEVELS (and the docstring)"


def test_folders_include_only_lower_levels():
    bad = [f"{rel}: #include \"{inc}\" ({here}, level {LEVELS.get(here)}, includes {to}, level {LEVELS.get(to)})"
           for here, to, rel, inc in folder_edges()
           if here in LEVELS and to in LEVELS and LEVELS[to] >= LEVELS[here]]
    assert not bad, "a folder includes a folder of its own level or above:\n" + "\n".join(bad)


def test_no_cycle_between_folders():
    graph, witness = defaultdict(set), {}
    for here, to, rel, inc in folder_edges():
        graph[here].add(to)
        witness.setdefault((here, to), f"{rel}: #include \"{inc}\"")
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycle = path[path.index(nxt):] + [nxt]
                steps = [witness[(a, b)] for a, b in zip(cycle, cycle[1:])]
                raise AssertionError("folders include each other: " + " -> ".join(cycle) + "\n" + "\n".join(steps))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_public_headers_include_no_internal_folder():
    folders = set(os.listdir(SRC))
    bad = []
    for f in sorted(os.listdir(PUBLIC)):
        for inc in includes(open(os.path.join(PUBLIC, f), encoding="utf-8").read()):
            if inc.split("/")[0] in folders:
                bad.append(f"include/onnxtrain/{f}: #include \"{inc}\"")
    assert not bad, "\n".join(bad)


def test_folders_below_train_do_not_reach_the_session_header():
    def reaches_session(header, seen):
        if header == "onnxtrain/session.h":
            return True
        if header in seen or not header.startswith("onnxtrain/"):
            return False
        seen.add(header)
        path = os.path.join(PUBLIC, header.split("/", 1)[1])
        return os.path.exists(path) and any(reaches_session(i, seen) for i in includes(open(path).read()))

    bad = [f"{rel}: #include \"{inc}\""
           for rel, text in sources() if LEVELS.get(folder_of(rel), 99) < LEVELS["train"]
           for inc in includes(text) if reaches_session(inc, set())]
    assert not bad, ("below src/train, code takes public types from the small headers, not the session's:\n"
                     + "\n".join(bad))


def test_file_sizes():
    bad = []
    for rel, text in sources():
        n = text.count("\n")
        if n > MAX_LINES and rel not in MAX_LINES_EXCEPT:
            bad.append(f"{rel}: {n} lines (at most {MAX_LINES})")
        if rel == SESSION_LINES[0] and n > SESSION_LINES[1]:
            bad.append(f"{rel}: {n} lines (at most {SESSION_LINES[1]})")
    assert not bad, "\n".join(bad)


def test_the_operator_domain_is_written_once():
    """The com.onnxtrain domain string is written in one place (src/ops/onnxtrain_ops.h, ops::kDomain)
    across the library, the command line, the bindings and the Python package; everything else names
    the constant (prose in comments aside)."""
    literal = re.compile(r"""["']com\.onnxtrain["']""")
    found = []
    for top in ("src", "include", "tools", "python"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if f.endswith((".h", ".cpp", ".py")):
                    path = os.path.join(dirpath, f)
                    rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
                    for n, line in enumerate(open(path, encoding="utf-8"), 1):
                        code = line.split("//")[0] if f.endswith((".h", ".cpp")) else line.split("#")[0]
                        if literal.search(code):
                            found.append(f"{rel}:{n}: {line.strip()}")
    assert found and found[0].startswith("src/ops/onnxtrain_ops.h:"), found
    assert len(found) == 1, "the domain string is written again (use ops::kDomain):\n" + "\n".join(found[1:])
