/* kubetrain-operator — the TrainingJob controller's command line: flags (options.c),
 * kubeconfig, probes and metrics listeners, leader election, and orderly shutdown on
 * SIGTERM or SIGINT (workers finish their current job key, the lease is released).
 * `kubetrain-operator convert-tfjob` is the TFJob converter instead (tfjob.c). */
#include "clock.h"
#include "controller.h"
#include "httpserv.h"
#include "kcfg.h"
#include "kclient.h"
#include "leader.h"
#include "metrics.h"
#include "olog.h"
#include "options.h"
#include "tfjob.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by a signal or a lost lease. The main thread and a standby's leader_acquire wait on
 * it rather than polling it: a 20 ms poll, 50 wake-ups a second for the life of the
 * process, was most of an idle operator's CPU. */
static ClockStop g_stop; /* made in main, before the signal thread */
static volatile int g_lost;
static Controller *g_controller;
#define STOPPING() clock_stop_is_set(&g_stop)

/* Asks everything to stop (lost: the lease was lost, exit 1) and wakes the main thread. */
static void request_stop(int lost)
{
    if (lost) __atomic_store_n(&g_lost, 1, __ATOMIC_RELEASE);
    clock_stop_set(&g_stop, 1);
}

static const char insecure_warning[] =
    "TLS VERIFICATION IS OFF (--insecure-skip-tls-verify): anyone between the operator and "
    "%s can pose as the API server and receive the operator's credentials; give "
    "certificate-authority(-data) in the kubeconfig instead";

/* What main starts; shut_down stops each piece that is there. */
typedef struct Operator {
    OperatorOptions opt;
    KubeConfig *kc;
    KubeClient *client;
    char identity[300]; /* hostname_pid, unless --leader-elect-id */
    ControllerConfig cc;
    Controller *ctl;
    HttpServer *metrics, *health;
    Leader *leader;
} Operator;

static void *signal_thread(void *arg)
{
    sigset_t *set = arg;
    int sig;
    pthread_setname_np(pthread_self(), "kt-signals"); /* as top -H, perf and gdb show it */
    while (sigwait(set, &sig) == 0) {
        if (sig == SIGPIPE) continue;
        olog(OLOG_INFO, NULL, "received signal %d: shutting down", sig);
        request_stop(0);
        if (sig != SIGHUP) break;
    }
    return NULL;
}

/* Signals go to one thread; every other thread inherits the blocked mask, so this runs
 * before any other thread starts. */
static void start_signal_thread(void)
{
    static sigset_t set; /* the thread's for the life of the process */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t sigth;
    pthread_create(&sigth, NULL, signal_thread, &set);
    pthread_detach(sigth);
}

/* glibc gives each thread its own malloc arena; the threads here allocate little, and
 * one arena keeps the resident size small with many informers and workers. A fixed
 * mmap threshold keeps glibc from raising it after each large free (list and watch
 * buffers): large blocks then always go back to the system. */
static void tune_malloc(void)
{
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
}

static void on_api(const char *verb, long code, double seconds)
{
    metrics_count_api(verb, code, seconds);
}

static void on_lost(void *ctx)
{
    (void)ctx;
    request_stop(1);
}

static void http_handler(void *ctx, const char *path, int *code, const char **ctype, char **body)
{
    (void)ctx;
    if (strcmp(path, "/metrics") == 0) {
        if (g_controller) controller_update_phase_metrics(g_controller);
        *body = metrics_render();
        *code = *body ? 200 : 500;
        *ctype = "text/plain; version=0.0.4; charset=utf-8";
    } else if (strcmp(path, "/healthz") == 0) {
        *code = 200;
        *body = strdup("ok\n");
    } else if (strcmp(path, "/readyz") == 0) {
        int ready = g_controller && controller_synced(g_controller) && !STOPPING();
        *code = ready ? 200 : 503;
        *body = strdup(ready ? "ok\n" : "informer caches not synced\n");
    } else {
        *code = 404;
    }
}

