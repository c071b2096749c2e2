/* `dpscale predict --measure`: predicting from one's own runs in one command,
 * the seven commands of docs/predict.md ("From a results folder, and
 * calibration") run in turn as child processes of this binary into OUT/NAME,
 * each printed as it starts, a measurement the folder holds not taken again. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/names.h"
#include "core/util.h"

#define MEASURE_STEPS 7
#define MEASURE_ARGS 48
#define MEASURE_LOG "measure.log"

/* One command line, its words in one buffer (room for --resume and the
 * NULL after them); overflow: a word did not fit. */
typedef struct cmdline {
    char text[8 * DPS_PATH_MAX];
    size_t used;
    char *argv[MEASURE_ARGS + 2];
    int argc, overflow;
} cmdline;

/* One of the seven: the file whose presence says it was measured (NULL: an
 * arithmetic step, always run); whether it is a sweep, then continued with
 * --resume rather than skipped; whether its stdout is ours (the predictions). */
typedef struct step {
    const char *done;
    int sweep, shown;
    cmdline cmd;
} step;

/* Where the steps write: OUT/NAME, the log of their output. */
typedef struct measure_dir {
    char dir[DPS_PATH_MAX + DPS_NAME_MAX + 2];
    char log[DPS_PATH_MAX + DPS_NAME_MAX + 16];
} measure_dir;

/* A measurement runs in a process group of its own (writing only to the
 * log, never stopped as a background job at the terminal), and SIGINT or
 * SIGTERM sent to this process goes to it once, each: its processes see what
 * they would have seen at the terminal (the first ends them in order, a
 * second escalates). The arithmetic steps stay in this process's group,
 * which the terminal's signals reach. No step starts after a signal. */
static volatile sig_atomic_t step_group, stopped_by;

static void forward_signal(int sig)
{
    stopped_by = sig;
    if (step_group > 0) kill(-(pid_t)step_group, sig);
}

static void forward_signals(void)
{
    struct sigaction sa = {.sa_handler = forward_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The options predict does not take with --measure: what they give, it
 * measures, or (--bucket-mb, --accum) a prediction of its own. */
static const settings_id measure_refused[] = {SET_WORKLOAD, SET_FROM, SET_CALIBRATE,
                                              SET_CALIBRATION, SET_BUCKET_MB, SET_ACCUM,
                                              SET_NO_SYNC};

__attribute__((format(printf, 2, 3))) static void word(cmdline *c, const char *fmt, ...)
{
    size_t room = sizeof c->text - c->used;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->text + c->used, room, fmt, ap);
    va_end(ap);
    if (c->argc >= MEASURE_ARGS || n < 0 || (size_t)n >= room) {
        c->overflow = 1;
        return;
    }
    c->argv[c->argc++] = c->text + c->used;
    c->argv[c->argc] = NULL;
    c->used += (size_t)n + 1;
}

/* An option and its value, when given. */
__attribute__((format(printf, 3, 4)))
static void opt(cmdline *c, const char *flag, const char *fmt, ...)
{
    char value[DPS_PATH_MAX + DPS_NAME_MAX + 32];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof value) c->overflow = 1;
    word(c, "--%s", flag);
    word(c, "%s", value);
}

static dps_status check_measure(const cli_args *a)
{
    DPS_TRY(cli_refuse_given(a, measure_refused, sizeof measure_refused / sizeof *measure_refused,
                             "not with --measure, which measures its own folder and calibration "
                             "(run the seven commands of docs/predict.md for that)"));
    if (!a->gpus_set)
        return dps_fail(DPS_ERR_USAGE, "predict --measure needs --gpus LIST, the device counts to "
                        "predict (dpscale predict --measure --model medium --gpus 1,2)");
    return DPS_OK;
}

static const char *model_of(const cli_args *a)
{
    return a->sweep_models_n ? a->sweep_models[0] : settings_table[SET_MODEL].def_text;
}

