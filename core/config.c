/* core/config.c - tr_config and the TROUPE_* environment. */
#include "core/config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/abi.h"
#include "core/codec.h"
#include "core/frame.h"
#include "core/log.h"
#include "core/status.h"

void tr__env_read(tr__env *e) {
    memset(e, 0, sizeof *e);
    const char *role = getenv("TROUPE_ROLE");
    e->role = TR__ROLE_DRIVER;
    if (role && strcmp(role, "node") == 0) e->role = TR__ROLE_NODE;
    if (role && strcmp(role, "worker") == 0) e->role = TR__ROLE_WORKER;
    e->node_path = getenv("TROUPE_NODE");
    e->actor_hex = getenv("TROUPE_ACTOR");
    e->node_config = getenv("TROUPE_NODE_CONFIG");
    const char *fd = getenv("TROUPE_READY_FD");
    e->ready_fd = fd ? atoi(fd) : -1;
    const char *sa = getenv("TROUPE_STANDALONE");
    e->standalone = sa && strcmp(sa, "1") == 0;
    e->cpus = getenv("TROUPE_CPUS");
    e->log_level = tr__log_parse_level(getenv("TROUPE_LOG_LEVEL"));
    e->command = getenv("TROUPE_COMMAND");
    e->cluster_token = getenv("TROUPE_CLUSTER_TOKEN");
    const char *owner = getenv("TROUPE_OWNER");
    e->owner_pid = owner ? atoi(owner) : 0;
}

static void config_defaults(tr_config *c) {
    memset(c, 0, sizeof *c);
    c->num_cpus = -1;
    c->num_gpus = -1; /* as many as the NVIDIA driver lists */
    c->log_level = -1;
    c->max_msg = TR__DEFAULT_MAX_MSG;
    c->worker_start_timeout_ms = 30000;
    c->cluster_port = -1;
}

int tr__config_create(tr_config **out) {
    if (!out) return tr__err(TR_EINVAL, "tr_config_create: out is NULL");
    *out = NULL;
    tr_config *c = malloc(sizeof *c);
    if (!c) return tr__err(TR_ENOMEM, "tr_config_create");
    config_defaults(c);
    *out = c;
    return 0;
}

void tr__config_destroy(tr_config *cfg) {
    if (!cfg) return;
    free(cfg->address);
    free(cfg->tmpdir);
    free(cfg->spill_dir);
    free(cfg->cluster_bind);
    free(cfg->cluster_token);
    free(cfg->cluster_head);
    free(cfg->cluster_tls_cert);
    free(cfg->cluster_tls_key);
    free(cfg->cluster_tls_ca);
    free(cfg->worker_command);
    free(cfg->worker_path);
    for (size_t i = 0; i < cfg->n_classes; i++)
        free((char *)cfg->classes[i].name);
    free(cfg->classes);
    free(cfg);
}

static int parse_num(const char *key, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end != '\0' || errno || !(d >= lo && d <= hi))
        return tr__err(TR_EINVAL, "config '%s': '%s' is not a number in [%g, %g]", key, v, lo, hi);
    *out = d;
    return 0;
}

static int set_str(char **slot, const char *v) {
    char *s = strdup(v);
    if (!s) return tr__err(TR_ENOMEM, "config string");
    free(*slot);
    *slot = s;
    return 0;
}

/* An executable's absolute path into out: name as given when it has a '/', else the first
 * on PATH. Returns 0 or -1 (errno). */
static int find_exe(const char *name, char *out) {
    if (strchr(name, '/')) {
        if (!realpath(name, out)) return -1;
        return access(out, X_OK);
    }
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        char cand[PATH_MAX];
        if (n > 0 &&
            (size_t)snprintf(cand, sizeof cand, "%.*s/%s", (int)n, p, name) < sizeof cand &&
            access(cand, X_OK) == 0 && realpath(cand, out))
            return 0;
        p += n + (p[n] == ':');
    }
    errno = ENOENT;
    return -1;
}

/* "worker_command": words separated by spaces or tabs (no quoting), argv[0] an executable
 * (a path, or a name on PATH). */
