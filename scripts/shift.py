"""The shift between a base and a head measured in interleaved rounds, and
the regression gate's decision on it. Each round is a paired block: base and
head ran one after the other on the same machine, so the machine's drift
between rounds cancels in the round's ratio of medians. The shift is the
mean of the rounds' log-ratios with a Student-t interval; the within-round
Mann-Whitney U tests, combined over rounds (Stouffer), say whether the
samples differ at all. Standard library only."""
import functools
import math
from collections import namedtuple

LOWER, HIGHER = "lower", "higher"  # which direction of a metric is better

# estimate, lo, hi: the shift as a fraction (0.05 = 5 % worse), its interval;
# rounds; sd: the log-ratios' standard deviation (NaN below 2 rounds)
Shift = namedtuple("Shift", "estimate lo hi rounds sd log_mean")


def median(xs):
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])) if n else float("nan")


# ---- Student's t --------------------------------------------------------------

def _betacf(a, b, x):
    """The continued fraction of the incomplete beta function (Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for aa in (m * (b - m) * x / ((qam + 2 * m) * (a + 2 * m)),
                   -(a + m) * (qab + m) * x / ((a + 2 * m) * (qap + 2 * m))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + \
        b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    tail = 0.5 * betainc(0.5 * df, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=4096)
def t_quantile(p, df):
    """The t such that P(T <= t) = p, by bisection."""
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


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


def half_width(sd, rounds, confidence):
    if rounds < 2:
        return math.inf
    return t_quantile(0.5 + confidence / 2, rounds - 1) * sd / math.sqrt(rounds)


def paired_shift(base_rounds, head_rounds, direction=LOWER, confidence=0.95):
    """The shift with its confidence interval from paired rounds."""
    logs = log_ratios(base_rounds, head_rounds, direction)
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1)) if n > 1 else math.nan
    h = half_width(sd, n, confidence)
    return Shift(math.expm1(mean), math.expm1(mean - h) if h < math.inf else -math.inf,
                 math.expm1(mean + h), n, sd, mean)


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
    """Rounds after which an interval of the same spread around the same
    estimate would fall on one side of the threshold; most + 1 when even
    `most` would not (the estimate is at the threshold)."""
    if shift.rounds < 2:
        return 2
    if not shift.sd > 0:
        return shift.rounds + 1
    gap = abs(math.log1p(threshold) - shift.log_mean)
    for n in range(shift.rounds + 1, most + 1):
        if half_width(shift.sd, n, confidence) < gap:
            return n
    return most + 1


def fmt_shift(shift):
    """'+5.8 % [+4.1, +7.4]'."""
    lo = "-inf" if shift.lo == -math.inf else f"{100 * shift.lo:+.1f}"
    hi = "+inf" if shift.hi == math.inf else f"{100 * shift.hi:+.1f}"
    return f"{100 * shift.estimate:+.1f} % [{lo}, {hi}]"