/* The model measured and its options, as given (sweep's defaults otherwise). */
static void model_words(const cli_args *a, cmdline *c)
{
    opt(c, "model", "%s", model_of(a));
    for (int i = 0; i < 4; i++)
        if (a->shape_override[i])
            opt(c, settings_table[SET_LAYERS + i].flag, "%d", (&a->shape_values.layers)[i]);
    if (a->given[SET_PRECISION]) opt(c, "precision", "%s", dps_precision_name(a->cfg.precision));
    if (a->given[SET_OPTIMIZER]) opt(c, "optimizer", "%s", dps_optimizer_name(a->cfg.optimizer));
    if (a->given[SET_BATCH_PER_GPU]) opt(c, "batch-per-gpu", "%d", a->batch_per_gpu);
}

/* --steps and (but for links) --warmup, where given. */
static void timing_words(const cli_args *a, cmdline *c, int warmup)
{
    if (a->steps_set) opt(c, "steps", "%d", a->cfg.steps);
    if (warmup && a->warmup_set) opt(c, "warmup", "%d", a->cfg.warmup);
}

static void out_words(const measure_dir *d, cmdline *c, const char *name)
{
    opt(c, "out", "%s", d->dir);
    opt(c, "name", "%s", name);
}

/* Steps 1 to 3: the calibration shape on one and two devices, the
 * all-reduce beside it, the constants fitted. */
static void plan_calibration(const cli_args *a, const measure_dir *d, step *s)
{
    cmdline *c = &s[0].cmd;
    s[0].done = "cal/runs.csv", s[0].sweep = 1;
    word(c, "sweep");
    opt(c, "gpus", "1,2");
    opt(c, "model", "medium");
    opt(c, "layers", "4");
    opt(c, "width", "768");
    timing_words(a, c, 1);
    out_words(d, c, "cal");
    c = &s[1].cmd, s[1].done = "cal/allreduce.csv";
    word(c, "comm-bench");
    opt(c, "gpus", "2");
    timing_words(a, c, 1);
    out_words(d, c, "cal");
    c = &s[2].cmd;
    word(c, "predict");
    opt(c, "calibrate", "%s/cal", d->dir);
    if (a->machine_path[0]) opt(c, "machine", "%s", a->machine_path);
    out_words(d, c, "calibration");
}

/* Step 7: the prediction from the model's folder with the constants. */
static void plan_prediction(const cli_args *a, const measure_dir *d, step *s)
{
    char list[CLI_MAX_LIST * 12] = "", modes[MODE_COUNT * 8] = "";
    for (int g = 0; g < a->sweep_ngpus_n; g++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", g ? "," : "",
                 a->sweep_ngpus[g]);
    for (int m = 0; m < a->sweep_modes_n; m++)
        snprintf(modes + strlen(modes), sizeof modes - strlen(modes), "%s%s", m ? "," : "",
                 dps_mode_name(a->sweep_modes[m]));
    s->shown = 1;
    word(&s->cmd, "predict");
    opt(&s->cmd, "from", "%s/mine", d->dir);
    opt(&s->cmd, "gpus", "%s", list);
    if (a->sweep_modes_n) opt(&s->cmd, "modes", "%s", modes);
    if (a->machine_path[0]) opt(&s->cmd, "machine", "%s", a->machine_path);
    opt(&s->cmd, "calibration", "%s/calibration/calibration.txt", d->dir);
    out_words(d, &s->cmd, "p");
}

/* Steps 4 to 7: the model on one device, the links and the all-reduce of
 * two, the prediction from that folder with the constants. */
static void plan_model(const cli_args *a, const measure_dir *d, step *s)
{
    cmdline *c = &s[3].cmd;
    s[3].done = "mine/runs.csv", s[3].sweep = 1;
    word(c, "sweep");
    opt(c, "gpus", "1");
    model_words(a, c);
    timing_words(a, c, 1);
    word(c, "--no-links");
    out_words(d, c, "mine");
    for (int k = 4; k <= 5; k++) {
        c = &s[k].cmd, s[k].done = k == 4 ? "mine/links.csv" : "mine/allreduce.csv";
        word(c, k == 4 ? "links" : "comm-bench");
        opt(c, "gpus", "2");
        timing_words(a, c, k == 5);
        out_words(d, c, "mine");
    }
    plan_prediction(a, d, &s[6]);
}

