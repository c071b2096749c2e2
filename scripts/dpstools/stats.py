"""The statistics of the tools, each written once: median, quantile, U test, paired shift.

median, quantile and noise (IQR / median) of one sample; the Mann-Whitney U
test of two; and the shift between a base and a head measured in
interleaved rounds, with the regression gate's decision on it. Each round is
a paired block: base and head ran one after the other on the same machine,
so the machine's drift between rounds cancels in the round's ratio of
medians. The shift is the Hodges-Lehmann estimate of the rounds' log-ratios
with the interval of Wilcoxon's signed-rank test (distribution-free: a
process that ran in a slow mode counts as one round, not by its size); the
within-round Mann-Whitney U tests, combined over rounds (Stouffer), say
whether the samples differ at all. Two independent samples (two
configurations' step times) get the two-sample Hodges-Lehmann estimate with
Mann-Whitney's interval. Standard library only."""
import functools
import math
from collections import namedtuple
from statistics import NormalDist

LOWER, HIGHER = "lower", "higher"  # which direction of a metric is better

# estimate, lo, hi: the shift as a fraction (0.05 = 5 % worse), its interval;
# rounds; half: the interval's half-width in log space (inf: too few rounds);
# log_center: the estimate's log
Shift = namedtuple("Shift", "estimate lo hi rounds half log_center")


# ---- one sample: the median, a quantile, the noise ----------------------------------

def median(xs):
    """The median (the mean of the two middle values of an even count); nan
    when xs is empty."""
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])) if n else float("nan")


def quantile(xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def noise(xs):
    """The interquartile range over the median; nan when there is none."""
    m = median(xs)
    return (quantile(xs, 0.75) - quantile(xs, 0.25)) / abs(m) if xs and m else float("nan")


# ---- two samples: the Mann-Whitney U test -------------------------------------------

def ranks(values):
    """Mid-ranks (1-based) of values, and the tie groups' sizes."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    ties = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0 + 1.0
        ties.append(j - i + 1)
        i = j + 1
    return r, ties


def mann_whitney(a, b, exact_limit=20):
    """Two-sided Mann-Whitney U test: (U of a, p). Exact distribution by
    enumeration (u_counts) when both samples are small and untied; otherwise
    the normal approximation with tie correction and continuity correction."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan")
    r, ties = ranks(list(a) + list(b))
    r1 = sum(r[:n1])
    u1 = r1 - n1 * (n1 + 1) / 2.0
    u = min(u1, n1 * n2 - u1)
    if n1 <= exact_limit and n2 <= exact_limit and all(t == 1 for t in ties):
        counts = u_counts(n1, n2)
        total = sum(counts)
        p = 2.0 * sum(counts[: int(u) + 1]) / total
        return u1, min(1.0, p)
    n = n1 + n2
    mu = n1 * n2 / 2.0
    tie_term = sum(t ** 3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if var <= 0:
        return u1, 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return u1, min(1.0, p)


# ---- the interval: Hodges-Lehmann and Wilcoxon's signed ranks ------------------

@functools.lru_cache(maxsize=256)
def signed_rank_counts(n):
    """How many of the 2**n sign patterns of ranks 1..n give each sum."""
    counts = [1]
    for r in range(1, n + 1):
        grown = counts + [0] * r
        for w, c in enumerate(counts):
            grown[w + r] += c
        counts = grown
    return tuple(counts)


def signed_rank_cut(n, confidence):
    """The largest c with P(T+ < c) <= (1 - confidence) / 2 for the
    signed-rank statistic of n rounds: the interval runs from the c-th
    smallest Walsh average to the c-th largest; 0 when n rounds are too few."""
    counts, total = signed_rank_counts(n), 2 ** n
    tail, below, c = (1.0 - confidence) / 2.0, 0, 0
    while c < len(counts) and (below + counts[c]) / total <= tail:
        below += counts[c]
        c += 1
    return c


def walsh_averages(xs):
    return sorted((xs[i] + xs[j]) / 2.0 for i in range(len(xs)) for j in range(i, len(xs)))


def log_interval(logs, confidence):
    """(center, lo, hi) of the log-ratios: the Hodges-Lehmann estimate (the
    median of the Walsh averages) and the distribution-free interval of
    Wilcoxon's signed-rank test; lo, hi infinite when the rounds are too few."""
    w = walsh_averages(logs)
    c = signed_rank_cut(len(logs), confidence)
    if c == 0:
        return median(w), -math.inf, math.inf
    return median(w), w[c - 1], w[len(w) - c]


# ---- two independent samples: Hodges-Lehmann and Mann-Whitney's interval ---------

EXACT_U = 30  # the exact U distribution up to samples of this size, the normal one beyond


@functools.lru_cache(maxsize=None)
def u_counts(m, n):
    """How many of the C(m + n, m) orders of two samples of m and n give each
    Mann-Whitney U (0 .. m n): f(m, n, u) = f(m - 1, n, u - n) + f(m, n - 1, u)."""
    if m == 0 or n == 0:
        return (1,)
    counts = [0] * (m * n + 1)
    for u, c in enumerate(u_counts(m, n - 1)):
        counts[u] += c
    for u, c in enumerate(u_counts(m - 1, n)):
        counts[u + n] += c
    return tuple(counts)


def u_cut(m, n, confidence):
    """The largest c with P(U < c) <= (1 - confidence) / 2 for samples of m
    and n: the interval runs from the c-th smallest of the m n pairwise
    differences to the c-th largest; 0 when the samples are too few."""
    tail = (1.0 - confidence) / 2.0
    if m > EXACT_U or n > EXACT_U:
        z = NormalDist().inv_cdf(1.0 - tail)
        return max(0, math.floor(m * n / 2.0 - z * math.sqrt(m * n * (m + n + 1) / 12.0)))
    counts, total = u_counts(m, n), math.comb(m + n, m)
    below, c = 0, 0
    while c < len(counts) and (below + counts[c]) / total <= tail:
        below += counts[c]
        c += 1
    return c


def two_sample_log_interval(a, b, confidence=0.95):
    """(center, lo, hi) of log(a / b) for two independent samples of positive
    values: the Hodges-Lehmann estimate (the median of every log a_i - log b_j)
    and Mann-Whitney's distribution-free interval; lo, hi infinite when the
    samples are too few (or one is empty: the center is then nan)."""
    d = sorted(math.log(x) - math.log(y) for x in a for y in b)
    c = u_cut(len(a), len(b), confidence) if d else 0
    if c == 0:
        return median(d), -math.inf, math.inf
    return median(d), d[c - 1], d[len(d) - c]


# ---- the shift ------------------------------------------------------------------

def log_ratios(base_rounds, head_rounds, direction=LOWER):
    """Per round, log(head's median / base's median), positive when head is
    worse (slower for LOWER, lower for HIGHER)."""
    out = []
    for b, h in zip(base_rounds, head_rounds):
        mb, mh = median(b), median(h)
        if not (mb > 0 and mh > 0):
            raise ValueError("a round's median is not positive")
        out.append(math.log(mh / mb) * (1 if direction == LOWER else -1))
    return out


def paired_shift(base_rounds, head_rounds, direction=LOWER, confidence=0.95):
    """The shift with its confidence interval from paired rounds. Both are
    robust: a round that ran in a slow mode of the machine (another process,
    a shared core) moves them as one round of many, not by its size."""
    logs = log_ratios(base_rounds, head_rounds, direction)
    center, lo, hi = log_interval(logs, confidence)
    return Shift(math.expm1(center), math.expm1(lo) if lo > -math.inf else -math.inf,
                 math.expm1(hi) if hi < math.inf else math.inf, len(logs), (hi - lo) / 2.0,
                 center)


# ---- the within-round U tests -----------------------------------------------------

def _rank_sum_z(a, b):
    """The Mann-Whitney U statistic of b against a as a z-score (normal
    approximation, ties corrected); positive when b tends to be larger."""
    values = [(x, 0) for x in a] + [(x, 1) for x in b]
    values.sort(key=lambda v: v[0])
    n1, n2, n = len(a), len(b), len(a) + len(b)
    rank_b, ties, i = 0.0, 0.0, 0
    while i < n:
        j = i
        while j + 1 < n and values[j + 1][0] == values[i][0]:
            j += 1
        mid = (i + j) / 2.0 + 1.0
        rank_b += mid * sum(1 for k in range(i, j + 1) if values[k][1])
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    u = rank_b - n2 * (n2 + 1) / 2.0
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1)))
    return (u - n1 * n2 / 2.0) / math.sqrt(var) if var > 0 else 0.0


