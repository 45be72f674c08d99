/*
 * core/plugin_loader.c: see plugin_loader.h for the search order and the
 * checks. Every refusal is built by refuse() so each one is a single line
 * that names the file and both ABI versions.
 * Not for: host tables (host.c) or running plugins.
 */
#define _GNU_SOURCE
#include "plugin_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "host.h"
#include "log.h"

#ifndef PAGODA_PLUGIN_BUILD_DIR
#define PAGODA_PLUGIN_BUILD_DIR ""
#endif
#ifndef PAGODA_PLUGIN_INSTALL_DIR
#define PAGODA_PLUGIN_INSTALL_DIR ""
#endif
#ifndef PAGODA_BUILD_ROOT
#define PAGODA_BUILD_ROOT ""
#endif
#ifndef PAGODA_PLUGIN_RELATIVE_DIR
#define PAGODA_PLUGIN_RELATIVE_DIR ""
#endif

/* The ABI 1.0 size of a struct: up to and including its last 1.0 slot.
 * Slots added in later minors are appended after these, so these sizes
 * never change. */
#define SIZE_1_0(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))
#define DESC_SIZE_1_0 SIZE_1_0(pagoda_plugin_desc, ops)

typedef struct slot {
    size_t off;
    const char *name;
} slot;
#define SLOT(type, f) { offsetof(type, f), #f }

static const slot backend_required[] = {
    SLOT(pagoda_backend_ops, info), SLOT(pagoda_backend_ops, buffer_alloc),
    SLOT(pagoda_backend_ops, buffer_free), SLOT(pagoda_backend_ops, upload),
    SLOT(pagoda_backend_ops, download), SLOT(pagoda_backend_ops, get_rows),
    SLOT(pagoda_backend_ops, rms_norm), SLOT(pagoda_backend_ops, matmul),
    SLOT(pagoda_backend_ops, rope), SLOT(pagoda_backend_ops, kv_write),
    SLOT(pagoda_backend_ops, attention), SLOT(pagoda_backend_ops, swiglu),
    SLOT(pagoda_backend_ops, add), { 0, NULL },
};
static const slot kvcache_required[] = {
    SLOT(pagoda_kvcache_ops, init), SLOT(pagoda_kvcache_ops, admit),
    SLOT(pagoda_kvcache_ops, grow), SLOT(pagoda_kvcache_ops, block_table),
    SLOT(pagoda_kvcache_ops, release), SLOT(pagoda_kvcache_ops, stats), { 0, NULL },
};
static const slot scheduler_required[] = {
    SLOT(pagoda_scheduler_ops, limits), SLOT(pagoda_scheduler_ops, schedule), { 0, NULL },
};
static const slot frontend_required[] = {
    SLOT(pagoda_frontend_ops, run), SLOT(pagoda_frontend_ops, stop), { 0, NULL },
};
static const slot constraint_required[] = {
    SLOT(pagoda_constraint_ops, set_vocab), SLOT(pagoda_constraint_ops, compile),
    SLOT(pagoda_constraint_ops, compiled_free), SLOT(pagoda_constraint_ops, matcher_new),
    SLOT(pagoda_constraint_ops, matcher_free), SLOT(pagoda_constraint_ops, fill_mask),
    SLOT(pagoda_constraint_ops, advance), SLOT(pagoda_constraint_ops, is_complete), { 0, NULL },
};
static const slot comm_required[] = {
    SLOT(pagoda_comm_ops, info), SLOT(pagoda_comm_ops, all_reduce), SLOT(pagoda_comm_ops, broadcast),
    SLOT(pagoda_comm_ops, gather), SLOT(pagoda_comm_ops, all_gather), SLOT(pagoda_comm_ops, barrier),
    { 0, NULL },
};

typedef struct kind_info {
    const char *ops_type;
    size_t size_1_0; /* ABI 1.0 size of the ops table (for a later kind: its first size) */
    size_t size_now; /* this pagoda's sizeof */
    const slot *required;
    uint32_t since_minor; /* the ABI minor that added the kind */
} kind_info;