/* The words as a shell would take them: a word with other characters quoted. */
static void print_cmd(FILE *f, const cmdline *c)
{
    fputs("dpscale", f);
    for (int i = 0; i < c->argc; i++) {
        const char *w = c->argv[i];
        int plain = *w && strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                    "_./:,=+-@%") == strlen(w);
        if (plain) {
            fprintf(f, " %s", w);
            continue;
        }
        fputs(" '", f);
        for (; *w; w++) {
            if (*w == '\'') fputs("'\\''", f);
            else fputc(*w, f);
        }
        fputc('\'', f);
    }
}

/* The last lines of the log, after a step failed. */
static void print_tail(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[16][512];
    int n = 0;
    while (fgets(line[n % 16], sizeof line[0], f)) n++;
    fclose(f);
    for (int i = n > 16 ? n - 16 : 0; i < n; i++) fprintf(stderr, "  | %s", line[i % 16]);
}

/* The child: stdout (and, for a measurement, stderr) appended to the log. */
static void child(const char *exe, const step *s, const char *log)
{
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) {
        fprintf(stderr, "dpscale: predict --measure: cannot open %s: %s\n", log, strerror(errno));
        _exit(1);
    }
    if (!s->shown) dup2(fd, STDOUT_FILENO);
    if (s->done) dup2(fd, STDERR_FILENO);
    close(fd);
    char *argv[MEASURE_ARGS + 3] = {"dpscale"};
    memcpy(argv + 1, s->cmd.argv, sizeof s->cmd.argv);
    execv(exe, argv);
    fprintf(stderr, "dpscale: predict --measure: cannot run %s: %s\n", exe, strerror(errno));
    _exit(1);
}