static int set_command(tr_config *cfg, const char *value) {
    if (value[0] == '\0') { /* back to this executable */
        free(cfg->worker_command);
        cfg->worker_command = NULL;
        return 0;
    }
    char copy[4096], exe[PATH_MAX], joined[4096 + PATH_MAX];
    if (strlen(value) >= sizeof copy)
        return tr__err(TR_EINVAL, "config 'worker_command': longer than %zu bytes",
                       sizeof copy - 1);
    snprintf(copy, sizeof copy, "%s", value);
    char *words[TR__MAX_ARGS + 1], *save = NULL;
    int n = 0;
    for (char *w = strtok_r(copy, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
        if (n == TR__MAX_ARGS)
            return tr__err(TR_EINVAL, "config 'worker_command': more than %d words", TR__MAX_ARGS);
        if (strchr(w, TR__ARG_SEP))
            return tr__err(TR_EINVAL, "config 'worker_command': a control character in '%s'", w);
        words[n++] = w;
    }
    if (n == 0) return tr__err(TR_EINVAL, "config 'worker_command': no command");
    if (find_exe(words[0], exe) != 0)
        return tr__err(TR_EINVAL, "config 'worker_command': '%s' is not an executable (%s)",
                       words[0], strerror(errno));
    size_t k = (size_t)snprintf(joined, sizeof joined, "%s", exe);
    for (int i = 1; i < n && k < sizeof joined; i++)
        k += (size_t)snprintf(joined + k, sizeof joined - k, "%c%s", TR__ARG_SEP, words[i]);
    if (k >= sizeof joined) return tr__err(TR_EINVAL, "config 'worker_command': too long");
    return set_str(&cfg->worker_command, joined);
}

int tr__config_find_worker(char out[PATH_MAX]) {
    char *worker = out;
    worker[0] = '\0';
    Dl_info info;
    char self[PATH_MAX];
    if (dladdr((void *)tr__config_set, &info) && info.dli_fname && realpath(info.dli_fname, self)) {
        char *slash = strrchr(self, '/');
        if (slash) *slash = '\0';
        /* installed (bin/ beside lib/), or the build tree (bazel-bin/api/cmd/) */
        const char *tries[] = {"%s/troupe-worker", "%s/../bin/troupe-worker",
                               "%s/cmd/troupe-worker"};
        for (size_t i = 0; i < sizeof tries / sizeof tries[0] && !worker[0]; i++) {
            char cand[PATH_MAX + 32];
            snprintf(cand, sizeof cand, tries[i], self);
            if (find_exe(cand, worker) != 0) worker[0] = '\0';
        }
    }
    if (!worker[0] && find_exe("troupe-worker", worker) != 0) {
        worker[0] = '\0';
        return tr__err(TR_ENOTFOUND, "no troupe-worker next to libtroupe or on PATH");
    }
    return 0;
}

/* "worker_library": workers run troupe-worker LIB, found next to this library (DIR/ or
 * DIR/../bin/) or on PATH. */
static int set_library(tr_config *cfg, const char *value) {
    char lib[PATH_MAX], worker[PATH_MAX] = "", cmd[2 * PATH_MAX + 2];
    if (!realpath(value, lib))
        return tr__err(TR_EINVAL, "config 'worker_library': %s: %s", value, strerror(errno));
    if (tr__config_find_worker(worker) != 0)
        return tr__err(TR_EINVAL,
                       "config 'worker_library': no troupe-worker next to libtroupe or on PATH "
                       "(set worker_command to 'PATH/troupe-worker %s' instead)",
                       lib);
    snprintf(cmd, sizeof cmd, "%s%c%s", worker, TR__ARG_SEP, lib);
    return set_str(&cfg->worker_command, cmd);
}

/* "worker_path": entries separated by ':', each an existing program or directory (kept as
 * its real path; a directory's with a trailing '/'). */
static int set_worker_path(tr_config *cfg, const char *value) {
    tr__buf b = TR__BUF_INIT;
    int rc = 0;
    for (const char *p = value; *p && !rc;) {
        size_t n = strcspn(p, ":");
        char entry[PATH_MAX], real[PATH_MAX];
        struct stat st;
        if (n == 0 || n >= sizeof entry) {
            p += n + (p[n] == ':');
            continue;
        }
        memcpy(entry, p, n);
        entry[n] = '\0';
        if (!realpath(entry, real) || stat(real, &st) != 0)
            rc = tr__err(TR_EINVAL, "config 'worker_path': %s: %s", entry, strerror(errno));
        else if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
            rc = tr__err(TR_EINVAL, "config 'worker_path': %s is no program or directory", entry);
        else if (strchr(real, ':'))
            rc = tr__err(TR_EINVAL, "config 'worker_path': %s has a ':' in its path", real);
        else {
            if (b.len) tr__buf_append(&b, ":", 1);
            tr__buf_append(&b, real, strlen(real));
            if (S_ISDIR(st.st_mode) && strcmp(real, "/") != 0) tr__buf_append(&b, "/", 1);
        }
        p += n + (p[n] == ':');
    }
    tr__buf_append(&b, "", 1);
    if (!rc && b.oom) rc = tr__err(TR_ENOMEM, "config 'worker_path'");
    if (!rc) {
        free(cfg->worker_path);
        cfg->worker_path = b.len > 1 ? strdup((const char *)b.data) : NULL;
        if (b.len > 1 && !cfg->worker_path) rc = tr__err(TR_ENOMEM, "config 'worker_path'");
    }
    tr__buf_free(&b);
    return rc;
}

/* "cluster_token": 1..255 printable ASCII bytes, no spaces (it travels in an HTTP/2 header
 * and in files a line each). */
static int set_token(tr_config *cfg, const char *value, const char *from) {
    size_t n = strlen(value);
    if (n == 0 || n > 255)
        return tr__err(TR_EINVAL, "%s: a cluster token of %zu bytes (want 1..255)", from, n);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)value[i] <= 0x20 || (unsigned char)value[i] >= 0x7f)
            return tr__err(TR_EINVAL,
                           "%s: a cluster token is printable ASCII without spaces (byte %zu is "
                           "not)",
                           from, i);
    return set_str(&cfg->cluster_token, value);
}