static const kind_info *kind_info_of(int kind)
{
    static const kind_info k[] = {
        { "pagoda_backend_ops", SIZE_1_0(pagoda_backend_ops, synchronize),
          sizeof(pagoda_backend_ops), backend_required, 0 },
        { "pagoda_scheduler_ops", SIZE_1_0(pagoda_scheduler_ops, on_finish),
          sizeof(pagoda_scheduler_ops), scheduler_required, 0 },
        { "pagoda_kvcache_ops", SIZE_1_0(pagoda_kvcache_ops, reset_cache),
          sizeof(pagoda_kvcache_ops), kvcache_required, 0 },
        { "pagoda_frontend_ops", SIZE_1_0(pagoda_frontend_ops, stop),
          sizeof(pagoda_frontend_ops), frontend_required, 0 },
        /* added in minor 1: its first table ends at is_complete */
        { "pagoda_constraint_ops", SIZE_1_0(pagoda_constraint_ops, is_complete),
          sizeof(pagoda_constraint_ops), constraint_required, 1 },
        /* added in minor 4: its first table ends at interrupt */
        { "pagoda_comm_ops", SIZE_1_0(pagoda_comm_ops, interrupt), sizeof(pagoda_comm_ops),
          comm_required, 4 },
    };
    if (kind < PAGODA_KIND_BACKEND || kind > PAGODA_KIND_COMM) return NULL;
    return &k[kind - 1];
}

int pagoda_plugin_kind_from_name(const char *word)
{
    for (int k = PAGODA_KIND_BACKEND; k <= PAGODA_KIND_COMM; k++)
        if (word && strcmp(word, pagoda_kind_name(k)) == 0) return k;
    return 0;
}

