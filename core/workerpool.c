/* core/workerpool.c - worker processes through uv_spawn. */
#include "core/workerpool.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/log.h"
#include "core/status.h"

extern char **environ;

struct tr__proc {
    uv_process_t h;
    tr__pool *pool;
    tr__proc_exit_fn fn;
    void *ctx;
    int exited;
};

void tr__pool_init(tr__pool *pool, uv_loop_t *loop) {
    pool->loop = loop;
    pool->live = 0;
}

static void on_closed(uv_handle_t *h) {
    free(h->data);
}

static void on_exit_cb(uv_process_t *h, int64_t status, int sig) {
    tr__proc *p = h->data;
    p->exited = 1;
    p->pool->live--;
    if (p->fn) p->fn(p->ctx, p, status, sig);
    uv_close((uv_handle_t *)h, on_closed);
}

int tr__proc_spawn(tr__pool *pool, const char *exe, const char *const *env, tr__proc_exit_fn fn,
                   void *ctx, tr__proc **out) {
    *out = NULL;
    if (!exe || !*exe) return tr__err(TR_EINVAL, "spawn: no executable");
    size_t n_env = 0, n_add = 0;
    while (environ[n_env])
        n_env++;
    while (env && env[n_add])
        n_add++;
    char **envp = calloc(n_env + n_add + 1, sizeof *envp);
    tr__proc *p = calloc(1, sizeof *p);
    if (!envp || !p) {
        free(envp);
        free(p);
        return tr__err(TR_ENOMEM, "spawn");
    }
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++) {
        if (strncmp(environ[i], "TROUPE_", 7) == 0 &&
            strncmp(environ[i], "TROUPE_LOG_LEVEL=", 17) != 0)
            continue;
        /* a variable the process is given replaces the node's own (getenv would find the
         * first of two: the node's CUDA_VISIBLE_DEVICES, not the actor's) */
        const char *eq = strchr(environ[i], '=');
        size_t name = eq ? (size_t)(eq - environ[i]) + 1 : strlen(environ[i]);
        int replaced = 0;
        for (size_t j = 0; j < n_add && !replaced; j++)
            replaced = strncmp(environ[i], env[j], name) == 0;
        if (!replaced) envp[k++] = environ[i];
    }
    for (size_t i = 0; i < n_add; i++)
        envp[k++] = (char *)env[i];
    envp[k] = NULL;

    /* a command: argv joined by TR__ARG_SEP (core/config.h) */
    char *cmd = strdup(exe), *args[TR__MAX_ARGS + 1];
    if (!cmd || tr__command_split(cmd, args) == 0) {
        free(cmd);
        free(envp);
        free(p);
        return cmd ? tr__err(TR_EINVAL, "spawn: no executable") : tr__err(TR_ENOMEM, "spawn");
    }
    uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
                                     {.flags = UV_INHERIT_FD, .data.fd = 1},
                                     {.flags = UV_INHERIT_FD, .data.fd = 2}};
    uv_process_options_t o;
    memset(&o, 0, sizeof o);
    o.exit_cb = on_exit_cb;
    o.file = args[0];
    o.args = args;
    o.env = envp;
    o.stdio = stdio;
    o.stdio_count = 3;
    p->h.data = p;
    p->pool = pool;
    p->fn = fn;
    p->ctx = ctx;
    int r = uv_spawn(pool->loop, &p->h, &o);
    free(envp);
    if (r) {
        /* uv_spawn initialised the handle even on failure: it must be closed. */
        uv_close((uv_handle_t *)&p->h, on_closed);
        int rc = tr__err(TR_EIO, "spawn '%s': %s", args[0], uv_strerror(r));
        free(cmd);
        return rc;
    }
    pool->live++;
    TR_LOG_DEBUG("POOL-SPAWN", "pid %d: %s", p->h.pid, args[0]);
    free(cmd);
    *out = p;
    return 0;
}

pid_t tr__proc_pid(const tr__proc *p) {
    return p->h.pid;
}

void tr__proc_kill(tr__proc *p, int sig) {
    if (p && !p->exited) uv_process_kill(&p->h, sig);
}

void tr__proc_detach(tr__proc *p) {
    if (!p || p->exited) return;
    p->fn = NULL;
    p->exited = 1;
    p->pool->live--;
    uv_close((uv_handle_t *)&p->h, on_closed);
}