/* "cluster_token_file": the token is the file's first line (read now: a token never has
 * to appear on a command line, where every user can read it in /proc). */
static int set_token_file(tr_config *cfg, const char *path) {
    FILE *f = fopen(path, "re");
    if (!f) return tr__err_errno(errno, "config 'cluster_token_file': %s", path);
    char line[300] = "";
    int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    if (!got || !line[0])
        return tr__err(TR_EINVAL, "config 'cluster_token_file': %s has no token on its first line",
                       path);
    char what[PATH_MAX + 32];
    snprintf(what, sizeof what, "config 'cluster_token_file' %s", path);
    return set_token(cfg, line, what);
}

int tr__config_env_token(tr_config *cfg, const tr__env *env) {
    if (cfg->cluster_token || !env->cluster_token) return 0;
    return set_token(cfg, env->cluster_token, "TROUPE_CLUSTER_TOKEN");
}

int tr__config_set(tr_config *cfg, const char *key, const char *value) {
    if (!cfg || !key || !value) return tr__err(TR_EINVAL, "tr_config_set: NULL argument");
    double d;
    int rc;
    if (strcmp(key, "address") == 0) {
        if (*value == '\0') {
            free(cfg->address);
            cfg->address = NULL;
            return 0;
        }
        return set_str(&cfg->address, value);
    }
    if (strcmp(key, "tmpdir") == 0) return set_str(&cfg->tmpdir, value);
    if (strcmp(key, "worker_command") == 0) return set_command(cfg, value);
    if (strcmp(key, "worker_library") == 0) return set_library(cfg, value);
    if (strcmp(key, "worker_path") == 0) return set_worker_path(cfg, value);
    if (strcmp(key, "spill_dir") == 0) return set_str(&cfg->spill_dir, value);
    if (strcmp(key, "cluster_bind") == 0) return set_str(&cfg->cluster_bind, value);
    if (strcmp(key, "cluster_head") == 0) return set_str(&cfg->cluster_head, value);
    if (strcmp(key, "cluster_tls_cert") == 0) return set_str(&cfg->cluster_tls_cert, value);
    if (strcmp(key, "cluster_tls_key") == 0) return set_str(&cfg->cluster_tls_key, value);
    if (strcmp(key, "cluster_tls_ca") == 0) return set_str(&cfg->cluster_tls_ca, value);
    if (strcmp(key, "cluster_token") == 0) return set_token(cfg, value, "cluster_token");
    if (strcmp(key, "cluster_token_file") == 0) return set_token_file(cfg, value);
    if (strcmp(key, "cluster_client") == 0) {
        if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0)
            return tr__err(TR_EINVAL, "config 'cluster_client': '%s' (want 0 or 1)", value);
        cfg->cluster_client = value[0] == '1';
        return 0;
    }
    if (strcmp(key, "cluster_port") == 0) {
        if ((rc = parse_num(key, value, -1, 65535, &d))) return rc;
        if (d != (int)d)
            return tr__err(TR_EINVAL, "config 'cluster_port': '%s' is not whole", value);
        cfg->cluster_port = (int)d;
        return 0;
    }
    if (strcmp(key, "cpu_binding") == 0) {
        if (strcmp(value, "cores") == 0 || strcmp(value, "none") == 0) {
            cfg->cpu_binding = value[0] == 'c' ? TR__BIND_CORES : TR__BIND_NONE;
            return 0;
        }
        return tr__err(TR_EINVAL, "config: cpu_binding is 'cores' or 'none', not '%s'", value);
    }
    if (strcmp(key, "num_cpus") == 0) {
        if ((rc = parse_num(key, value, 0, 1e6, &d))) return rc;
        cfg->num_cpus = d;
        return 0;
    }
    if (strcmp(key, "num_gpus") == 0) {
        if ((rc = parse_num(key, value, 0, 1e6, &d))) return rc;
        cfg->num_gpus = d;
        return 0;
    }
    if (strcmp(key, "resources") == 0) {
        tr__res r = {0};
        if ((rc = tr__res_parse(&r, value))) return rc;
        cfg->resources = r;
        return 0;
    }
    if (strcmp(key, "log_level") == 0) {
        int l = tr__log_parse_level(value);
        if (l < 0)
            return tr__err(TR_EINVAL, "config 'log_level': '%s' is not error|warn|info|debug",
                           value);
        cfg->log_level = l;
        return 0;
    }
    if (strcmp(key, "max_message_bytes") == 0) {
        if ((rc = parse_num(key, value, 4096, 4294967295.0, &d))) return rc;
        cfg->max_msg = (size_t)d;
        return 0;
    }
    if (strcmp(key, "object_store_bytes") == 0) {
        if ((rc = parse_num(key, value, 1 << 20, 1ull << 42, &d))) return rc;
        cfg->store_bytes = (size_t)d;
        return 0;
    }
    if (strcmp(key, "worker_start_timeout_ms") == 0) {
        if ((rc = parse_num(key, value, 1, 3600e3, &d))) return rc;
        cfg->worker_start_timeout_ms = (int)d;
        return 0;
    }
    return tr__err(TR_EINVAL, "config: unknown key '%s'", key);
}

