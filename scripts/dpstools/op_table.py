"""summary.md's "Where the step goes, per op": each configuration's op kinds
by time in its traced step (ops.csv), with their share of that step and
their rates, and beside them PyTorch's time for the same kind where a
torch_reference.py folder's torch_ops.csv has the configuration (its
profiled step, dpstools.torch_ops). Standard library only."""
from collections import defaultdict

from dpstools.results import number

TITLE = "Where the step goes, per op"
TOP = 5  # op kinds shown per configuration
# dpscale's MLP names its ops by the layer; PyTorch's rows by the model file's kinds
SAME_KIND = {"linear": "gemm", "gelu": "act"}


def rate(row, col):
    """A rate's cell as text, '–' where the kind has none."""
    return f"{float(row[col]):.3g}" if row[col] else "–"


def key(row):
    return SAME_KIND.get(row["kind"], row["kind"]), row["direction"]


class Theirs:
    """PyTorch's rows of one configuration, by (kind, direction); None: none."""

    def __init__(self, rows):
        self.ms = defaultdict(float)
        for r in rows or []:
            self.ms[key(r)] += number(r, "ms")
        self.step = number(rows[0], "step_ms") if rows else None
        self.used = set()

    def cell(self, keys):
        """PyTorch's ms of these (kind, direction)s, '–' without its rows."""
        if self.step is None:
            return []
        self.used |= set(keys)
        return [f"{sum(self.ms.get(k, 0.0) for k in keys):.3f}"]

    def alone(self, cid, step):
        """The row of PyTorch's kinds that dpscale's rows have not, if any."""
        names = sorted(k for k in self.ms if k not in self.used) if self.step is not None else []
        if not names:
            return []
        self.used |= set(names)
        return [f"| {cid} | {step:.3f} | PyTorch only: "
                f"{', '.join(f'{k} {d}' for k, d in names)} | – | – | – | – | – | "
                f"{sum(self.ms[k] for k in names):.3f} |"]

    def left(self):
        """PyTorch's step less its ops (the cell beside dpscale's "not in an op")."""
        if self.step is None:
            return []
        return [f"{max(self.step - sum(self.ms.values()), 0.0):.3f}"]

    def whole(self, cid, step):
        """The row of the two steps traced, with PyTorch's rows only."""
        if self.step is None:
            return []
        return [f"| {cid} | {step:.3f} | the traced step | – | {step:.3f} | 100 % | – | – | "
                f"{self.step:.3f} |"]


def config_rows(config_id, rows, theirs):
    """The table's rows of one configuration: its TOP kinds by ms, then the
    rest of its ops and what no op covered; PyTorch's ms last (theirs)."""
    step = number(rows[0], "step_ms")
    rows = sorted(rows, key=lambda r: -number(r, "ms"))
    out = []
    for r in rows[:TOP]:
        ms = number(r, "ms")
        share = f"{100 * ms / step:.1f} %" if step > 0 else "–"
        out.append(cells([config_id, f"{step:.3f}", f"{r['kind']} {r['direction']}",
                          r["calls"], f"{ms:.3f}", share, rate(r, "tflops"), rate(r, "gbps")]
                         + theirs.cell([key(r)])))
    if step <= 0:
        return out + theirs.alone(config_id, step) + theirs.whole(config_id, step)
    rest = sum(number(r, "ms") for r in rows[TOP:])
    if rows[TOP:]:
        out.append(cells([config_id, f"{step:.3f}", f"{len(rows) - TOP} more kinds",
                          str(sum(int(r["calls"]) for r in rows[TOP:])), f"{rest:.3f}",
                          f"{100 * rest / step:.1f} %", "–", "–"]
                         + theirs.cell([key(r) for r in rows[TOP:]])))
    out += theirs.alone(config_id, step)
    left = max(step - sum(number(r, "ms") for r in rows), 0.0)
    out.append(cells([config_id, f"{step:.3f}", "not in an op (copies, collectives, gaps)",
                      "–", f"{left:.3f}", f"{100 * left / step:.1f} %", "–", "–"]
                     + theirs.left()))
    return out + theirs.whole(config_id, step)


def cells(texts):
    return "| " + " | ".join(texts) + " |"


def ok_rows(folder, rows):
    """{config_id: rows} of the folder's ok configurations."""
    ok = {r["config_id"] for r in folder.runs}
    by = defaultdict(list)
    for r in rows or []:
        if r["config_id"] in ok:
            by[r["config_id"]].append(r)
    return by


def lines(folder, torch_folder=None):
    """The section's lines; [] when the folder has no ops.csv (folders
    before it, or PyTorch's without torch_ops.csv) or no row of an ok
    configuration. PyTorch's column: from torch_folder's torch_ops.csv,
    else the folder's own."""
    own_torch = getattr(folder, "torch_ops", None)
    if not folder.ops and own_torch:  # a torch_reference.py folder drawn alone
        return torch_alone(folder)
    by = ok_rows(folder, folder.ops)
    if not by:
        return []
    pt_rows = getattr(torch_folder, "torch_ops", None) if torch_folder else None
    pt = ok_rows(torch_folder, pt_rows) if pt_rows else ok_rows(folder, own_torch)
    table = []
    for config_id in sorted(by):
        table += config_rows(config_id, by[config_id], Theirs(pt.get(config_id)))
    head = "| configuration | step ms | op kind | calls | ms | share of step | TFLOP/s | GB/s |"
    rule = "| --- | --- | --- | --- | --- | --- | --- | --- |"
    text = ("The last timed step of each configuration, timed op by op "
            "(ops.csv: events around each op's kernels on device 0's stream for dp, rank 0's "
            "for the other strategies; the host backend's clock on emulated devices). "
            f"Its {TOP} op kinds that took longest, by direction, as a share of that step "
            "(step_ms, the slowest rank's); TFLOP/s counts the GEMMs' FLOP only, GB/s each "
            "operand read or written once. What no op covers is the step's copies, exposed "
            "collectives and the host's gaps.")
    if pt:
        head += " PyTorch ms |"
        rule += " --- |"
        text += (" PyTorch ms: the same kinds in one step of PyTorch's run of the configuration "
                 "under torch.profiler (torch_ops.csv: its ops' self time, the kernels' on GPUs, "
                 "the host's on the CPU, grouped as dpstools/torch_ops.py says; linear and gelu "
                 "as gemm and act; kinds dpscale's rows lack on a row of their own); the last "
                 "row: the two steps traced, PyTorch's its wall time under the profiler.")
    return [f"## {TITLE}", "", text, "", head, rule] + table + [""]


def torch_alone(folder):
    """The section of a torch_reference.py folder: its torch_ops.csv as the table."""
    by = ok_rows(folder, folder.torch_ops)
    if not by:
        return []
    table = []
    for config_id in sorted(by):
        table += config_rows(config_id, by[config_id], Theirs(None))
    return [f"## {TITLE}", "", "One step of each configuration after its timed steps, under "
            "torch.profiler (torch_ops.csv: its ops' self time, the kernels' on GPUs, the "
            f"host's on the CPU, grouped by dpscale's op kinds). Its {TOP} op kinds that took "
            "longest, by direction, as a share of that step; TFLOP/s counts the GEMMs' FLOP "
            "only, GB/s their inputs' bytes.", "",
            "| configuration | step ms | op kind | calls | ms | share of step | TFLOP/s | GB/s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"] + table + [""]