static void set_err(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ search folders */

static char g_build_dir[4096] = PAGODA_PLUGIN_BUILD_DIR;
static char g_install_dir[4096] = PAGODA_PLUGIN_INSTALL_DIR;
static char g_env_copy[8192];
static bool g_dirs_overridden;  /* set_builtin_dirs was called: search exactly those */
static char g_exe_plugin_dir[4096];

/* Where the running program lives decides two folders. An installed
 * program (not under the build tree PAGODA_BUILD_ROOT) skips the build
 * tree's folder, so it never picks up stale plugins from wherever it was
 * built; and it also searches <its bin>/PAGODA_PLUGIN_RELATIVE_DIR, so a
 * prefix installed with `cmake --install --prefix P` (other than the one
 * configured) still finds its own plugins. */
static bool exe_in_build_tree(const char *exe)
{
    char root[4096];
    if (!*exe || !*PAGODA_BUILD_ROOT || !realpath(PAGODA_BUILD_ROOT, root)) return true;
    size_t l = strlen(root);
    return strncmp(exe, root, l) == 0 && exe[l] == '/';
}

static void exe_dirs(bool *in_build, const char **rel_dir)
{
    char exe[4096] = "";
    if (!realpath("/proc/self/exe", exe)) exe[0] = '\0';
    *in_build = exe_in_build_tree(exe);
    *rel_dir = NULL;
    char *slash = strrchr(exe, '/');
    if (!slash || !*PAGODA_PLUGIN_RELATIVE_DIR) return;
    *slash = '\0';
    char cand[8192], rc[4096], ri[4096];
    snprintf(cand, sizeof cand, "%s/%s", exe, PAGODA_PLUGIN_RELATIVE_DIR);
    if (!realpath(cand, rc)) return;                       /* no such folder */
    if (realpath(g_install_dir, ri) && strcmp(rc, ri) == 0) return; /* the same one */
    snprintf(g_exe_plugin_dir, sizeof g_exe_plugin_dir, "%s", rc);
    *rel_dir = g_exe_plugin_dir;
}

void pagoda_plugin_set_builtin_dirs(const char *build_dir, const char *install_dir)
{
    g_dirs_overridden = build_dir || install_dir;
    snprintf(g_build_dir, sizeof g_build_dir, "%s", build_dir ? build_dir : PAGODA_PLUGIN_BUILD_DIR);
    snprintf(g_install_dir, sizeof g_install_dir, "%s",
             install_dir ? install_dir : PAGODA_PLUGIN_INSTALL_DIR);
}

/* Also reports which source each folder came from, for `pagoda plugins`. */
static size_t search_dirs_src(const char **dirs, const char **src, size_t cap)
{
    size_t n = 0;
    const char *env = getenv("PAGODA_PLUGIN_PATH");
    snprintf(g_env_copy, sizeof g_env_copy, "%s", env ? env : "");
    char *save = NULL;
    for (char *t = strtok_r(g_env_copy, ":", &save); t && n < cap; t = strtok_r(NULL, ":", &save)) {
        if (!*t) continue;
        dirs[n] = t;
        if (src) src[n] = "PAGODA_PLUGIN_PATH";
        n++;
    }
    bool in_build = true;
    const char *rel_dir = NULL;
    if (!g_dirs_overridden) exe_dirs(&in_build, &rel_dir);
    if (*g_build_dir && in_build && n < cap) {
        if (src) src[n] = "build tree";
        dirs[n++] = g_build_dir;
    }
    if (rel_dir && n < cap) {
        if (src) src[n] = "installed, next to the program";
        dirs[n++] = rel_dir;
    }
    if (*g_install_dir && n < cap) {
        if (src) src[n] = "installed";
        dirs[n++] = g_install_dir;
    }
    return n;
}

size_t pagoda_plugin_search_dirs(const char **dirs, size_t cap)
{
    return search_dirs_src(dirs, NULL, cap);
}

static bool is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* What a path that exists but is no regular file is, for a message; NULL
 * when it does not exist (or is a file). */
static const char *not_file_kind(const char *p)
{
    struct stat sb;
    if (stat(p, &sb) != 0 || S_ISREG(sb.st_mode)) return NULL;
    if (S_ISDIR(sb.st_mode)) return "a directory";
    if (S_ISCHR(sb.st_mode)) return "a character device";
    if (S_ISBLK(sb.st_mode)) return "a block device";
    if (S_ISFIFO(sb.st_mode)) return "a named pipe";
    if (S_ISSOCK(sb.st_mode)) return "a socket";
    return "a special file";
}

static bool in_list(const char *list, const char *nm)
{
    size_t l = strlen(nm);
    for (const char *p = list; *p;) {
        const char *c = strstr(p, ", ");
        size_t pl = c ? (size_t)(c - p) : strlen(p);
        if (pl == l && strncmp(p, nm, l) == 0) return true;
        if (!c) break;
        p = c + 2;
    }
    return false;
}

/* Names of the <kind>-*.so files in the search folders, comma-separated. */
static void list_names(int kind, const char **dirs, size_t nd, char *out, size_t n,
                       const char *want, const char **closest)
{
    static char best[256];
    size_t bd = (size_t)-1;
    out[0] = '\0';
    *closest = NULL;
    const char *kn = pagoda_kind_name(kind);
    size_t kl = strlen(kn);
    for (size_t i = 0; i < nd; i++) {
        DIR *d = opendir(dirs[i]);
        if (!d) continue;
        struct dirent *de;
        while ((de = readdir(d))) {
            const char *f = de->d_name;
            size_t fl = strlen(f);
            if (fl <= kl + 4 || strncmp(f, kn, kl) != 0 || f[kl] != '-' ||
                strcmp(f + fl - 3, ".so") != 0)
                continue;
            char nm[256];
            snprintf(nm, sizeof nm, "%.*s", (int)(fl - kl - 4), f + kl + 1);
            if (in_list(out, nm)) continue; /* a name may sit in several folders */
            size_t l = strlen(out);
            snprintf(out + l, n - l, "%s%s", l ? ", " : "", nm);
            size_t dd = pagoda_levenshtein(want, nm);
            if (dd < bd) {
                bd = dd;
                snprintf(best, sizeof best, "%s", nm);
                *closest = best;
            }
        }
        closedir(d);
    }
}

const char *pagoda_plugin_closest(int kind, const char *name, char *names, size_t n)
{
    const char *dirs[64];
    size_t nd = pagoda_plugin_search_dirs(dirs, 64);
    const char *closest = NULL;
    list_names(kind, dirs, nd, names, n, name ? name : "", &closest);
    return closest;
}

int pagoda_plugin_find(const pagoda_config *cfg, int kind, const char *name, char *path,
                       size_t path_len, char *err, size_t err_len)
{
    const char *kn = pagoda_kind_name(kind);
    char section[128];
    snprintf(section, sizeof section, "%s.%s", kn, name ? name : "");
    const char *explicit_path = cfg ? pagoda_config_get(cfg, section, "path") : NULL;
    if (explicit_path) {
        if (!is_file(explicit_path)) {
            char where[4200] = "?";
            pagoda_config_where(cfg, section, "path", where, sizeof where);
            const char *what = not_file_kind(explicit_path);
            if (what) {
                set_err(err, err_len, "%s: [%s] path = %s: is %s, not a plugin file (a .so); give "
                        "the plugin's file or remove the key to search the plugin folders", where,
                        section, explicit_path, what);
                return PAGODA_ERR_INVALID;
            }
            set_err(err, err_len, "%s: [%s] path = %s: no such file; fix the path or remove the "
                                  "key to search the plugin folders", where, section, explicit_path);
            return PAGODA_ERR_NOT_FOUND;
        }
        snprintf(path, path_len, "%s", explicit_path);
        return PAGODA_OK;
    }
    const char *dirs[64];
    size_t nd = pagoda_plugin_search_dirs(dirs, 64);
    for (size_t i = 0; i < nd; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s-%s.so", dirs[i], kn, name);
        if (is_file(p)) {
            snprintf(path, path_len, "%s", p);
            return PAGODA_OK;
        }
    }
    char looked[2048] = "";
    for (size_t i = 0; i < nd; i++) {
        size_t l = strlen(looked);
        snprintf(looked + l, sizeof looked - l, "%s%s", i ? ", " : "", dirs[i]);
    }
    char found[2048];
    const char *closest;
    list_names(kind, dirs, nd, found, sizeof found, name ? name : "", &closest);
    if (closest)
        set_err(err, err_len, "no %s plugin '%s': looked for %s-%s.so in %s; %s plugins found: %s; "
                              "did you mean '%s'? (see `pagoda plugins`)",
                kn, name, kn, name, nd ? looked : "(no folders)", kn, found, closest);
    else
        set_err(err, err_len, "no %s plugin '%s': looked for %s-%s.so in %s and found no %s plugin "
                              "at all; build the plugins or set PAGODA_PLUGIN_PATH",
                kn, name, kn, name, nd ? looked : "(no folders)", kn);
    return PAGODA_ERR_NOT_FOUND;
}

/* ------------------------------------------------------------ loading */

static bool slot_null(const void *base, size_t off)
{
    void (*fn)(void);
    memcpy(&fn, (const char *)base + off, sizeof fn);
    return fn == NULL;
}

int pagoda_plugin_load_file(const char *path, int kind, const char *name, pagoda_plugin **out,
                            char *err, size_t err_len)
{
    const int HM = PAGODA_ABI_MAJOR, Hm = PAGODA_ABI_MINOR;
    int st = PAGODA_ERR_INVALID;
    *out = NULL;
    pagoda_plugin *p = calloc(1, sizeof *p);
    if (!p) {
        set_err(err, err_len, "out of memory");
        return PAGODA_ERR_NOMEM;
    }
    snprintf(p->path, sizeof p->path, "%s", path);

    dlerror();
    p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p->dl) {
        const char *e = dlerror();
        set_err(err, err_len, "plugin %s: cannot load (this pagoda is ABI %d.%d): %s: a plugin must "
                              "be a shared object for this machine with its libraries installed; "
                              "rebuild it or fix the path", path, HM, Hm, e ? e : "dlopen failed");
        goto fail;
    }
    pagoda_plugin_entry_fn entry;
    void *sym = dlsym(p->dl, PAGODA_PLUGIN_ENTRY_SYMBOL);
    if (!sym) {
        set_err(err, err_len, "plugin %s: no symbol %s (this pagoda is ABI %d.%d): not a pagoda "
                              "plugin; export the entry with PAGODA_PLUGIN(desc) from "
                              "<pagoda/plugin.h> and rebuild",
                path, PAGODA_PLUGIN_ENTRY_SYMBOL, HM, Hm);
        goto fail;
    }
    memcpy(&entry, &sym, sizeof entry); /* POSIX: object to function pointer */
    const pagoda_plugin_desc *d = entry(PAGODA_ABI_MAJOR, PAGODA_ABI_MINOR);
    if (!d) {
        set_err(err, err_len, "plugin %s: %s returned no descriptor for this pagoda (ABI %d.%d): the "
                              "plugin declined to load here; use a build of it made for ABI %d.%d",
                path, PAGODA_PLUGIN_ENTRY_SYMBOL, HM, Hm, HM, Hm);
        goto fail;
    }

    /* struct_size, abi_major and abi_minor lead every version of the
     * descriptor; without them nothing else can be read. */
    size_t ver_end = offsetof(pagoda_plugin_desc, abi_minor) + sizeof d->abi_minor;
    if (d->struct_size < ver_end) {
        set_err(err, err_len, "plugin %s (ABI unknown, this pagoda is ABI %d.%d): descriptor "
                              "struct_size %zu is smaller than ABI 1.0's %zu bytes: a descriptor "
                              "holds at least the ABI 1.0 fields; set struct_size = "
                              "sizeof(pagoda_plugin_desc) (PAGODA_DESC_HEADER) and rebuild",
                path, HM, Hm, d->struct_size, (size_t)DESC_SIZE_1_0);
        goto fail;
    }
    unsigned pM = d->abi_major, pm = d->abi_minor;
    if ((int)pM != HM) {
        set_err(err, err_len, "plugin %s: built for pagoda ABI %u.%u, this pagoda is ABI %d.%d: the "
                              "major version must match; rebuild the plugin against this pagoda's SDK",
                path, pM, pm, HM, Hm);
        goto fail;
    }
    if ((int)pm > Hm) {
        set_err(err, err_len, "plugin %s: built for pagoda ABI %u.%u, this pagoda is ABI %d.%d: the "
                              "plugin's minor version must not be newer than pagoda's; rebuild the "
                              "plugin against this pagoda's SDK or upgrade pagoda",
                path, pM, pm, HM, Hm);
        goto fail;
    }
    if (d->struct_size < DESC_SIZE_1_0) {
        set_err(err, err_len, "plugin %s (ABI %u.%u, this pagoda is ABI %d.%d): descriptor "
                              "struct_size %zu is smaller than ABI 1.0's %zu bytes: a descriptor "
                              "holds at least the ABI 1.0 fields; set struct_size = "
                              "sizeof(pagoda_plugin_desc) (PAGODA_DESC_HEADER) and rebuild",
                path, pM, pm, HM, Hm, d->struct_size, (size_t)DESC_SIZE_1_0);
        goto fail;
    }
    p->desc_size = (uint32_t)d->struct_size;
    memcpy(&p->desc, d, d->struct_size < sizeof p->desc ? d->struct_size : sizeof p->desc);
    p->desc.struct_size = sizeof p->desc;

    const kind_info *ki = kind_info_of(p->desc.kind);
    if (!ki) {
        set_err(err, err_len, "plugin %s (ABI %u.%u, this pagoda is ABI %d.%d): unknown kind %d: "
                              "kind must be backend (1), scheduler (2), kvcache (3), frontend (4), "
                              "constraint (5) or comm (6); fix the descriptor's kind and rebuild",
                path, pM, pm, HM, Hm, (int)p->desc.kind);
        goto fail;
    }
    const char *pk = pagoda_kind_name(p->desc.kind);
    if (pm < ki->since_minor) {
        set_err(err, err_len, "plugin %s (%s, ABI %u.%u, this pagoda is ABI %d.%d): the %s kind "
                              "was added in ABI %d.%u, so a %s plugin cannot be built for %u.%u; "
                              "rebuild it against this pagoda's SDK",
                path, pk, pM, pm, HM, Hm, pk, HM, ki->since_minor, pk, pM, pm);
        goto fail;
    }
    if (!p->desc.ops) {
        set_err(err, err_len, "plugin %s (%s, ABI %u.%u, this pagoda is ABI %d.%d): required slot "
                              "pagoda_plugin_desc.ops is NULL: every plugin has an ops table; point "
                              "ops at a %s and rebuild",
                path, pk, pM, pm, HM, Hm, ki->ops_type);
        goto fail;
    }
    size_t ops_size = *(const size_t *)p->desc.ops; /* every ops table starts with it */
    if (ops_size < ki->size_1_0) {
        set_err(err, err_len, "plugin %s (%s, ABI %u.%u, this pagoda is ABI %d.%d): %s struct_size "
                              "%zu is smaller than ABI %d.%u's %zu bytes: an ops table holds at least "
                              "the ABI %d.%u slots; set .struct_size = sizeof(%s) and rebuild",
                path, pk, pM, pm, HM, Hm, ki->ops_type, ops_size, HM, ki->since_minor,
                ki->size_1_0, HM, ki->since_minor, ki->ops_type);
        goto fail;
    }
    memcpy(&p->ops, p->desc.ops, ops_size < ki->size_now ? ops_size : ki->size_now);
    p->ops.struct_size = ki->size_now;

    if (kind && p->desc.kind != kind) {
        set_err(err, err_len, "plugin %s (%s '%s', ABI %u.%u, this pagoda is ABI %d.%d): it is a %s "
                              "plugin, the config asked for a %s: a plugin is used only as its own "
                              "kind; name it as engine.%s, or give [%s.%s] a %s plugin",
                path, pk, p->desc.name ? p->desc.name : "?", pM, pm, HM, Hm, pk,
                pagoda_kind_name(kind), pk, pagoda_kind_name(kind), name ? name : "NAME",
                pagoda_kind_name(kind));
        goto fail;
    }
    if (!p->desc.name || !*p->desc.name) {
        set_err(err, err_len, "plugin %s (%s, ABI %u.%u, this pagoda is ABI %d.%d): required field "
                              "pagoda_plugin_desc.name is empty: the name is what the config uses; "
                              "set it and rebuild", path, pk, pM, pm, HM, Hm);
        goto fail;
    }
    if (name && strcmp(p->desc.name, name) != 0) {
        set_err(err, err_len, "plugin %s (%s '%s', ABI %u.%u, this pagoda is ABI %d.%d): it is named "
                              "'%s', the config asked for %s '%s': the file name must be "
                              "<kind>-<name>.so with the descriptor's name; rename the file to "
                              "%s-%s.so and use '%s' in the config",
                path, pk, p->desc.name, pM, pm, HM, Hm, p->desc.name, pk, name, pk, p->desc.name,
                p->desc.name);
        goto fail;
    }
    const char *missing = NULL, *mtype = "pagoda_plugin_desc";
    if (!p->desc.create) missing = "create";
    else if (!p->desc.destroy) missing = "destroy";
    for (const slot *s = ki->required; !missing && s->name; s++)
        if (slot_null(&p->ops, s->off)) {
            missing = s->name;
            mtype = ki->ops_type;
        }
    if (missing) {
        set_err(err, err_len, "plugin %s (%s '%s', ABI %u.%u, this pagoda is ABI %d.%d): required "
                              "slot %s.%s is NULL: every required slot must be set; implement it "
                              "(returning PAGODA_ERR_UNSUPPORTED where it cannot work) and rebuild",
                path, pk, p->desc.name, pM, pm, HM, Hm, mtype, missing);
        goto fail;
    }
    p->probe_score = 100;
    *out = p;
    return PAGODA_OK;
fail:
    /* Never dlclose (see plugin_loader.h). */
    free(p);
    return st;
}

