#!/usr/bin/env python3
"""The regression gate's statistics (scripts/dpstools/stats.py) on synthetic rounds
with a known shift and known noise: the signed-rank interval against its
table, the
interval's coverage, the gate's power against a 5 % shift and its false
alarms on none, over many seeded draws. Usage: test_shift.py CASE [SEED]."""
from listing import NOSAN, exit_if_listing, test

TESTS = [test("shift " + c, c, suite=NOSAN, timeout=300)
         for c in ("signed_rank", "coverage", "power", "false_alarm", "rounds", "format",
                   "two_sample")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import math
import random
import sys

from helpers import expect, run_case
from dpstools import stats as shift

THRESHOLD = 0.03


def draw_rounds(rng, rounds, true_shift, step_noise=0.03, pair_noise=0.01, drift=0.10,
                steps=30, slow_mode=0.1):
    """Base and head samples of interleaved rounds: a drift common to both
    sides of a round (cancels), a per-side offset that does not (pair_noise),
    a process that runs in a slow mode (+20 %) with probability slow_mode,
    lognormal per-step noise; head's steps are (1 + true_shift) longer."""
    base, head = [], []
    for _ in range(rounds):
        level = 10.0 * math.exp(rng.gauss(0.0, drift))
        sides = []
        for factor in (1.0, 1.0 + true_shift):
            mode = 1.2 if rng.random() < slow_mode else 1.0
            m = level * factor * mode * math.exp(rng.gauss(0.0, pair_noise))
            sides.append([m * math.exp(rng.gauss(0.0, step_noise)) for _ in range(steps)])
        base.append(sides[0])
        head.append(sides[1])
    return base, head


def decisions(seed, draws, rounds, true_shift, **noise):
    rng = random.Random(seed)
    out = []
    for _ in range(draws):
        base, head = draw_rounds(rng, rounds, true_shift, **noise)
        s = shift.paired_shift(base, head)
        out.append((s, shift.decide(s, THRESHOLD, shift.rounds_u_test(base, head))))
    return out


def case_signed_rank(seed):
    """The interval's cut against the printed table of Wilcoxon's critical
    values (two-sided 5 %: c = T + 1), and the Hodges-Lehmann estimate."""
    table = {6: 0, 8: 3, 10: 8, 15: 25, 20: 52, 30: 137}
    for n, t in table.items():
        got = shift.signed_rank_cut(n, 0.95)
        expect(got == t + 1, f"{n} rounds: cut {got}, table {t + 1}")
    expect(shift.signed_rank_cut(5, 0.95) == 0, "5 rounds give a 95 % interval")
    center, lo, hi = shift.log_interval([1.0, 2.0, 3.0, 4.0, 5.0, 60.0], 0.95)
    expect((center, lo, hi) == (3.5, 1.0, 60.0), f"six rounds: {center}, [{lo}, {hi}]")


def case_coverage(seed):
    """The 95 % interval holds the true shift in 93-99 % of 600 draws (it is
    exact for symmetric noise, and conservative: its level is at least 95 %)."""
    for true_shift in (0.0, 0.05):
        got = decisions(seed, 600, 8, true_shift)
        inside = sum(s.lo <= true_shift <= s.hi for s, _ in got) / len(got)
        expect(0.93 <= inside <= 0.99, f"shift {true_shift}: coverage {inside:.3f}")


def adaptive(rng, true_shift, first=6, most=40, **noise):
    """The gate's loop: rounds are added until the decision is made or
    `most` rounds ran; the last decision and the rounds it took."""
    base, head = draw_rounds(rng, first, true_shift, **noise)
    while True:
        s = shift.paired_shift(base, head)
        d = shift.decide(s, THRESHOLD, shift.rounds_u_test(base, head))
        if d in shift.DECIDED or len(base) >= most:
            return d, len(base)
        more = min(shift.rounds_needed(s, THRESHOLD), most) - len(base)
        b, h = draw_rounds(rng, max(more, 1), true_shift, **noise)
        base, head = base + b, head + h


def case_power(seed):
    """With rounds added until it decides (40 at most), a 5 % shift is
    REGRESSION in at least 90 % of 200 draws; 1 % noise between a round's
    sides, 3 % within a side, one process in ten in a slow mode (+20 %)."""
    rng = random.Random(seed)
    got = [adaptive(rng, 0.05) for _ in range(200)]
    rate = sum(d == shift.REGRESSION for d, _ in got) / len(got)
    expect(rate >= 0.90, f"power against 5 %: {rate:.3f}")


def case_false_alarm(seed):
    """No shift: never REGRESSION; WARN (undecided: the gate adds rounds)
    in at most 12 % of the draws after 6 rounds, 3 % after 12, and 2 % with
    rounds added until decided."""
    for rounds, most in ((6, 0.12), (12, 0.03), (20, 0.02)):
        got = [d for _, d in decisions(seed, 300, rounds, 0.0)]
        regress, warn = got.count(shift.REGRESSION), got.count(shift.WARN) / len(got)
        expect(regress == 0 and warn <= most,
               f"{rounds} rounds, no shift: {regress} REGRESSION, WARN {warn:.3f}")
    rng = random.Random(seed)
    got = [adaptive(rng, 0.0)[0] for _ in range(200)]
    regress, warn = got.count(shift.REGRESSION), got.count(shift.WARN) / len(got)
    expect(regress == 0 and warn <= 0.02, f"adaptive, no shift: {regress} REGRESSION, WARN {warn}")


def case_rounds(seed):
    """rounds_needed asks for the rounds after which an interval around the
    same estimate, narrowing as 1/sqrt(rounds), leaves the threshold; with
    no interval yet, for the fewest rounds that give one."""
    rng = random.Random(seed)
    gap_of = (lambda est: abs(math.log1p(THRESHOLD) - est))
    for _ in range(200):
        half, est, n = rng.uniform(0.002, 0.05), rng.uniform(-0.02, 0.06), rng.randint(6, 30)
        s = shift.Shift(math.expm1(est), 0, 0, n, half, est)
        need = shift.rounds_needed(s, THRESHOLD)
        if half < gap_of(est):
            expect(need == n, f"decided already, asks for {need}")
        elif need <= 1000:
            expect(half * math.sqrt(n / need) < gap_of(est) * 1.0001 and need > n,
                   f"{need} rounds too few: half {half}, est {est}, n {n}")
    none = shift.Shift(0.05, -math.inf, math.inf, 2, math.inf, math.log1p(0.05))
    expect(shift.rounds_needed(none, THRESHOLD) == 6, "no interval yet: not 6 rounds")


def case_format(seed):
    s = shift.Shift(0.058, 0.041, 0.074, 6, 0.01, math.log1p(0.058))
    expect(shift.fmt_shift(s) == "+5.8 % [+4.1, +7.4]", shift.fmt_shift(s))
    one = shift.paired_shift([[10.0, 10.2]], [[10.5, 10.7]])
    expect(one.lo == -math.inf and shift.decide(one, THRESHOLD) == shift.WARN,
           f"one round: {one}")
    expect(shift.rounds_needed(one, THRESHOLD) == 6, "one round does not ask for six")


def case_two_sample(seed):
    """Two independent samples' interval: its cut against the printed table
    of Mann-Whitney's critical values (two-sided 5 %: c = U + 1), and its
    coverage of a known ratio in 1000 draws of lognormal step times (93-97 %,
    three standard errors around 95 %), exact (12 and 9 steps) and by the
    normal approximation (40 and 35)."""
    table = {(4, 4): 0, (5, 5): 2, (8, 6): 8, (10, 10): 23, (20, 20): 127}
    for (m, n), u in table.items():
        got = shift.u_cut(m, n, 0.95)
        expect(got == u + 1, f"{m} and {n} steps: cut {got}, table {u + 1}")
    expect(shift.u_cut(3, 3, 0.95) == 0, "3 and 3 steps give a 95 % interval")
    rng = random.Random(seed)
    for m, n in ((12, 9), (40, 35)):
        held = 0
        for _ in range(1000):
            a = [10.0 * math.exp(rng.gauss(0.0, 0.05)) for _ in range(m)]
            b = [8.0 * math.exp(rng.gauss(0.0, 0.05)) for _ in range(n)]
            _, lo, hi = shift.two_sample_log_interval(a, b)
            held += lo <= math.log(10.0 / 8.0) <= hi
        expect(930 <= held <= 970, f"{m} and {n} steps: the interval held the ratio in {held} "
               f"of 1000 draws")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}


def main():
    case = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    return run_case(f"{case} seed={seed}", CASES[case], seed)


if __name__ == "__main__":
    sys.exit(main())