/* Loads the kubeconfig into op->kc and makes op->client, then logs what it talks to and
 * each risk the options took. Returns 0, or -EINVAL after logging why, with nothing
 * left to free. */
static int load_kubeconfig(Operator *op)
{
    const OperatorOptions *o = &op->opt;
    char err[1024];
    if (kcfg_load(o->kubeconfig, &op->kc, err, sizeof err) != 0) {
        olog(OLOG_ERROR, NULL, "configuration: %s", err);
        goto err;
    }
    if (op->kc->insecure_requested && !o->insecure_skip_tls_verify) {
        olog(OLOG_ERROR, NULL,
             "configuration: %s: the cluster sets insecure-skip-tls-verify; kubetrain-operator "
             "verifies TLS unless started with --insecure-skip-tls-verify: give "
             "certificate-authority(-data) instead",
             op->kc->source);
        goto err;
    }
    op->kc->insecure_skip_tls_verify = o->insecure_skip_tls_verify;
    op->client = kclient_new(op->kc, o->qps, o->burst, err, sizeof err);
    if (!op->client) {
        olog(OLOG_ERROR, NULL, "configuration: %s", err);
        goto err;
    }
    kclient_set_observer(op->client, on_api);
    olog(OLOG_INFO, NULL, "kubetrain-operator %s: API server %s (from %s), namespace %s",
         OPERATOR_VERSION, op->kc->server, op->kc->source, *o->ns ? o->ns : "(all)");
    if (o->insecure_skip_tls_verify) olog(OLOG_WARN, NULL, insecure_warning, op->kc->server);
    if (o->template_policy == PODPOLICY_NONE)
        olog(OLOG_WARN, NULL,
             "--template-policy none: TrainingJob templates pass through (privileged, host "
             "namespaces, hostPath, any service account); whoever may create TrainingJobs gets "
             "any pod the namespace's Pod Security admission allows");
    return 0;
err:
    kcfg_free(op->kc);
    op->kc = NULL;
    return -EINVAL;
}

/* Makes the controller, starts the /metrics and probe listeners and the informers:
 * caches warm up while a standby waits for the lease, so takeover is quick. Returns 0,
 * or -1 after logging why; shut_down stops what did start. */
static int start_servers(Operator *op)
{
    const OperatorOptions *o = &op->opt;
    char err[1024], hostname[256] = "kubetrain-operator";
    gethostname(hostname, sizeof hostname - 1);
    snprintf(op->identity, sizeof op->identity, "%s_%d", hostname, (int)getpid());
    op->cc = (ControllerConfig){
        .namespace = o->ns,
        .reconcile = {.desired = {.trainer_image = o->trainer_image,
                                  .cluster_domain = o->cluster_domain,
                                  .default_queue = o->default_queue},
                      .backoff_base_s = o->backoff_base_s,
                      .backoff_max_s = o->backoff_max_s,
                      .force_delete_after_s = o->force_delete_after_s,
                      .template_policy = o->template_policy},
        .workers = o->workers,
        .pod_parallelism = o->pod_parallelism,
        .progress = {.interval_s = o->progress_interval_s,
                     .write_qps = o->progress_qps,
                     .timeout_s = 2},
        .identity = o->lease_id ? o->lease_id : op->identity,
    };
    op->ctl = controller_new(op->client, &op->cc, err, sizeof err);
    if (!op->ctl) {
        olog(OLOG_ERROR, NULL, "%s", err);
        return -1;
    }
    g_controller = op->ctl;
    if (strcmp(o->metrics_addr, "0") != 0 &&
        !(op->metrics = httpserv_start(o->metrics_addr, http_handler, NULL, err, sizeof err))) {
        olog(OLOG_ERROR, NULL, "metrics: %s", err);
        return -1;
    }
    if (strcmp(o->health_addr, "0") != 0 &&
        !(op->health = httpserv_start(o->health_addr, http_handler, NULL, err, sizeof err))) {
        olog(OLOG_ERROR, NULL, "health: %s", err);
        return -1;
    }
    if (op->metrics)
        olog(OLOG_INFO, NULL, "serving /metrics on port %d", httpserv_port(op->metrics));
    if (op->health)
        olog(OLOG_INFO, NULL, "serving /healthz and /readyz on port %d", httpserv_port(op->health));
    if (controller_start_informers(op->ctl) != 0) {
        olog(OLOG_ERROR, NULL, "cannot start informers");
        return -1;
    }
    return 0;
}

