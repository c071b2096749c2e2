"""What the tests of plot.py share: plot.py run in this process with its
charts' texts kept instead of rendered, and a section of summary.md."""
import os

import plot  # scripts/plot.py (scripts/ is on PYTHONPATH)
from dpstools import charts
from helpers import expect


def draw(folder, out, *extra):
    """(summary.md's text, {chart: [every text of its figure]}) of plot.py on
    a folder (extra: more of its arguments), in this process, the charts not
    rendered."""
    texts = {}

    def keep(plt, fig, _, name):
        texts[name] = [t.get_text() for t in fig.findobj(lambda o: hasattr(o, "get_text"))]
        plt.close(fig)
        return os.path.join(out, name)
    saved, charts.save = charts.save, keep
    try:
        rc = plot.main([folder, "--out", out, *extra])
    finally:
        charts.save = saved
    expect(rc == 0, f"plot.py {folder}: exit {rc}")
    with open(os.path.join(out, "summary.md")) as f:
        return f.read(), texts


def section(md, title):
    """summary.md's section `## title`, up to the next section or chart."""
    expect(f"## {title}\n" in md, f"summary.md has no section {title!r}:\n{md[:3000]}")
    return md.split(f"## {title}\n", 1)[1].split("\n## ")[0].split("\n![")[0]