void tr__actor_class_init(tr_actor_class *cls) {
    if (!cls) return;
    memset(cls, 0, sizeof *cls);
    cls->struct_size = sizeof *cls;
}

const tr_actor_class *tr__config_find_class(const tr_config *cfg, const char *name) {
    for (size_t i = 0; i < cfg->n_classes; i++)
        if (strcmp(cfg->classes[i].name, name) == 0) return &cfg->classes[i];
    return NULL;
}

int tr__config_add_class(tr_config *cfg, const tr_actor_class *given) {
    if (!cfg || !given) return tr__err(TR_EINVAL, "tr_config_add_class: NULL argument");
    tr_actor_class c, *cls = &c;
    tr__actor_class_init(cls);
    int rc = tr__struct_in(cls, sizeof *cls, given, TR__SIZE_UPTO(tr_actor_class, n_methods),
                           "tr_config_add_class");
    if (rc) return rc;
    if (!cls->name || !*cls->name || strlen(cls->name) > 255)
        return tr__err(TR_EINVAL, "tr_config_add_class: class needs a name of 1..255 bytes");
    if (cls->n_methods && !cls->methods)
        return tr__err(TR_EINVAL, "class '%s': n_methods without methods", cls->name);
    for (size_t i = 0; i < cls->n_methods; i++)
        if (!cls->methods[i].name || !cls->methods[i].fn)
            return tr__err(TR_EINVAL, "class '%s': method %zu has no name or function", cls->name,
                           i);
    if (tr__config_find_class(cfg, cls->name))
        return tr__err(TR_EEXIST, "class '%s' is already registered", cls->name);
    tr_actor_class *v = realloc(cfg->classes, (cfg->n_classes + 1) * sizeof *v);
    if (!v) return tr__err(TR_ENOMEM, "tr_config_add_class");
    cfg->classes = v;
    char *name = strdup(cls->name);
    if (!name) return tr__err(TR_ENOMEM, "tr_config_add_class");
    v[cfg->n_classes] = *cls;
    v[cfg->n_classes].name = name;
    cfg->n_classes++;
    return 0;
}

