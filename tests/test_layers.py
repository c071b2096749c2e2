#!/usr/bin/env python3
"""The architecture, checked: src/ is grouped by layer and a file includes
only headers of its own layer or of layers below it, written with the
layer ("comm/comm.h"); and no two source files call each other (read from
the symbols of the harness's static library with nm).

usage: test_layers.py SRC_DIR LIBDPSCALE_CORE.a
"""
import collections
import os
import re
import subprocess
import sys

# From the bottom (docs/DESIGN.md, "Layers"); comm and launch sit side by
# side and may not include each other.
LAYERS = ["core", "backend", "model", "config", "comm", "launch", "strategies", "run", "cli"]
SIDE_BY_SIDE = {("comm", "launch"), ("launch", "comm")}
# Headers that are not in a layer: generated ones and kernels/.
OUTSIDE = {"dps_config.h", "version.h", "kernels.h", "elementwise.h"}


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
            elif (LAYERS.index(other) > LAYERS.index(layer) or
                  (layer, other) in SIDE_BY_SIDE):
                problems.append(f"{path}:{no}: layer {layer} includes {target} from layer {other}")
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
    problems = include_problems(argv[1]) + mutual_calls(argv[2])
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
