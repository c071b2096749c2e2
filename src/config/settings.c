/* The settings table (see settings.h): every option and suite key once, with
 * its limits, words, default, subcommands and help; lookups and the options
 * part of --help. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "config/settings.h"
#include "core/util.h"

#define WORDS(w) .words = (w), .nwords = (int)(sizeof(w) / sizeof((w)[0]))
#define DEFAULT_INT(v) .has_default = 1, .def = {.i = (v)}
#define DEFAULT_NUMBER(v) .has_default = 1, .def = {.x = (v)}
#define DEFAULT_TEXT(t) .has_default = 1, .def_text = (t)
#define TRAIN (SETTINGS_RUN | SETTINGS_SWEEP)
#define EVERY (TRAIN | SETTINGS_INFO | SETTINGS_COMM_BENCH | SETTINGS_LINKS | SETTINGS_PREDICT)

const char *const settings_cmd_names[SETTINGS_NCMDS] = {"run", "sweep", "info", "comm-bench",
                                                         "links", "predict"};

static const char *const overlap_words[] = {"off", "on"};
static const char *const scaler_words[] = {"auto", "off", "on"};
/* comm-bench's collectives, in comm_op's order (comm.h's comm_op_names;
 * tests/unit/test_comm.c checks that they agree) and implementations. */
static const char *const bench_op_words[] = {"all-reduce", "reduce-scatter", "all-gather"};
static const char *const bench_comm_words[] = {"shm", "gloo"};

/* --help prints the entries with a flag in this order; suite-only keys have
 * none, and no subcommand takes them. */