int tr__config_copy(const tr_config *src, tr_config **out) {
    tr_config *c;
    int rc = tr__config_create(&c);
    if (rc) return rc;
    if (src) {
        tr_config tmp = *src;
        tmp.address = tmp.tmpdir = tmp.spill_dir = NULL;
        tmp.cluster_bind = tmp.cluster_token = tmp.cluster_head = NULL;
        tmp.cluster_tls_cert = tmp.cluster_tls_key = tmp.cluster_tls_ca = NULL;
        tmp.worker_command = tmp.worker_path = NULL;
        tmp.classes = NULL;
        tmp.n_classes = 0;
        *c = tmp;
        if ((src->address && set_str(&c->address, src->address)) ||
            (src->tmpdir && set_str(&c->tmpdir, src->tmpdir)) ||
            (src->spill_dir && set_str(&c->spill_dir, src->spill_dir)) ||
            (src->cluster_bind && set_str(&c->cluster_bind, src->cluster_bind)) ||
            (src->cluster_token && set_str(&c->cluster_token, src->cluster_token)) ||
            (src->cluster_head && set_str(&c->cluster_head, src->cluster_head)) ||
            (src->cluster_tls_cert && set_str(&c->cluster_tls_cert, src->cluster_tls_cert)) ||
            (src->cluster_tls_key && set_str(&c->cluster_tls_key, src->cluster_tls_key)) ||
            (src->cluster_tls_ca && set_str(&c->cluster_tls_ca, src->cluster_tls_ca)) ||
            (src->worker_command && set_str(&c->worker_command, src->worker_command)) ||
            (src->worker_path && set_str(&c->worker_path, src->worker_path)))
            goto oom;
        for (size_t i = 0; i < src->n_classes; i++)
            if (tr__config_add_class(c, &src->classes[i])) goto oom;
    }
    *out = c;
    return 0;
oom:
    tr__config_destroy(c);
    return tr__err(TR_ENOMEM, "copying the configuration");
}

static pthread_mutex_t command_mu = PTHREAD_MUTEX_INITIALIZER;
static char *command_noted;

void tr__command_note(const tr_config *cfg) {
    char *c = cfg && cfg->worker_command ? strdup(cfg->worker_command) : NULL;
    pthread_mutex_lock(&command_mu);
    free(command_noted);
    command_noted = c;
    pthread_mutex_unlock(&command_mu);
}

