"""The GPU check's figure lines, NAME<TAB>VALUE<TAB>GOAL<TAB>RESULT, and their error.

Shared by the device_check_*.py scripts that scripts/device-check.sh runs,
whose lines device-check-lib.sh's dc_figures_from records: a figure that
cannot be computed is a FAIL line naming what is missing (Missing), never
a crash. Standard library only.
"""


class Missing(Exception):
    """A results file that is absent or lacks what the figure needs."""


def figure_line(name, value, goal, result):
    """One figure's line: its four fields joined by tabs, a tab or a newline
    inside a field turned into a space (dc_figures_from reads one line a figure)."""
    return "\t".join(str(x).replace("\t", " ").replace("\n", " ")
                     for x in (name, value, goal, result))