const settings_entry settings_table[SET_COUNT] = {
    [SET_BACKEND] = {
        .cmds = TRAIN | SETTINGS_INFO | SETTINGS_LINKS,
        .flag = "backend", .type = SETTINGS_WORD, WORDS(be_kind_names), DEFAULT_INT(BE_AUTO),
        .help = "device backend; auto: cuda when a GPU is visible, else host"},
    [SET_MODE] = {
        .cmds = TRAIN, .list_cmds = SETTINGS_SWEEP,
        .flag = "mode", .key = "modes", .type = SETTINGS_WORD, WORDS(dps_mode_names),
        .cli_max = MODE_COUNT, .suite_max = MODE_COUNT, DEFAULT_INT(MODE_DP),
        .help = "dp = DataParallel, ddp = DistributedDataParallel, zero1 = DDP with "
                "ZeroRedundancyOptimizer, zero2 = gradients sharded too, fsdp = FSDP FULL_SHARD; "
                "sweep: a list, dp and ddp if not given"},
    [SET_GPUS] = {
        .cmds = TRAIN | SETTINGS_COMM_BENCH | SETTINGS_LINKS,
        .list_cmds = SETTINGS_SWEEP | SETTINGS_COMM_BENCH,
        .flag = "gpus", .key = "gpus", .type = SETTINGS_INT, .lo = 1, .hi = DPS_MAX_DEVICES,
        .cli_max = SETTINGS_MAX_LIST, .suite_max = SETTINGS_MAX_LIST, DEFAULT_INT(1),
        .metavar = "N",
        .help = "number of devices; sweep: a list, 1,2,4,... up to the devices if not given; "
                "comm-bench: rank counts, 2,4 if not given"},
    [SET_DEVICES] = {
        .cmds = TRAIN, .list_cmds = TRAIN,
        .flag = "devices", .type = SETTINGS_INT, .lo = 0, .hi = DPS_MAX_DEVICES - 1,
        .cli_max = DPS_MAX_DEVICES, .repeats = 1, .metavar = "LIST",
        .help = "device indices, e.g. 0,2,3; implies --gpus"},
    [SET_MODEL] = {
        .cmds = TRAIN | SETTINGS_PREDICT, .list_cmds = SETTINGS_SWEEP,
        .flag = "model", .key = "models", .type = SETTINGS_PRESET,
        .cli_max = SETTINGS_MAX_LIST, .suite_max = SETTINGS_MAX_LIST, DEFAULT_TEXT("small"),
        .metavar = "PRESET|FILE", .help = "model preset (see `dpscale info`) or a model file "
                "(docs/model-file.md); sweep: a list; predict --measure: the model measured"},
    [SET_LAYERS] = {
        .cmds = TRAIN | SETTINGS_PREDICT,
        .flag = "layers", .type = SETTINGS_INT, .lo = 0, .hi = 4096, .metavar = "N",
        .help = "override: hidden layers"},
    [SET_WIDTH] = {
        .cmds = TRAIN | SETTINGS_PREDICT,
        .flag = "width", .type = SETTINGS_INT, .lo = 1, .hi = 65536, .metavar = "N",
        .help = "override: hidden width"},
    [SET_TOKENS] = {
        .cmds = TRAIN | SETTINGS_PREDICT,
        .flag = "tokens", .type = SETTINGS_INT, .lo = 1, .hi = 1 << 20, .metavar = "N",
        .help = "override: tokens (rows) per sample"},
    [SET_CLASSES] = {
        .cmds = TRAIN | SETTINGS_PREDICT,
        .flag = "classes", .type = SETTINGS_INT, .lo = 2, .hi = 1 << 20, .metavar = "N",
        .help = "override: classifier outputs"},
    [SET_BATCH] = { /* the suite's global_batch: `batch` there is SET_SCALING */
        .cmds = TRAIN,
        .flag = "batch", .key = "global_batch", .type = SETTINGS_INT, .lo = 1, .hi = 1 << 24,
        .metavar = "N",
        .help = "global batch in samples; default: the preset's per-device batch x gpus"},
    [SET_BATCH_PER_GPU] = {
        .cmds = TRAIN | SETTINGS_PREDICT,
        .flag = "batch-per-gpu", .key = "batch_per_gpu", .type = SETTINGS_INT,
        .lo = 1, .hi = 1 << 24, .metavar = "N",
        .help = "samples per device; global batch = N x gpus"},
    [SET_SCALING] = {
        .key = "batch", .type = SETTINGS_WORD, WORDS(dps_scaling_names), .suite_max = 2,
        DEFAULT_INT(0),
        .help = "sweep: weak (per-device batch fixed) or strong scaling (global batch fixed)"},
    [SET_ACCUM] = {
        .cmds = TRAIN | SETTINGS_PREDICT,
        .flag = "accum", .key = "accum", .type = SETTINGS_INT, .lo = 1, .hi = 4096,
        .suite_max = SETTINGS_MAX_LIST, DEFAULT_INT(1), .metavar = "N",
        .help = "gradient accumulation: N micro-batches of batch/N per optimizer step (the "
                "batch a multiple of devices x N); suite files: a list; predict: every workload's"},
    [SET_NO_SYNC] = {
        .cmds = TRAIN | SETTINGS_PREDICT,
        .flag = "no-sync", .key = "no_sync", .type = SETTINGS_WORD, WORDS(overlap_words),
        .suite_max = 2, DEFAULT_INT(1),
        .help = "ddp with --accum: micro-steps but the last under no_sync (on), or every "
                "micro-step all-reduced, the loop without no_sync (off); suite files: a list"},
    [SET_PRECISION] = {
        .cmds = TRAIN | SETTINGS_PREDICT,
        .flag = "precision", .key = "precisions", .type = SETTINGS_WORD,
        WORDS(dps_precision_names), .suite_max = PREC_COUNT, DEFAULT_INT(PREC_FP32),
        .help = "compute precision: fp32, or autocast's bf16 or fp16 (fp16 with a GradScaler), "
                "on either backend, MLP presets and model files (each op as autocast runs it)"},
    [SET_SCALER] = {
        .cmds = TRAIN,
        .flag = "scaler", .type = SETTINGS_WORD, WORDS(scaler_words), DEFAULT_INT(0),
        .help = "GradScaler (dynamic loss scaling): auto is on for fp16 alone; fp16 cannot "
                "train without it"},
    [SET_INIT_SCALE] = {
        .cmds = TRAIN,
        .flag = "init-scale", .type = SETTINGS_NUMBER, .lo = 0, .hi = (int64_t)1 << 62,
        DEFAULT_NUMBER(65536.0), .metavar = "X", .help = "GradScaler: the first loss scale"},
    [SET_GROWTH_INTERVAL] = {
        .cmds = TRAIN,
        .flag = "growth-interval", .type = SETTINGS_INT, .lo = 1, .hi = 1000000000,
        DEFAULT_INT(2000), .metavar = "N",
        .help = "GradScaler: the scale doubles after N steps without inf or NaN"},
    [SET_TF32] = {
        .cmds = TRAIN,
        .flag = "tf32", .type = SETTINGS_WORD, WORDS(dps_tf32_names), DEFAULT_INT(TF32_DEFAULT),
        .help = "fp32 GEMMs in TF32 as PyTorch's flags choose: default, convolutions' "
                "(cudnn.allow_tf32) but not Linears' and matmuls' (cuda.matmul.allow_tf32); on, "
                "both; off, neither; the host backend rounds their inputs to TF32; no effect "
                "on bf16 and fp16"},
    [SET_OPTIMIZER] = {
        .cmds = TRAIN | SETTINGS_PREDICT,
        .flag = "optimizer", .key = "optimizers", .type = SETTINGS_WORD,
        WORDS(dps_optimizer_names), .suite_max = OPT_COUNT, DEFAULT_INT(OPT_SGD),
        .help = "SGD with momentum or AdamW, with PyTorch's default hyperparameters"},
    [SET_LR] = {
        .cmds = TRAIN,
        .flag = "lr", .type = SETTINGS_NUMBER, .lo = 0, .hi = 10, .metavar = "X",
        .help = "learning rate; default: the optimizer's"},
    [SET_STEPS] = {
        .cmds = TRAIN | SETTINGS_COMM_BENCH | SETTINGS_LINKS | SETTINGS_PREDICT,
        .flag = "steps", .key = "steps", .type = SETTINGS_INT, .lo = 1, .hi = 10000000,
        DEFAULT_INT(20), .metavar = "N",
        .help = "timed steps; comm-bench: collectives per size; links: copies per path; "
                "predict --measure: given to its runs and micro-benchmarks"},
    [SET_WARMUP] = {
        .cmds = TRAIN | SETTINGS_COMM_BENCH | SETTINGS_PREDICT,
        .flag = "warmup", .key = "warmup", .type = SETTINGS_INT, .lo = 0, .hi = 1000000,
        DEFAULT_INT(3), .metavar = "N", .help = "untimed warm-up steps (all-reduces)"},
    [SET_SEED] = {
        .cmds = TRAIN,
        .flag = "seed", .type = SETTINGS_INT, .lo = 0, .hi = INT64_MAX, DEFAULT_INT(1234),
        .metavar = "N", .help = "seed of initialisation and data"},
    [SET_DEVICE_MEM] = {
        .cmds = TRAIN | SETTINGS_INFO | SETTINGS_LINKS,
        .flag = "device-mem", .key = "device_mem", .type = SETTINGS_BYTES,
        .lo = 1, .hi = (int64_t)1 << 50, .metavar = "BYTES",
        .help = "host backend: capacity per device, K/M/G/T suffixes; default: unlimited"},
    [SET_HOST_DEVICES] = {
        .cmds = TRAIN | SETTINGS_INFO | SETTINGS_LINKS,
        .flag = "host-devices", .type = SETTINGS_INT, .lo = 1, .hi = DPS_MAX_DEVICES,
        DEFAULT_INT(8), .metavar = "N", .help = "host backend: number of emulated devices"},
    [SET_DP_COMM] = {
        .cmds = TRAIN,
        .flag = "dp-comm", .type = SETTINGS_WORD, WORDS(dps_dp_comm_names),
        DEFAULT_INT(DPCOMM_AUTO),
        .help = "dp on GPUs: NCCL broadcast/reduce, or peer copies + reduce-add"},
    [SET_DP_IMPL] = {
        .cmds = TRAIN,
        .flag = "dp-impl", .key = "dp_impl", .type = SETTINGS_WORD, WORDS(dps_dp_impl_names),
        .suite_max = DPIMPL_COUNT, DEFAULT_INT(DPIMPL_TORCH),
        .help = "dp: as DataParallel does it (materialised log-softmax loss, coalesced "
                "replicate and reduce into a new buffer), or the lean lower bound (suite files: a list)"},
    [SET_BUCKET_MB] = {
        .cmds = TRAIN | SETTINGS_INFO | SETTINGS_PREDICT, .list_cmds = SETTINGS_SWEEP | SETTINGS_PREDICT,
        .flag = "bucket-mb", .key = "bucket_mb", .type = SETTINGS_NUMBER, .lo = 0, .hi = 65536,
        .cli_max = SETTINGS_MAX_LIST, .suite_max = SETTINGS_MAX_LIST, DEFAULT_NUMBER(25.0),
        .metavar = "X", .help = "ddp: gradient bucket cap in MiB; sweep: a list; predict --from: "
                "the sizes to predict and the one to use (docs/predict.md)"},
    [SET_FIRST_BUCKET_MB] = {
        .cmds = TRAIN | SETTINGS_INFO,
        .flag = "first-bucket-mb", .type = SETTINGS_NUMBER, .lo = 0, .hi = 65536,
        DEFAULT_NUMBER(1.0), .metavar = "X", .help = "ddp: cap of the first bucket in MiB"},
    [SET_NO_OVERLAP] = {
        .cmds = TRAIN,
        .flag = "no-overlap", .type = SETTINGS_FLAG,
        .help = "ddp: all-reduce after backward instead of during it"},
    [SET_OVERLAP] = {
        .key = "overlap", .type = SETTINGS_WORD, WORDS(overlap_words), .suite_max = 2,
        DEFAULT_INT(1), .help = "ddp: all-reduce during backward (on) or after it (off)"},
    [SET_GRAD_VIEW] = {
        .cmds = TRAIN,
        .flag = "grad-as-bucket-view", .type = SETTINGS_FLAG,
        .help = "ddp: gradients are views into the buckets (no copy)"},
    [SET_DDP_IMPL] = {
        .cmds = TRAIN,
        .flag = "ddp-impl", .key = "ddp_impl", .type = SETTINGS_WORD, WORDS(dps_dp_impl_names),
        .suite_max = DPIMPL_COUNT, DEFAULT_INT(DPIMPL_TORCH),
        .help = "ddp: the loss as nn.CrossEntropyLoss runs under DistributedDataParallel "
                "(log-softmax kept, its gradient materialised), or lean: one fused pass "
                "writing only the logits' gradient (suite files: a list)"},
    [SET_TIMEOUT] = {
        .cmds = TRAIN | SETTINGS_COMM_BENCH,
        .flag = "timeout", .type = SETTINGS_NUMBER, .lo = 0, .hi = 1000000,
        DEFAULT_NUMBER(300.0), .metavar = "SECONDS",
        .help = "a ddp or comm-bench step (ranks end), NCCL's set-up, or dp's NCCL work, longer than this fails"},
    [SET_INJECT_FAULT] = {
        .cmds = TRAIN | SETTINGS_COMM_BENCH,
        .flag = "inject-fault", .type = SETTINGS_FAULT, .lo = 0, .hi = 100000000,
        WORDS(dps_fault_names), .metavar = "R:S:",
        .help = "ddp: rank R exits or hangs at step S (0-based, warm-up included); comm-bench: "
                "at all-reduce S, counting each size's warm-up and timed ones in turn"},
    [SET_INJECT_SLOWDOWN] = {
        .cmds = TRAIN,
        .flag = "inject-slowdown", .type = SETTINGS_SLOWDOWN, .lo = 0, .hi = 1000,
        .metavar = "PCT[@RANK]",
        .help = "for testing a regression gate or the straggler report: stretch every compute "
                "phase (forward, loss, backward, optimizer) by PCT percent, on every device or on "
                "rank RANK's alone"},
    [SET_INJECT_OVERFLOW] = {
        .cmds = TRAIN,
        .flag = "inject-overflow", .type = SETTINGS_INT, .lo = 0, .hi = 100000000,
        .metavar = "STEP",
        .help = "with a GradScaler: an inf in one gradient of device 0 (rank 0) at step STEP "
                "(0-based, warm-up included), which the scaler must skip"},
    [SET_LAUNCHER] = {
        .cmds = SETTINGS_RUN,
        .flag = "launcher", .type = SETTINGS_WORD, WORDS(dps_launch_names), DEFAULT_INT(LAUNCH_AUTO),
        .help = "ddp's ranks: forked by dpscale, or started by torchrun, mpirun or srun (env: "
                "one rank a process, read from their variables; auto: env when they are set)"},
    [SET_COMM] = {
        .cmds = SETTINGS_RUN,
        .flag = "comm", .type = SETTINGS_WORD, WORDS(dps_comm_names), DEFAULT_INT(DPS_COMM_AUTO),
        .help = "ddp's collectives: NCCL's ring over shared memory (shm, ranks on one host), Gloo "
                "over TCP (gloo, CPU ranks on any hosts, under a launcher) or NCCL (GPUs); auto: "
                "nccl on GPUs, shm when every rank shares a host, gloo otherwise"},
    [SET_LOCAL_RANK] = {
        .cmds = SETTINGS_RUN,
        .flag = "local-rank", .type = SETTINGS_INT, .lo = 0, .hi = 1 << 20,
        .metavar = "N",
        .help = "this rank's place on its host, as torch.distributed.launch passes it (also "
                "--local_rank) when LOCAL_RANK is not set"},
    [SET_RESUME] = {
        .cmds = SETTINGS_SWEEP,
        .flag = "resume", .type = SETTINGS_FLAG,
        .help = "skip configurations already in the folder (default folder: OUT/latest)"},
    [SET_FILTER] = {
        .cmds = SETTINGS_SWEEP,
        .flag = "filter", .type = SETTINGS_TEXT, .hi = SETTINGS_PATTERN_MAX - 1,
        .metavar = "PATTERN",
        .help = "only configuration ids containing PATTERN (or matching a glob)"},
    [SET_DRY_RUN] = {
        .cmds = TRAIN,
        .flag = "dry-run", .type = SETTINGS_FLAG,
        .help = "list the configurations, run nothing"},
    [SET_NO_LINKS] = {
        .cmds = SETTINGS_SWEEP,
        .flag = "no-links", .type = SETTINGS_FLAG,
        .help = "do not measure the link matrix (links.csv) first"},
    [SET_CONFIG_TIMEOUT] = {
        .cmds = SETTINGS_SWEEP,
        .flag = "config-timeout", .type = SETTINGS_NUMBER, .lo = 0, .hi = 1000000,
        DEFAULT_NUMBER(3600.0), .metavar = "SECONDS",
        .help = "kill a configuration running longer"},
    [SET_SIZES] = {
        .cmds = SETTINGS_SWEEP | SETTINGS_COMM_BENCH | SETTINGS_LINKS,
        .list_cmds = SETTINGS_COMM_BENCH,
        .flag = "sizes", .type = SETTINGS_BYTES, .lo = 4, .hi = (int64_t)1 << 34, .multiple = 4,
        .cli_max = SETTINGS_MAX_LIST, .metavar = "LIST",
        .help = "comm-bench: message sizes, e.g. 1M,16M,64M; links, sweep's link matrix: one "
                "copy size instead of the --link-* range"},
    [SET_BENCH_OP] = {
        .cmds = SETTINGS_COMM_BENCH, .list_cmds = SETTINGS_COMM_BENCH,
        .flag = "op", .type = SETTINGS_WORD, WORDS(bench_op_words), .cli_max = 3, DEFAULT_INT(0),
        .help = "comm-bench: the collectives timed (a list), in place over each size (the whole buffer: "
                "all-gather's output, reduce-scatter's input; busbw = algbw x 2(n-1)/n for "
                "all-reduce, (n-1)/n for the others, as nccl-tests)"},
    [SET_BENCH_COMM] = {
        .cmds = SETTINGS_COMM_BENCH,
        .flag = "comm", .type = SETTINGS_WORD, WORDS(bench_comm_words), DEFAULT_INT(0),
        .help = "comm-bench: the host collectives timed: NCCL's ring over shared memory (shm) or "
                "Gloo over TCP on loopback (gloo, in a build with Gloo)"},
    [SET_LINK_MIN_BYTES] = {
        .cmds = SETTINGS_SWEEP | SETTINGS_LINKS,
        .flag = "link-min-bytes", .type = SETTINGS_BYTES, .lo = 4, .hi = (int64_t)1 << 34,
        .multiple = 4, DEFAULT_INT(4096), .metavar = "BYTES",
        .help = "the link matrix's smallest copy (nccl-tests' -b)"},
    [SET_LINK_MAX_BYTES] = {
        .cmds = SETTINGS_SWEEP | SETTINGS_LINKS,
        .flag = "link-max-bytes", .type = SETTINGS_BYTES, .lo = 4, .hi = (int64_t)1 << 34,
        .multiple = 4, .metavar = "BYTES",
        .help = "the link matrix's largest copy (nccl-tests' -e); default: links 64M (host "
                "backend 16M), sweep the largest copy a phase of its configurations moves (4K..256M)"},
    [SET_LINK_FACTOR] = {
        .cmds = SETTINGS_SWEEP | SETTINGS_LINKS,
        .flag = "link-factor", .type = SETTINGS_INT, .lo = 2, .hi = 1024, DEFAULT_INT(4),
        .metavar = "N", .help = "the link matrix's sizes grow by this factor (nccl-tests' -f)"},
    [SET_NO_NVTX] = {
        .cmds = TRAIN,
        .flag = "no-nvtx", .type = SETTINGS_FLAG,
        .help = "no NVTX ranges, to measure what they cost (the --trace-steps timeline is still "
                "written; --no-trace, the old name, is accepted with a warning)"},
    [SET_NO_NVML] = {
        .cmds = TRAIN,
        .flag = "no-nvml", .type = SETTINGS_FLAG,
        .help = "no NVML sampler thread (to measure what it costs)"},
    [SET_STRICT] = {
        .cmds = TRAIN,
        .flag = "strict", .type = SETTINGS_FLAG,
        .help = "host backend: strict mode (DPSCALE_STRICT=1 for the run and its children): every "
                "op's stream, pointers and sizes checked as CUDA checks them, and accesses of "
                "streams that nothing orders reported as races, as compute-sanitizer's racecheck "
                "and synccheck; timings are not representative"},
    [SET_PROFILE_STEPS] = {
        .cmds = TRAIN,
        .flag = "profile-steps", .type = SETTINGS_STEP_RANGE, .lo = 0, .hi = 100000000,
        .metavar = "A:B",
        .help = "profiler capture range: steps A to B (0-based, warm-up included)"},
    [SET_TRACE_STEPS] = {
        .cmds = TRAIN,
        .flag = "trace-steps", .type = SETTINGS_INT, .lo = 0, .hi = 10000000, DEFAULT_INT(3),
        .metavar = "N",
        .help = "timeline of the last N timed steps per configuration, trace/<config>.json in "
                "the results folder (Chrome trace events: Perfetto, chrome://tracing); 0: none"},
    [SET_CHECK] = {
        .cmds = TRAIN,
        .flag = "check", .type = SETTINGS_FLAG,
        .help = "compare the final parameters with single-device training"},
    [SET_SAVE_PARAMS] = {
        .cmds = SETTINGS_RUN,
        .flag = "save-params", .type = SETTINGS_TEXT, .hi = DPS_PATH_MAX - 1, .metavar = "FILE",
        .help = "write the final parameters to FILE as a float32 .npy (flat layout)"},
    [SET_GEMM_REF] = {
        .cmds = TRAIN,
        .flag = "gemm-ref", .type = SETTINGS_FLAG,
        .help = "also time the step's GEMMs alone on device 0 (gemm_ref_tflops)"},
    [SET_MACHINE] = {
        .cmds = SETTINGS_PREDICT,
        .flag = "machine", .type = SETTINGS_TEXT, .hi = DPS_PATH_MAX - 1, .metavar = "FILE",
        .help = "the machine predicted: devices per node, links, the network between nodes "
                "(key = value lines, bench/predict/*.machine)"},
    [SET_WORKLOAD] = {
        .cmds = SETTINGS_PREDICT,
        .flag = "workload", .type = SETTINGS_TEXT, .hi = DPS_PATH_MAX - 1, .metavar = "FILE",
        .help = "the workload predicted: parameters, one device's step time, batch, bytes per "
                "sample (key = value lines, bench/predict/*.workload)"},
    [SET_FROM] = {
        .cmds = SETTINGS_PREDICT,
        .flag = "from", .type = SETTINGS_TEXT, .hi = DPS_PATH_MAX - 1, .metavar = "DIR",
        .help = "predict from a results folder: a workload per series with a one-device run; "
                "the machine from its links.csv and allreduce.csv unless --machine is given"},
    [SET_CALIBRATE] = {
        .cmds = SETTINGS_PREDICT,
        .flag = "calibrate", .type = SETTINGS_TEXT, .hi = DPS_PATH_MAX - 1, .metavar = "DIR",
        .help = "fit the model's constants to a results folder's runs on 1 and more devices; "
                "writes OUT/NAME/calibration.txt (a constant outside its range held to it, "
                "with a warning)"},
    [SET_CALIBRATION] = {
        .cmds = SETTINGS_PREDICT,
        .flag = "calibration", .type = SETTINGS_TEXT, .hi = DPS_PATH_MAX - 1, .metavar = "FILE",
        .help = "the constants --calibrate wrote (default: uncalibrated, see docs/predict.md)"},
    [SET_MEASURE] = {
        .cmds = SETTINGS_PREDICT,
        .flag = "measure", .type = SETTINGS_FLAG,
        .help = "predict from runs of --model on this machine: measures what OUT/NAME lacks "
                "(the calibration, the model on one device, links, all-reduce), printing each "
                "step's command, then predicts --gpus (docs/predict.md)"},
    [SET_PREDICT_GPUS] = {
        .cmds = SETTINGS_PREDICT, .list_cmds = SETTINGS_PREDICT,
        .flag = "gpus", .type = SETTINGS_INT, .lo = 1, .hi = 1 << 20, .cli_max = SETTINGS_MAX_LIST,
        .metavar = "LIST",
        .help = "predict: the device counts, e.g. 1,8,64,256, on ceil(count / gpus_per_node) nodes"},
    [SET_MODES] = {
        .cmds = SETTINGS_PREDICT, .list_cmds = SETTINGS_PREDICT,
        .flag = "modes", .type = SETTINGS_WORD, WORDS(dps_mode_names), .cli_max = MODE_COUNT,
        .help = "predict: the modes, dp, ddp or both (default both)"},
    [SET_MODEL_FILE] = {
        .cmds = SETTINGS_INFO,
        .flag = "model", .type = SETTINGS_TEXT, .hi = DPS_PATH_MAX - 1, .metavar = "FILE",
        .help = "info: a model file's tensors, ops and DDP buckets (docs/model-file.md)"},
    [SET_OUT] = {
        .cmds = TRAIN | SETTINGS_COMM_BENCH | SETTINGS_LINKS | SETTINGS_PREDICT,
        .flag = "out", .type = SETTINGS_TEXT, .hi = DPS_PATH_MAX - 1, DEFAULT_TEXT("results"),
        .metavar = "DIR", .help = "results root (predict: predictions.csv only when --out or --name is given)"},
    [SET_NAME] = {
        .cmds = TRAIN | SETTINGS_COMM_BENCH | SETTINGS_LINKS | SETTINGS_PREDICT,
        .flag = "name", .type = SETTINGS_FOLDER_NAME, .hi = DPS_NAME_MAX - 1, .metavar = "NAME",
        .help = "results folder under --out; default <date>-<time>-<host>"},
    [SET_HELP] = {
        .cmds = EVERY,
        .flag = "help", .letter = 'h', .type = SETTINGS_FLAG, .help = "show this help"},
    [SET_VERSION] = {
        .cmds = EVERY,
        .flag = "version", .letter = 'V', .type = SETTINGS_FLAG, .help = "show the version"},
};

