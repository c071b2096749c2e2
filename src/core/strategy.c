/* The strategies' table (see strategy.h). */
#include "core/strategy.h"

const dps_strategy dps_strategies[MODE_COUNT] = {
    [MODE_DP] = {MODE_DP, "dp", "torch.nn.DataParallel", 0, 0, 0, 0.0, 0.0, 0.0},
    [MODE_DDP] = {MODE_DDP, "ddp", "torch.nn.parallel.DistributedDataParallel", 1, 1, 0,
                  1.0, 0.0, 0.0},
    [MODE_ZERO1] = {MODE_ZERO1, "zero1", "DDP + ZeroRedundancyOptimizer (ZeRO stage 1)", 1, 1, 1,
                    1.0, 0.0, 1.0},
    [MODE_ZERO2] = {MODE_ZERO2, "zero2", "ZeRO stage 2 (DeepSpeed; FSDP's SHARD_GRAD_OP)", 1, 0, 2,
                    0.0, 1.0, 1.0},
    [MODE_FSDP] = {MODE_FSDP, "fsdp", "FSDP FULL_SHARD (ZeRO stage 3)", 1, 0, 3, 0.0, 1.0, 2.0},
};

const char *const dps_collective_names[3] = {"all-reduce", "reduce-scatter", "all-gather"};

int dps_strategies_compared(dps_mode out[MODE_COUNT])
{
    int n = 0;
    for (int m = 0; m < MODE_COUNT; m++)
        if (!dps_strategies[m].shard) out[n++] = (dps_mode)m;
    return n;
}

double dps_strategy_state_bytes(const dps_strategy *s, double params, double opt_bytes, int n)
{
    double p = 4.0 * params, g = 4.0 * params, o = opt_bytes * params;
    if (s->shard >= 1) o /= n;
    if (s->shard >= 2) g /= n;
    if (s->shard >= 3) p /= n;
    return p + g + o;
}