int tr__command_self(char *out, size_t cap) {
    int rc = 0;
    pthread_mutex_lock(&command_mu);
    const char *role = getenv("TROUPE_ROLE"); /* (a worker's own: not a driver's it spawned) */
    const char *c = command_noted                         ? command_noted
                    : role && strcmp(role, "worker") == 0 ? getenv("TROUPE_COMMAND")
                                                          : NULL;
    if (c && *c) {
        if (strlen(c) >= cap)
            rc = tr__err(TR_EINVAL, "the worker command is too long");
        else
            memcpy(out, c, strlen(c) + 1);
    } else {
        ssize_t n = readlink("/proc/self/exe", out, cap - 1);
        if (n < 0)
            rc = tr__err_errno(errno, "readlink /proc/self/exe");
        else
            out[n] = '\0';
    }
    pthread_mutex_unlock(&command_mu);
    return rc;
}

int tr__command_running(char *out, size_t cap) {
    FILE *f = fopen("/proc/self/cmdline", "re");
    size_t n = f ? fread(out, 1, cap, f) : 0;
    int e = errno;
    if (f) fclose(f);
    if (n == 0) return tr__err_errno(f ? EIO : e, "reading /proc/self/cmdline");
    if (n == cap) return tr__err(TR_EINVAL, "this process's command is too long");
    while (n > 0 && out[n - 1] == '\0')
        n--;
    for (size_t i = 0; i < n; i++)
        if (out[i] == '\0') out[i] = TR__ARG_SEP;
    out[n] = '\0';
    return 0;
}

int tr__command_split(char *cmd, char **argv) {
    int n = 0;
    for (char *p = cmd; p && *p && n < TR__MAX_ARGS;) {
        argv[n++] = p;
        p = strchr(p, TR__ARG_SEP);
        if (p) *p++ = '\0';
    }
    argv[n] = NULL;
    return n;
}

int tr__config_log_level(const tr_config *cfg, const tr__env *env) {
    if (cfg && cfg->log_level >= 0) return cfg->log_level;
    if (env && env->log_level >= 0) return env->log_level;
    return TR__LOG_WARN;
}

size_t tr__config_store_bytes(const tr_config *cfg) {
    if (cfg && cfg->store_bytes) return cfg->store_bytes;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t ram = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)4 << 30;
    size_t want = ram / 10 * 3;
    return want > ((size_t)1 << 30) ? (size_t)1 << 30 : want;
}

int tr__config_encode_node(const tr_config *cfg, tr__buf *out) {
    char res[1024];
    tr__res_format(&cfg->resources, res, sizeof res);
    tr__enc_map(out, 19);
    tr__enc_str(out, "worker_path");
    tr__enc_str(out, cfg->worker_path); /* nil when unset */
    tr__enc_str(out, "cluster_port");
    tr__enc_int(out, cfg->cluster_port);
    tr__enc_str(out, "cluster_client");
    tr__enc_int(out, cfg->cluster_client);
    tr__enc_str(out, "cluster_bind");
    tr__enc_str(out, cfg->cluster_bind); /* nil when unset */
    tr__enc_str(out, "cluster_token");
    tr__enc_str(out, cfg->cluster_token);
    tr__enc_str(out, "cluster_head");
    tr__enc_str(out, cfg->cluster_head);
    tr__enc_str(out, "cluster_tls_cert");
    tr__enc_str(out, cfg->cluster_tls_cert);
    tr__enc_str(out, "cluster_tls_key");
    tr__enc_str(out, cfg->cluster_tls_key);
    tr__enc_str(out, "cluster_tls_ca");
    tr__enc_str(out, cfg->cluster_tls_ca);
    tr__enc_str(out, "cpu_binding");
    tr__enc_int(out, cfg->cpu_binding);
    tr__enc_str(out, "tmpdir");
    tr__enc_str(out, cfg->tmpdir); /* nil when unset */
    tr__enc_str(out, "spill_dir");
    tr__enc_str(out, cfg->spill_dir); /* nil when unset */
    tr__enc_str(out, "store_bytes");
    tr__enc_uint(out, cfg->store_bytes);
    tr__enc_str(out, "num_cpus");
    tr__enc_double(out, cfg->num_cpus);
    tr__enc_str(out, "num_gpus");
    tr__enc_double(out, cfg->num_gpus);
    tr__enc_str(out, "resources");
    tr__enc_str(out, res);
    tr__enc_str(out, "max_msg");
    tr__enc_uint(out, cfg->max_msg);
    tr__enc_str(out, "start_ms");
    tr__enc_int(out, cfg->worker_start_timeout_ms);
    tr__enc_str(out, "log_level");
    tr__enc_int(out, cfg->log_level);
    return out->oom ? TR_ENOMEM : 0;
}