static int same_flag(settings_id a, settings_id b)
{
    const char *fa = settings_table[a].flag, *fb = settings_table[b].flag;
    return fa && fb && strcmp(fa, fb) == 0;
}

settings_id settings_entry_for(settings_id id, unsigned cmd)
{
    for (int j = 0; j < SET_COUNT; j++)
        if (same_flag(id, (settings_id)j) && (settings_table[j].cmds & cmd)) return (settings_id)j;
    return id;
}

unsigned settings_flag_cmds(settings_id id)
{
    unsigned cmds = 0;
    for (int j = 0; j < SET_COUNT; j++)
        if (same_flag(id, (settings_id)j)) cmds |= settings_table[j].cmds;
    return cmds ? cmds : settings_table[id].cmds;
}

int settings_flag_first(settings_id id)
{
    for (int j = 0; j < (int)id; j++)
        if (same_flag(id, (settings_id)j)) return 0;
    return 1;
}

int settings_find_key(const char *key)
{
    for (int id = 0; id < SET_COUNT; id++)
        if (settings_table[id].key && strcmp(settings_table[id].key, key) == 0) return id;
    return -1;
}

void settings_join_words(const settings_entry *e, const char *sep, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < e->nwords; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", i ? sep : "", e->words[i]);
    }
}