static void run_probe(pagoda_plugin *p)
{
    p->probe_score = 100;
    p->probe_why[0] = '\0';
    if (!p->desc.probe) return;
    int s = p->desc.probe(p->probe_why, sizeof p->probe_why);
    p->probe_why[sizeof p->probe_why - 1] = '\0';
    p->probe_score = s < 0 ? 0 : s > 100 ? 100 : s;
}

int pagoda_plugin_load(const pagoda_config *cfg, int kind, const char *name, pagoda_plugin **out,
                       char *err, size_t err_len)
{
    char path[4096];
    *out = NULL;
    int st = pagoda_plugin_find(cfg, kind, name, path, sizeof path, err, err_len);
    if (st != PAGODA_OK) return st;
    pagoda_plugin *p;
    if ((st = pagoda_plugin_load_file(path, kind, name, &p, err, err_len)) != PAGODA_OK) return st;
    run_probe(p);
    if (p->probe_score == 0) {
        set_err(err, err_len, "plugin %s (%s '%s' %s, ABI %u.%u, this pagoda is ABI %d.%d): its probe "
                              "says it cannot run here: %s; pick another %s in [engine]",
                path, pagoda_kind_name(kind), name, p->desc.version ? p->desc.version : "",
                p->desc.abi_major, p->desc.abi_minor, PAGODA_ABI_MAJOR, PAGODA_ABI_MINOR,
                p->probe_why[0] ? p->probe_why : "no reason given", pagoda_kind_name(kind));
        pagoda_plugin_free(p);
        return PAGODA_ERR_UNSUPPORTED;
    }
    char section[128];
    snprintf(section, sizeof section, "%s.%s", pagoda_kind_name(kind), name);
    if ((st = pagoda_config_validate_section(cfg, section, p->desc.config_keys, err, err_len)) !=
        PAGODA_OK) {
        pagoda_plugin_free(p);
        return st;
    }
    pagoda_log(PAGODA_LOG_DEBUG, "loaded %s plugin '%s' %s (ABI %u.%u) from %s",
               pagoda_kind_name(kind), name, p->desc.version ? p->desc.version : "",
               p->desc.abi_major, p->desc.abi_minor, path);
    *out = p;
    return PAGODA_OK;
}