def rounds_u_test(base_rounds, head_rounds):
    """Two-sided p of the within-round U tests combined over rounds (Stouffer)."""
    zs = [_rank_sum_z(b, h) for b, h in zip(base_rounds, head_rounds) if b and h]
    if not zs:
        return 1.0
    z = sum(zs) / math.sqrt(len(zs))
    return math.erfc(abs(z) / math.sqrt(2.0))


# ---- the decision ----------------------------------------------------------------------

REGRESSION, WARN, IMPROVED, SAME, NOISY = "REGRESSION", "WARN", "IMPROVED", "SAME", "NOISY"
DECIDED = (REGRESSION, IMPROVED, SAME)


def decide(shift, threshold, p=0.0, alpha=0.01):
    """REGRESSION when the whole interval is above the threshold (and the
    samples differ, p < alpha); WARN when only the estimate is; IMPROVED when
    the whole interval is below -threshold; SAME when it is below the
    threshold; NOISY when it is too wide to say."""
    if shift.lo > threshold and p < alpha:
        return REGRESSION
    if shift.estimate > threshold:
        return WARN
    if shift.hi < -threshold and p < alpha:
        return IMPROVED
    if shift.hi < threshold:
        return SAME
    return NOISY


def rounds_needed(shift, threshold, confidence=0.95, most=1000):
    """Rounds after which an interval around the same estimate, narrowing
    as 1/sqrt(rounds), would fall on one side of the threshold; the fewest
    that give an interval at all when there is none yet; most + 1 when even
    `most` would not (the estimate is at the threshold)."""
    if shift.half == math.inf:
        n = shift.rounds + 1
        while signed_rank_cut(n, confidence) == 0:
            n += 1
        return n
    gap = abs(math.log1p(threshold) - shift.log_center)
    if shift.half < gap:
        return shift.rounds
    if gap == 0:
        return most + 1
    need = math.ceil(shift.rounds * (shift.half / gap) ** 2)
    return max(shift.rounds + 1, need) if need <= most else most + 1


def fmt_shift(shift):
    """'+5.8 % [+4.1, +7.4]'."""
    lo = "-inf" if shift.lo == -math.inf else f"{100 * shift.lo:+.1f}"
    hi = "+inf" if shift.hi == math.inf else f"{100 * shift.hi:+.1f}"
    return f"{100 * shift.estimate:+.1f} % [{lo}, {hi}]"