/* "1..64", "above 0, at most 10", "4..16G, multiples of 4"; "" where none. */
static void range_text(const settings_entry *e, char *buf, size_t len)
{
    char lo[32], hi[32], multiple[48] = "";
    buf[0] = '\0';
    if (e->type == SETTINGS_INT && e->hi == INT64_MAX) {
        snprintf(buf, len, "%" PRId64 " or more", e->lo);
    } else if (e->type == SETTINGS_INT) {
        snprintf(buf, len, "%" PRId64 "..%" PRId64, e->lo, e->hi);
    } else if (e->type == SETTINGS_NUMBER) {
        snprintf(buf, len, "above %" PRId64 ", at most %" PRId64, e->lo, e->hi);
    } else if (e->type == SETTINGS_BYTES) {
        if (e->multiple) snprintf(multiple, sizeof multiple, ", multiples of %" PRId64, e->multiple);
        snprintf(buf, len, "%s..%s%s", dps_fmt_bytes_suffix((uint64_t)e->lo, lo, sizeof lo),
                 dps_fmt_bytes_suffix((uint64_t)e->hi, hi, sizeof hi), multiple);
    }
}

/* The default as the option would be written: "20", "25", "auto", "small"; "" where none. */
static void default_text(const settings_entry *e, char *buf, size_t len)
{
    buf[0] = '\0';
    if (!e->has_default) return;
    if (e->def_text) snprintf(buf, len, "%s", e->def_text);
    else if (e->type == SETTINGS_WORD) snprintf(buf, len, "%s", e->words[e->def.i]);
    else if (e->type == SETTINGS_NUMBER) snprintf(buf, len, "%g", e->def.x);
    else snprintf(buf, len, "%" PRId64, e->def.i);
}

