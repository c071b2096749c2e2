#!/usr/bin/env python3
"""The regression gate's statistics (scripts/shift.py) on synthetic rounds
with a known shift and known noise: Student's t against its table, the
interval's coverage, the gate's power against a 5 % shift and its false
alarms on none, over many seeded draws. Usage: test_shift.py CASE [SEED]."""
import math
import random
import sys

from helpers import expect, run_case
import shift

THRESHOLD = 0.03


def draw_rounds(rng, rounds, true_shift, step_noise=0.03, pair_noise=0.01, drift=0.10, steps=30):
    """Base and head samples of interleaved rounds: a drift common to both
    sides of a round (cancels), a per-side offset that does not (pair_noise),
    lognormal per-step noise; head's steps are (1 + true_shift) longer."""
    base, head = [], []
    for _ in range(rounds):
        level = 10.0 * math.exp(rng.gauss(0.0, drift))
        sides = []
        for factor in (1.0, 1.0 + true_shift):
            m = level * factor * math.exp(rng.gauss(0.0, pair_noise))
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


def case_t(seed):
    """Student's t quantiles against the printed table (two-sided 95 %, 99 %)."""
    table = {(1, 0.975): 12.706, (2, 0.975): 4.303, (4, 0.975): 2.776, (9, 0.975): 2.262,
             (29, 0.975): 2.045, (4, 0.995): 4.604, (9, 0.995): 3.250}
    for (df, p), want in table.items():
        got = shift.t_quantile(p, df)
        expect(abs(got - want) < 1e-3, f"t({p}, {df}) = {got}, table {want}")
    expect(abs(shift.t_cdf(0.0, 7) - 0.5) < 1e-12, "t_cdf(0) is not 1/2")


def case_coverage(seed):
    """The 95 % interval holds the true shift in 92-98 % of 600 draws."""
    for true_shift in (0.0, 0.05):
        got = decisions(seed, 600, 5, true_shift)
        inside = sum(s.lo <= true_shift <= s.hi for s, _ in got) / len(got)
        expect(0.92 <= inside <= 0.98, f"shift {true_shift}: coverage {inside:.3f}")


def adaptive(rng, true_shift, first=3, most=20, **noise):
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
    """With rounds added until it decides (20 at most), a 5 % shift is
    REGRESSION in at least 95 % of 200 draws; 1 % step noise between a
    round's sides, 3 % within a side."""
    rng = random.Random(seed)
    got = [adaptive(rng, 0.05) for _ in range(200)]
    rate = sum(d == shift.REGRESSION for d, _ in got) / len(got)
    expect(rate >= 0.95, f"power against 5 %: {rate:.3f}")


def case_false_alarm(seed):
    """No shift: never REGRESSION, and WARN in at most 2 % of the draws,
    with a fixed number of rounds (however few) or added until decided."""
    for rounds in (2, 3, 6):
        got = [d for _, d in decisions(seed, 300, rounds, 0.0)]
        regress, warn = got.count(shift.REGRESSION), got.count(shift.WARN) / len(got)
        expect(regress == 0 and warn <= 0.02,
               f"{rounds} rounds, no shift: {regress} REGRESSION, WARN {warn:.3f}")
    rng = random.Random(seed)
    got = [adaptive(rng, 0.0)[0] for _ in range(200)]
    regress, warn = got.count(shift.REGRESSION), got.count(shift.WARN) / len(got)
    expect(regress == 0 and warn <= 0.02, f"adaptive, no shift: {regress} REGRESSION, WARN {warn}")


def case_rounds(seed):
    """rounds_needed is the fewest rounds whose interval, with the same spread
    around the same estimate, no longer reaches the threshold."""
    rng = random.Random(seed)
    for _ in range(200):
        sd, est = rng.uniform(0.002, 0.05), rng.uniform(-0.02, 0.06)
        s = shift.Shift(math.expm1(est), 0, 0, 3, sd, est)
        n = shift.rounds_needed(s, THRESHOLD)
        gap = abs(math.log1p(THRESHOLD) - est)
        if n <= 1000:
            expect(shift.half_width(sd, n, 0.95) < gap, f"{n} rounds too few: sd {sd}, est {est}")
        expect(n == 4 or shift.half_width(sd, n - 1, 0.95) >= gap,
               f"{n - 1} rounds would do: sd {sd}, est {est}")


def case_format(seed):
    s = shift.Shift(0.058, 0.041, 0.074, 6, 0.01, math.log1p(0.058))
    expect(shift.fmt_shift(s) == "+5.8 % [+4.1, +7.4]", shift.fmt_shift(s))
    one = shift.paired_shift([[10.0, 10.2]], [[10.5, 10.7]])
    expect(one.lo == -math.inf and shift.decide(one, THRESHOLD) == shift.WARN,
           f"one round: {one}")
    expect(shift.rounds_needed(one, THRESHOLD) == 2, "one round asks for a second")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}


def main():
    case = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    return run_case(f"{case} seed={seed}", CASES[case], seed)


if __name__ == "__main__":
    sys.exit(main())