/* An optional path: a string replaces *out; nil or absent leaves it. */
static int decode_path(const tr__obj *map, const char *key, char **out) {
    if (tr__obj_type(tr__obj_get(map, key)) != TR__T_STR) return 0;
    free(*out);
    *out = NULL;
    return tr__get_strdup(map, key, out);
}

int tr__config_decode_node(const void *data, size_t len, tr_config *cfg) {
    tr__dec d;
    int rc = tr__dec_init(&d, data, len);
    if (rc) return rc;
    uint64_t max_msg;
    int64_t start_ms, lvl;
    char *res = NULL;
    if ((rc = tr__get_double(d.root, "num_cpus", &cfg->num_cpus)) ||
        (rc = tr__get_double(d.root, "num_gpus", &cfg->num_gpus)) ||
        (rc = tr__get_uint(d.root, "max_msg", &max_msg)) ||
        (rc = tr__get_int(d.root, "start_ms", &start_ms)) ||
        (rc = tr__get_int(d.root, "log_level", &lvl)) ||
        (rc = tr__get_strdup(d.root, "resources", &res)))
        goto out;
    uint64_t store = 0;
    if ((rc = tr__get_uint(d.root, "store_bytes", &store))) goto out;
    cfg->store_bytes = (size_t)store;
    int64_t binding = TR__BIND_CORES;
    if (tr__obj_get(d.root, "cpu_binding") && (rc = tr__get_int(d.root, "cpu_binding", &binding)))
        goto out;
    if (binding != TR__BIND_CORES && binding != TR__BIND_NONE) {
        rc = tr__err(TR_EPROTO, "node config: cpu_binding %lld", (long long)binding);
        goto out;
    }
    cfg->cpu_binding = (int)binding;
    if ((rc = decode_path(d.root, "spill_dir", &cfg->spill_dir)) ||
        (rc = decode_path(d.root, "tmpdir", &cfg->tmpdir)) ||
        (rc = decode_path(d.root, "cluster_bind", &cfg->cluster_bind)) ||
        (rc = decode_path(d.root, "cluster_token", &cfg->cluster_token)) ||
        (rc = decode_path(d.root, "cluster_head", &cfg->cluster_head)) ||
        (rc = decode_path(d.root, "cluster_tls_cert", &cfg->cluster_tls_cert)) ||
        (rc = decode_path(d.root, "cluster_tls_key", &cfg->cluster_tls_key)) ||
        (rc = decode_path(d.root, "cluster_tls_ca", &cfg->cluster_tls_ca)) ||
        (rc = decode_path(d.root, "worker_path", &cfg->worker_path)))
        goto out;
    int64_t cport = -1;
    if (tr__obj_get(d.root, "cluster_port") && (rc = tr__get_int(d.root, "cluster_port", &cport)))
        goto out;
    if (cport < -1 || cport > 65535) {
        rc = tr__err(TR_EPROTO, "node config: cluster_port %lld", (long long)cport);
        goto out;
    }
    cfg->cluster_port = (int)cport;
    int64_t client = 0;
    if (tr__obj_get(d.root, "cluster_client") &&
        (rc = tr__get_int(d.root, "cluster_client", &client)))
        goto out;
    cfg->cluster_client = client != 0;
    cfg->max_msg = max_msg;
    cfg->worker_start_timeout_ms = (int)start_ms;
    cfg->log_level = (int)lvl;
    memset(&cfg->resources, 0, sizeof cfg->resources);
    rc = tr__res_parse(&cfg->resources, res);
out:
    free(res);
    tr__dec_free(&d);
    return rc;
}
