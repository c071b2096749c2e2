/* Unit tests of cli/: the command line, its errors in one line each. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

#include "expect.h"

static void expect_usage(const char *line, const char *needle)
{
    static cli_args a;
    dps_status rc = parse(line, &a);
    if (rc != DPS_ERR_USAGE || !strstr(dps_errmsg(), needle)) {
        fprintf(stderr, "'%s': rc %d, message '%s', expected '%s'\n", line, rc, dps_errmsg(), needle);
        failures++;
    }
    EXPECT(strchr(dps_errmsg(), '\n') == NULL); /* one line */
}

static void test_cli(void)
{
    static cli_args a;
    EXPECT(parse("run --gpus 3 --batch 10 --model tiny --optimizer adamw", &a) == DPS_OK);
    EXPECT(a.cmd == CMD_RUN && a.cfg.ngpus == 3 && a.cfg.global_batch == 10);
    EXPECT(a.cfg.optimizer == OPT_ADAMW && fabsf(a.cfg.hp.lr - 1e-3f) < 1e-9f);
    EXPECT(parse("run --optimizer adamw --lr 0.5", &a) == DPS_OK && a.cfg.hp.lr == 0.5f);
    EXPECT(parse("run --device-mem 1536K", &a) == DPS_OK && a.cfg.be.device_mem == 1536u * 1024);
    EXPECT(parse("sweep --gpus 1,2,4", &a) == DPS_OK && a.sweep_ngpus_n == 3);
    EXPECT(parse("--help", &a) == DPS_OK && a.cmd == CMD_HELP);
    expect_usage("run --bogus", "unknown option '--bogus'");
    expect_usage("run --gpus", "needs a value");
    expect_usage("run --gpus abc", "--gpus abc: expected an integer from 1 to 64");
    expect_usage("run --gpus 0", "--gpus 0:");
    expect_usage("run --gpus -1", "--gpus -1:");
    expect_usage("run --gpus 99999999999999999999", "out of range");
    expect_usage("run --gpus 1,2", "--gpus 1,2: one value for `dpscale run` (lists are for sweep "
                 "and comm-bench)");
    EXPECT(parse("predict --machine m.machine --workload w --gpus 1,8,256 --modes ddp --name p", &a) == DPS_OK);
    EXPECT(a.cmd == CMD_PREDICT && strcmp(a.machine_path, "m.machine") == 0 && a.name_set);
    EXPECT(strcmp(a.workload_path, "w") == 0 && a.sweep_ngpus_n == 3 && a.sweep_ngpus[2] == 256);
    EXPECT(a.sweep_modes_n == 1 && a.sweep_modes[0] == MODE_DDP && !a.out_set);
    expect_usage("run --gpus 256", "--gpus 256: expected an integer from 1 to 64");
    expect_usage("info --gpus 2", "--gpus: not an option of `dpscale info` (only of run, sweep, "
                 "comm-bench, links and predict)");
    EXPECT(parse("predict --from r --gpu 2", &a) == DPS_OK && a.sweep_ngpus[0] == 2); /* getopt's prefix */
    expect_usage("predict --gpus 0", "--gpus 0: expected an integer from 1 to 1048576");
    EXPECT(parse("predict --from r --calibration c.txt --gpus 8", &a) == DPS_OK);
    EXPECT(strcmp(a.from_dir, "r") == 0 && strcmp(a.calibration_path, "c.txt") == 0);
    expect_usage("run --machine m", "--machine: not an option of `dpscale run` (only of predict)");
    expect_usage("predict --seed 3", "--seed: not an option of `dpscale predict`");
    EXPECT(parse("predict --measure --model tiny --gpus 2,4 --steps 3 --precision bf16", &a) == DPS_OK);
    EXPECT(a.measure && a.sweep_models_n == 1 && strcmp(a.sweep_models[0], "tiny") == 0 &&
           a.steps_set && a.cfg.steps == 3 && a.given[SET_PRECISION] && a.sweep_ngpus_n == 2);
    expect_usage("predict --measure --model tiny,small --gpus 2", "--model tiny,small: one value for "
                 "`dpscale predict` (lists are for sweep)");
    expect_usage("run --model tiny,small", "--model tiny,small: one value for `dpscale run` "
                 "(lists are for sweep)");
    expect_usage("links --sizes 1M,2M", "--sizes 1M,2M: one value for `dpscale links`");
    /* an option another subcommand takes: refused, naming the ones that take it */
    expect_usage("links --dry-run", "--dry-run: not an option of `dpscale links` (only of run and sweep)");
    expect_usage("info --inject-fault 1:1:exit", "--inject-fault: not an option of `dpscale info`");
    expect_usage("sweep --save-params p.npy", "--save-params: not an option of `dpscale sweep` "
                 "(only of run)");
    expect_usage("run --resume", "--resume: not an option of `dpscale run` (only of sweep)");
    expect_usage("comm-bench --backend host", "--backend: not an option of `dpscale comm-bench` "
                 "(only of run, sweep, info and links)");
    expect_usage("info --out x", "--out: not an option of `dpscale info`");
    EXPECT(parse("links --backend host --gpus 2 --sizes 1M --steps 3 --device-mem 4M "
                 "--host-devices 2 --out x --name y", &a) == DPS_OK && a.cmd == CMD_LINKS);
    EXPECT(parse("comm-bench --gpus 2,3 --sizes 4,1M --steps 2 --warmup 1 --timeout 5 --out x", &a) == DPS_OK);
    EXPECT(parse("info --backend host --host-devices 2 --device-mem 1M --help", &a) == DPS_OK &&
           a.cmd == CMD_HELP);
    expect_usage("run --steps 0", "--steps 0:");
    expect_usage("run --batch 2.5", "--batch 2.5:");
    expect_usage("run --model nope", "--model nope: unknown preset");
    expect_usage("run --precision fp8", "--precision fp8: expected one of: fp32, bf16");
    expect_usage("run --mode zero4", "--mode zero4: expected one of: dp, ddp, zero1, zero2, fsdp");
    expect_usage("run --inject-fault 1:3", "--inject-fault 1:3: expected RANK:STEP:exit");
    expect_usage("run --inject-fault 1:3:crash", "--inject-fault 1:3:crash:");
    expect_usage("run --inject-fault x:3:exit", "--inject-fault x:3:exit:");
    expect_usage("run --bucket-mb 0", "--bucket-mb 0: expected a number above 0");
    expect_usage("run --timeout -5", "--timeout -5:");
    expect_usage("run --profile-steps 5", "--profile-steps 5: expected FIRST:LAST");
    expect_usage("run --profile-steps 9:5", "--profile-steps 9:5: the last step comes before");
    expect_usage("run --profile-steps a:5", "--profile-steps a:5: expected FIRST:LAST");
    expect_usage("run --profile-steps -1:5", "--profile-steps -1:5:");
    EXPECT(parse("run --profile-steps 4:7", &a) == DPS_OK && a.cfg.profile_first == 4 &&
           a.cfg.profile_last == 7);
    EXPECT(parse("run --mode ddp --inject-fault 2:7:hang --bucket-mb 0.5 --no-overlap", &a) == DPS_OK);
    EXPECT(a.cfg.mode == MODE_DDP && a.cfg.fault_rank == 2 && a.cfg.fault_step == 7 &&
           a.cfg.fault_kind == FAULT_HANG && a.cfg.bucket_mb == 0.5 && !a.cfg.overlap);
    EXPECT(parse("run --inject-slowdown 30", &a) == DPS_OK && a.cfg.inject_slowdown_pct == 30.0 &&
           a.cfg.slowdown_rank == -1);
    EXPECT(parse("run --inject-slowdown 50@3", &a) == DPS_OK && a.cfg.inject_slowdown_pct == 50.0 &&
           a.cfg.slowdown_rank == 3);
    expect_usage("run --inject-slowdown 50@", "--inject-slowdown 50@: expected PCT");
    expect_usage("run --inject-slowdown @1", "--inject-slowdown @1: expected PCT");
    expect_usage("run --inject-slowdown 0@1", "--inject-slowdown 0@1: expected PCT");
    expect_usage("run --backend gpu", "--backend gpu:");
    expect_usage("run --device-mem 12Q", "--device-mem 12Q:");
    expect_usage("run --device-mem 99999999999T", "--device-mem 99999999999T: too large");
    expect_usage("run --devices 0,,1", "--devices 0,,1:");
    expect_usage("run --lr -1", "--lr -1:");
    expect_usage("run --name a/b", "--name a/b:");
    expect_usage("jump", "unknown command 'jump'");
    expect_usage("", "no command");
    expect_usage("run extra", "unexpected argument 'extra'");
    expect_usage("run --gpus 2 --devices 0,1,2", "disagree");
    /* a value twice in a list: the same configuration twice */
    expect_usage("sweep --gpus 1,1", "--gpus 1,1: listed twice: '1'");
    expect_usage("sweep --model tiny,tiny", "--model tiny,tiny: listed twice: 'tiny'");
    EXPECT(parse("run --devices 0,0", &a) == DPS_OK && a.cfg.ngpus == 2); /* replicas on one GPU */
    expect_usage("comm-bench --sizes 1M,1048576", "--sizes 1M,1048576: listed twice: '1048576'");
    /* an empty entry, in every list, refused in the same words */
    expect_usage("run --model ,tiny", "--model ,tiny: empty entry in the list");
    expect_usage("sweep --model tiny,", "--model tiny,: empty entry in the list");
    expect_usage("sweep --gpus ,1", "--gpus ,1: empty entry in the list");
    expect_usage("comm-bench --sizes 1M,,4M", "--sizes 1M,,4M: empty entry in the list");
}

EXPECT_GROUPS(GROUP(cli));
