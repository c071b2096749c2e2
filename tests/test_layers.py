#!/usr/bin/env python3
"""The architecture, checked: src/ is grouped by layer and a file includes
only headers of its own layer or of the layers below it that its layer may
use (the table MAY_INCLUDE), written with the layer ("comm/comm.h"); and no
two source files call each other (read from the symbols of the harness's
static library with nm); and each unit test file, tests/unit/test_<layer>.c,
is named for a layer.

usage: test_layers.py SRC_DIR LIBDPSCALE_CORE.a
"""
import collections
import os
import re
import subprocess
import sys

# From the bottom (docs/DESIGN.md, "Layers"): each layer and the layers below
# it whose headers it may include (its own always). comm and launch sit side
# by side and may not include each other; the collectives know nothing of a
# configuration or its trace (a strategy hands them its own span record); the predictor reads files and does
# arithmetic, so it includes neither the backend, the collectives, the
# launcher nor a strategy; the results writers include no collective,
# launcher or strategy (the joined hosts come to them as config's plain
# world_nodes); run drives a strategy and the results writers, not the
# collectives, the launcher or the micro-benchmarks.
MAY_INCLUDE = {
    "core": set(),
    "backend": {"core"},
    "model": {"core", "backend"},
    "config": {"core", "backend", "model"},
    "predict": {"core", "model", "config"},
    "comm": {"core", "backend"},
    "launch": {"core", "backend", "model", "config"},
    "strategies": {"core", "backend", "model", "config", "comm", "launch"},
    "results": {"core", "backend", "config"},
    "microbench": {"core", "backend", "model", "config", "comm", "launch", "strategies", "results"},
    "run": {"core", "backend", "config", "strategies", "results"},
    "cli": {"core", "backend", "model", "config", "predict", "comm", "launch", "strategies",
            "results", "microbench", "run"},
}
LAYERS = list(MAY_INCLUDE)
# Headers that are not in a layer: generated ones and kernels/.
OUTSIDE = {"build_config.h", "version.h", "kernels.h", "loss.h", "elementwise.h", "windowed.h",
           "windowed_k.h", "grad_sums.h", "attention.h"}


def may_include(layer):
    """The layers whose headers a file of layer may include, from the bottom."""
    return [x for x in LAYERS if x == layer or x in MAY_INCLUDE[layer]]


def table_problems():
    """The table itself: a layer may include only layers listed below it, so
    that no two layers include each other."""
    problems = []
    for i, layer in enumerate(LAYERS):
        for other in sorted(MAY_INCLUDE[layer]):
            if other not in LAYERS[:i]:
                problems.append(f"MAY_INCLUDE: layer {layer} may include {other}, not a layer below it")
    return problems


def include_problems(src):
    problems = []
    for layer in os.listdir(src):
        folder = os.path.join(src, layer)
        if not os.path.isdir(folder):
            continue
        if layer not in LAYERS:
            problems.append(f"{folder}: not a layer of {LAYERS}")
            continue
        for name in sorted(os.listdir(folder)):
            if name.endswith((".c", ".h")):
                problems += file_problems(os.path.join(folder, name), layer)
    return problems


def file_problems(path, layer):
    problems = []
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m or m.group(1) in OUTSIDE:
                continue
            target = m.group(1)
            if "/" not in target:
                problems.append(f"{path}:{no}: include \"{target}\" without its layer")
                continue
            other = target.split("/")[0]
            if other not in LAYERS:
                problems.append(f"{path}:{no}: \"{target}\" is in no layer")
            elif other != layer and other not in MAY_INCLUDE[layer]:
                problems.append(f"{path}:{no}: layer {layer} includes {target} from layer {other}"
                                f" (it may include {', '.join(may_include(layer))})")
    return problems


def unit_test_problems(src):
    """tests/unit/test_<layer>.c: every unit test file named for a layer, and
    the layer named in tests/unit/meson.build, which builds it."""
    folder = os.path.join(os.path.dirname(os.path.abspath(src)), "tests", "unit")
    if not os.path.isdir(folder):
        return []
    with open(os.path.join(folder, "meson.build"), encoding="utf-8") as f:
        build = f.read()
    problems = []
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("test_") and name.endswith(".c")):
            continue
        layer = name[len("test_"):-len(".c")]
        if layer not in LAYERS:
            problems.append(f"{folder}/{name}: not test_<layer>.c for a layer of {LAYERS}")
        elif f"'{layer}'" not in build:
            problems.append(f"{folder}/{name}: layer '{layer}' not in {folder}/meson.build")
    return problems


def calls(library):
    """{object: set of objects whose symbols it uses}, from nm on the archive."""
    out = subprocess.run(["nm", "-A", library], capture_output=True, text=True, check=True).stdout
    defined, used = {}, collections.defaultdict(set)
    for line in out.splitlines():
        where, _, rest = line.rpartition(":")
        obj = os.path.basename(where.split(":")[-1]).replace(".c.o", ".c")
        parts = rest.split()
        if len(parts) == 3 and parts[1] in "TDRB":
            defined[parts[2]] = obj
        elif len(parts) == 2 and parts[0] == "U":
            used[obj].add(parts[1])
    graph = collections.defaultdict(set)
    for obj, symbols in used.items():
        for s in symbols:
            if s in defined and defined[s] != obj:
                graph[obj].add(defined[s])
    return graph


def mutual_calls(library):
    graph = calls(library)
    pairs = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph.get(b, ())})
    return [f"{a} and {b} call each other" for a, b in pairs]


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    problems = (table_problems() + include_problems(argv[1]) + unit_test_problems(argv[1]) +
                mutual_calls(argv[2]))
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