/* Runs one step to its end; its exit status, 128 + signal when killed. */
static int run_child(const char *exe, const step *s, const char *log)
{
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dpscale: predict --measure: cannot start a step (fork: %s)\n",
                strerror(errno));
        return 1;
    }
    int own = s->done != NULL; /* a measurement: a process group of its own */
    if (pid == 0) {
        if (own) setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* this process gone: the step ends in order */
        if (getppid() != parent) _exit(128 + SIGTERM);
        child(exe, s, log);
    }
    if (own) {
        setpgid(pid, pid); /* before a signal is forwarded, whichever runs first */
        step_group = pid;
        if (stopped_by) kill(-pid, stopped_by);
    }
    int st = 0, waited;
    while ((waited = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {}
    step_group = 0;
    if (waited < 0) return 1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Step k: skipped when measured already, a sweep continued; run, printed. */
static int run_step(const char *exe, const measure_dir *d, step *s, int k)
{
    char done[sizeof d->dir + 32];
    snprintf(done, sizeof done, "%s/%s", d->dir, s->done ? s->done : "");
    int have = s->done && dps_file_exists(done);
    if (have && !s->sweep) {
        printf("# measure %d/%d: skipped, %s is there: ", k + 1, MEASURE_STEPS, done);
        print_cmd(stdout, &s->cmd);
        putchar('\n');
        return 0;
    }
    if (have) { /* --resume goes after the command's name */
        memmove(s->cmd.argv + 2, s->cmd.argv + 1, sizeof(char *) * (size_t)s->cmd.argc);
        s->cmd.argv[1] = "--resume", s->cmd.argc++;
    }
    printf("# measure %d/%d%s: ", k + 1, MEASURE_STEPS, have ? " (continued: the folder's runs "
           "are not run again)" : "");
    print_cmd(stdout, &s->cmd);
    putchar('\n');
    int rc = run_child(exe, s, d->log);
    if (rc && stopped_by) {
        fprintf(stderr, "dpscale: predict --measure: stopped by %s in step %d/%d; what is measured "
                "stays, and predict --measure again goes on from it\n", dps_signal_name(stopped_by),
                k + 1, MEASURE_STEPS);
    } else if (rc) {
        fprintf(stderr, "dpscale: predict --measure: step %d/%d failed (exit %d): ", k + 1,
                MEASURE_STEPS, rc);
        print_cmd(stderr, &s->cmd);
        fprintf(stderr, "\n  its output is in %s; the end of it:\n", d->log);
        print_tail(d->log);
        fprintf(stderr, "dpscale: fix what it says and run predict --measure again: what is "
                        "measured stays\n");
    }
    return rc;
}

/* OUT/NAME: NAME given, else measure-<the model's base name>; made. */
static dps_status measure_folder(const cli_args *a, measure_dir *d)
{
    char text[DPS_NAME_MAX], name[DPS_NAME_MAX];
    snprintf(text, sizeof text, "measure-%.100s", dps_path_base(model_of(a)));
    cli_folder_name(text, name, sizeof name);
    snprintf(d->dir, sizeof d->dir, "%s/%s", a->cfg.out_dir, a->name_set ? a->cfg.name : name);
    snprintf(d->log, sizeof d->log, "%s/%s", d->dir, MEASURE_LOG);
    return dps_mkdirs(d->dir, "--out");
}

static dps_status self_path(char *exe, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", exe, len - 1);
    if (n < 0 || (size_t)n >= len - 1)
        return dps_fail(DPS_ERR_RUNTIME, "predict --measure: cannot read /proc/self/exe (%s), the "
                        "binary it runs each step with; run the seven commands of docs/predict.md",
                        n < 0 ? strerror(errno) : "path too long");
    exe[n] = '\0';
    return DPS_OK;
}

static dps_status plan(const cli_args *a, const measure_dir *d, step *s)
{
    plan_calibration(a, d, s);
    plan_model(a, d, s);
    for (int k = 0; k < MEASURE_STEPS; k++)
        if (s[k].cmd.overflow)
            return dps_fail(DPS_ERR_USAGE, "predict --measure: step %d's command is longer than "
                            "%zu characters: shorten --out or the model file's path", k + 1,
                            sizeof s[k].cmd.text);
    return DPS_OK;
}

/* The model's sweep (step 4) with --dry-run, before anything is measured:
 * a model file that cannot be read, or an option it does not take, is
 * refused at once, not after the calibration's runs. Its output goes to the
 * log, whose end is printed when it fails; its exit status. */
static int check_model_step(const char *exe, const measure_dir *d, const step *s)
{
    step dry = *s; /* its words still in s's text, --dry-run in its own */
    dry.shown = 0;
    word(&dry.cmd, "--dry-run");
    int rc = dry.cmd.overflow ? 2 : run_child(exe, &dry, d->log);
    if (!rc || stopped_by) return rc;
    fprintf(stderr, "dpscale: predict --measure: the model's runs (step 4/%d) would fail, so "
            "nothing was measured: ", MEASURE_STEPS);
    print_cmd(stderr, &dry.cmd);
    fprintf(stderr, "\n  its output is in %s; the end of it:\n", d->log);
    print_tail(d->log);
    return rc;
}

int cmd_predict_measure(cli_args *a)
{
    static step steps[MEASURE_STEPS];
    measure_dir d;
    char exe[DPS_PATH_MAX];
    dps_status rc = check_measure(a);
    if (!rc) rc = measure_folder(a, &d);
    if (!rc) rc = self_path(exe, sizeof exe);
    if (!rc) rc = plan(a, &d, steps);
    if (rc) {
        fprintf(stderr, "dpscale: %s\n", dps_errmsg());
        return rc == DPS_ERR_USAGE ? 2 : 1;
    }
    printf("# dpscale predict --measure: the commands of docs/predict.md into %s (their output "
           "in %s)\n", d.dir, d.log);
    forward_signals();
    int status = check_model_step(exe, &d, &steps[3]);
    for (int k = 0; k < MEASURE_STEPS && !status && !stopped_by; k++)
        status = run_step(exe, &d, &steps[k], k);
    if (stopped_by && !status) status = 128 + stopped_by;
    return status;
}