int pagoda_plugin_create(const pagoda_plugin *p, const pagoda_host *host, void **ctx, char *err,
                         size_t err_len)
{
    char msg[1024] = "";
    *ctx = NULL;
    int st = p->desc.create(host, ctx, msg, sizeof msg);
    msg[sizeof msg - 1] = '\0'; /* in case the plugin forgot */
    if (st == PAGODA_OK) return PAGODA_OK;
    if (!msg[0] && host) {
        const char *he = pagoda_host_last_error(host);
        if (he) snprintf(msg, sizeof msg, "%s", he);
    }
    set_err(err, err_len, "%s.%s: create failed (%s): %s", pagoda_kind_name(p->desc.kind),
            p->desc.name, pagoda_status_str(st), msg[0] ? msg : "no reason given");
    *ctx = NULL;
    return st < 0 ? st : PAGODA_ERR_INTERNAL;
}

void pagoda_plugin_destroy(const pagoda_plugin *p, void *ctx)
{
    if (p && ctx) p->desc.destroy(ctx);
}

void pagoda_plugin_free(pagoda_plugin *p) { free(p); }

/* ------------------------------------------------------------ listing */

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int pagoda_plugins_print(FILE *out, bool verbose)
{
    const char *dirs[64], *src[64];
    size_t nd = search_dirs_src(dirs, src, 64);
    int good = 0;
    fprintf(out, "plugin folders, searched in this order:\n");
    for (size_t i = 0; i < nd; i++) fprintf(out, "  %zu. %s (%s)\n", i + 1, dirs[i], src[i]);
    if (!nd) fprintf(out, "  (none)\n");
    fprintf(out, "\n");
    int shown = 0;
    for (size_t i = 0; i < nd; i++) {
        DIR *d = opendir(dirs[i]);
        if (!d) continue;
        char **names = NULL;
        size_t nn = 0, cap = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
            const char *f = de->d_name;
            size_t fl = strlen(f);
            const char *dash = strchr(f, '-');
            if (fl < 4 || strcmp(f + fl - 3, ".so") != 0 || !dash) continue;
            char kw[32];
            snprintf(kw, sizeof kw, "%.*s", (int)((size_t)(dash - f) < 31 ? dash - f : 31), f);
            if (!pagoda_plugin_kind_from_name(kw)) continue;
            if (nn == cap) {
                cap = cap ? cap * 2 : 32;
                char **nnames = realloc(names, cap * sizeof *nnames);
                if (!nnames) break;
                names = nnames;
            }
            if (!(names[nn] = strdup(f))) break;
            nn++;
        }
        closedir(d);
        if (nn) qsort(names, nn, sizeof *names, name_cmp);
        for (size_t j = 0; j < nn; j++) {
            const char *f = names[j];
            const char *dash = strchr(f, '-');
            char kw[32], nm[256], path[4096];
            snprintf(kw, sizeof kw, "%.*s", (int)(dash - f), f);
            snprintf(nm, sizeof nm, "%.*s", (int)(strlen(dash + 1) - 3), dash + 1);
            snprintf(path, sizeof path, "%s/%s", dirs[i], f);
            int kind = pagoda_plugin_kind_from_name(kw);
            const char *shadow = NULL;
            char sp[4096];
            for (size_t k = 0; k < i && !shadow; k++) {
                snprintf(sp, sizeof sp, "%s/%s", dirs[k], f);
                if (is_file(sp)) shadow = sp;
            }
            char err[2048];
            pagoda_plugin *p = NULL;
            shown++;
            if (pagoda_plugin_load_file(path, kind, nm, &p, err, sizeof err) != PAGODA_OK) {
                fprintf(out, "%s.%s  REFUSED\n    %s\n", kw, nm, err);
                if (shadow) fprintf(out, "    (shadowed by %s)\n", shadow);
                continue;
            }
            run_probe(p);
            fprintf(out, "%s.%s  ABI %u.%u  version %s  probe %d%s%s\n", kw, nm, p->desc.abi_major,
                    p->desc.abi_minor, p->desc.version ? p->desc.version : "-", p->probe_score,
                    p->probe_why[0] ? ": " : "", p->probe_why);
            fprintf(out, "    %s\n    file: %s\n",
                    p->desc.description ? p->desc.description : "(no description)", path);
            if (shadow) fprintf(out, "    (shadowed by %s)\n", shadow);
            if (verbose) {
                fprintf(out, "    config keys of [%s.%s]:\n", kw, nm);
                fprintf(out, "      path (string): explicit plugin file (read by the loader)\n");
                for (const pagoda_config_key *k = p->desc.config_keys; k && k->name; k++) {
                    static const char *tn[] = { "?", "string", "int", "float", "bool", "size" };
                    int t = k->type >= 1 && k->type <= 5 ? k->type : 0;
                    fprintf(out, "      %s (%s, default %s", k->name, tn[t],
                            k->default_str && *k->default_str ? k->default_str : "none");
                    if (k->min < k->max) fprintf(out, ", %.15g..%.15g", k->min, k->max);
                    fprintf(out, "): %s\n", k->help ? k->help : "");
                }
            }
            if (p->probe_score > 0 && !shadow) good++;
            pagoda_plugin_free(p);
        }
        for (size_t j = 0; j < nn; j++) free(names[j]);
        free(names);
    }
    if (!shown) fprintf(out, "no plugins found; build them or set PAGODA_PLUGIN_PATH\n");
    return good;
}
