#!/usr/bin/env python3
"""Writes a model file (docs/model-file.md) from a PyTorch module, for
`dpscale --model FILE` and `dpscale predict` (a workload's `model = FILE`).

MODULE names a callable that returns the nn.Module, as MODULE.FUNCTION
(torchvision.models.resnet50) or MODULE:FUNCTION (mypkg.models:build);
MODULE is imported as `python -m` imports, from the current directory
first (a mymodel.py here: mymodel:build), then PYTHONPATH and the
installed packages. --input is one sample's shape (3x224x224; with
--tokens, the count of token ids, 1024). The module runs on the CPU, a
batch of two, in training mode. Exit 0, or 2 with a line naming what could
not be mapped: a module's qualified name and class, and what to do.
"""
import argparse
import sys

from dpstools import interpreter

if __name__ == "__main__":  # before PyTorch is imported: Debian's Python has it
    if interpreter.reexec(["torch"], __file__, sys.argv[1:]):
        sys.exit(f"model_export.py: {interpreter.here()} has no PyTorch: "
                 f"{interpreter.install_hint(['torch'], __file__)}")

from dpstools import model_export  # noqa: E402 (PyTorch: after the interpreter is settled)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("module", help="MODULE.FUNCTION or MODULE:FUNCTION returning the nn.Module; "
                    "MODULE is imported from the current directory first, as by python -m")
    ap.add_argument("--input", required=True, metavar="SHAPE",
                    help="one sample's input shape, e.g. 3x224x224, or token count with --tokens")
    ap.add_argument("--tokens", action="store_true", help="the input is token ids (an embedding reads it)")
    ap.add_argument("--name", help="the model's name in dpscale's outputs (default: FUNCTION)")
    ap.add_argument("--out", default="-", help="the model file (default: standard output)")
    a = ap.parse_args(argv)
    try:
        shape = tuple(int(x) for x in a.input.split("x"))
        if not shape or min(shape) < 1:
            raise ValueError
    except ValueError:
        ap.error(f"--input {a.input}: expected positive sizes joined by x, e.g. 3x224x224")
    name = a.name or a.module.replace(":", ".").rsplit(".", 1)[-1]
    try:
        model = model_export.load(a.module)
        lines = model_export.model_file(name, a.module, model, shape, a.tokens)
    except model_export.ExportError as e:
        print(f"model_export.py: {e}", file=sys.stderr)
        return 2
    text = "\n".join(lines) + "\n"
    if a.out == "-":
        sys.stdout.write(text)
    else:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"model_export.py: {name}: {len(lines)} lines in {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