void settings_join_cmds(unsigned cmds, const char *sep, const char *last, char *buf, size_t len)
{
    int left = 0;
    for (int i = 0; i < SETTINGS_NCMDS; i++) left += (cmds >> i) & 1;
    buf[0] = '\0';
    for (int i = 0; i < SETTINGS_NCMDS; i++) {
        if (!((cmds >> i) & 1)) continue;
        size_t used = strlen(buf);
        left--;
        const char *after = left > 1 ? sep : left ? last : "";
        snprintf(buf + used, len - used, "%s%s", settings_cmd_names[i], after);
    }
}

/* One option's line: flag, metavar (words appended), help, then [range;
 * default] and, unless every subcommand takes it, {the subcommands}. */
static void print_option(FILE *f, const settings_entry *e)
{
    char words[96], left[128], range[64], def[64], notes[160] = "", list[80], cmds[96] = "";
    settings_join_words(e, "|", words, sizeof words);
    const char *meta = e->metavar ? e->metavar : "";
    snprintf(left, sizeof left, "--%s%s%s%s", e->flag, *meta || *words ? " " : "", meta, words);
    range_text(e, range, sizeof range);
    default_text(e, def, sizeof def);
    if (*range || *def)
        snprintf(notes, sizeof notes, " [%s%s%s%s]", range, *range && *def ? "; " : "",
                 *def ? "default " : "", def);
    if (e->cmds != EVERY) {
        settings_join_cmds(e->cmds, ", ", ", ", list, sizeof list);
        snprintf(cmds, sizeof cmds, " {%s}", list);
    }
    fprintf(f, "  %-28s %s%s%s\n", left, e->help, notes, cmds);
}

void settings_print_options(FILE *f)
{
    for (int id = 0; id < SET_COUNT; id++)
        if (settings_table[id].flag) print_option(f, &settings_table[id]);
}