/* Takes the lease when --leader-elect asks for it, waits for the caches, starts the
 * workers and runs until a signal or a lost lease stops it. Returns the exit code: 1
 * when a piece did not start or the lease was lost, else 0. */
static int run_controller(Operator *op)
{
    const OperatorOptions *o = &op->opt;
    if (o->leader_elect) {
        const char *kc_ns = op->kc->namespace ? op->kc->namespace : "default";
        LeaderConfig lc = {.ns = o->lease_ns ? o->lease_ns : (*o->ns ? o->ns : kc_ns),
                           .name = o->lease_name,
                           .identity = op->cc.identity};
        op->leader = leader_new(op->client, &lc);
        if (!op->leader || leader_acquire(op->leader, &g_stop) != 0) return 0;
        if (leader_start_renewing(op->leader, on_lost, NULL) != 0) {
            olog(OLOG_ERROR, NULL, "cannot start the lease renewal thread");
            return 1;
        }
    }
    double t0 = clock_mono();
    while (!STOPPING() && !controller_synced(op->ctl))
        clock_stop_wait(&g_stop, 0.05);
    if (STOPPING()) return 0;
    olog(OLOG_INFO, NULL, "caches synced in %.2f s; starting %d workers", clock_mono() - t0,
         op->cc.workers);
    if (controller_start_workers(op->ctl) != 0) {
        olog(OLOG_ERROR, NULL, "cannot start worker threads");
        return 1;
    }
    double warned = clock_mono();
    while (!STOPPING()) {
        clock_stop_wait(&g_stop, o->insecure_skip_tls_verify ? 60 - (clock_mono() - warned) : 3600);
        if (o->insecure_skip_tls_verify && clock_mono() - warned >= 60) {
            olog(OLOG_WARN, NULL, insecure_warning, op->kc->server);
            warned = clock_mono();
        }
    }
    return __atomic_load_n(&g_lost, __ATOMIC_ACQUIRE) ? 1 : 0;
}

/* Workers first, then the lease (a standby may act at once), then the watches. */
static void shut_down(Operator *op)
{
    olog(OLOG_INFO, NULL, "stopping");
    controller_stop_workers(op->ctl);
    leader_release(op->leader);
    controller_stop(op->ctl);
    leader_free(op->leader);
    g_controller = NULL;
    httpserv_stop(op->metrics);
    httpserv_stop(op->health);
    controller_free(op->ctl);
    kclient_free(op->client);
    kcfg_free(op->kc);
    olog(OLOG_INFO, NULL, "stopped");
}

int main(int argc, char **argv)
{
    Operator op = {0};
    if (argc > 1 && strcmp(argv[1], "convert-tfjob") == 0) return tfjob_main(argc - 1, argv + 1);
    int rc = options_parse(&op.opt, argc, argv);
    if (rc != 0) return rc > 0 ? 0 : 2;
    olog_set_level(op.opt.log_level);
    metrics_init();
    tune_malloc();
    clock_stop_init(&g_stop);
    start_signal_thread();
    if (load_kubeconfig(&op) != 0) return 2;
    int exit_code = start_servers(&op) == 0 ? run_controller(&op) : 1;
    shut_down(&op);
    return exit_code;
}
