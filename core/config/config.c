/*
 * core/config.c: see config.h. inih does the INI syntax; this file keeps
 * each key with its origin (file:line or --set) and checks sections,
 * [engine] keys and plugin sections, naming where a bad key was set.
 * Not for: plugin search or loading (plugin_loader.c); parsing and
 * checking one value and the closest-name suggestions (config_value.c).
 *
 * inih (Debian's build) calls the handler without a line number, so a
 * line-counting reader is handed to ini_parse_stream: inih reads one line,
 * then calls the handler for it, so the reader's count is the handler's
 * line. The reader also notes section headers, so an empty section is
 * checked too.
 */
#include "config.h"

#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_internal.h"
#include "log.h"

#define CFG_MAX_LINE 8192 /* longest line accepted, in bytes */

typedef struct cfg_entry {
    char *section;
    char *key;
    char *value;   /* as used: a relative path resolved */
    char *raw;     /* as written, for messages */
    int line;      /* 0: from --set */
} cfg_entry;

typedef struct cfg_section {
    char *name;
    int line;
} cfg_section;

struct pagoda_config {
    char *file;   /* NULL for an empty config */
    char *dir;
    cfg_entry *e;
    size_t n, cap;
    cfg_section *s;
    size_t ns, caps;
};

/* ------------------------------------------------------------ [engine] keys */

typedef struct engine_key {
    pagoda_config_key k;
    const char *choices; /* "a|b|c" for an enumerated string, else NULL */
    bool auto_ok;        /* a size key that also takes "auto" (= 0) */
} engine_key;

#define EK(name, type, dflt, lo, hi, help) { { name, type, dflt, lo, hi, help }, NULL, false }
static const engine_key engine_keys[] = {
    EK("model", PAGODA_KEY_STRING, "", 0, 0, "GGUF model file (relative to the config file's folder)"),
    EK("backend", PAGODA_KEY_STRING, "cpu", 0, 0, "backend plugin name"),
    EK("scheduler", PAGODA_KEY_STRING, "continuous", 0, 0, "scheduler plugin name"),
    EK("kvcache", PAGODA_KEY_STRING, "paged", 0, 0, "KV-cache policy plugin name"),
    EK("frontend", PAGODA_KEY_STRING, "http", 0, 0, "frontend plugin name"),
    EK("constraint", PAGODA_KEY_STRING, "grammar", 0, 0,
       "constraint engine plugin name (structured output); none: off"),
    EK("max_seq_len", PAGODA_KEY_INT, "0", 0, 16777216, "longest sequence in tokens; 0: the model's context"),
    { { "kv_dtype", PAGODA_KEY_STRING, "f16", 0, 0, "KV cache element type (q8_0: 8-bit blocks, ~1.9x the tokens of f16)" }, "f16|q8_0|f32", false },
    { { "memory_budget", PAGODA_KEY_SIZE, "auto", 0, 0, "bytes pagoda may use (2G, 512M); auto: from device memory" }, NULL, true },
    EK("gpu_memory_utilization", PAGODA_KEY_FLOAT, "0.9", 0.01, 1.0, "share of device memory used when memory_budget is auto"),
    EK("seed", PAGODA_KEY_INT, "0", 0, 9.2e18, "sampling seed; 0: a random seed per request"),
    EK("kv_cache_tokens", PAGODA_KEY_INT, "0", 0, 1e12, "KV pool size in tokens; 0: from the memory plan"),
    EK("block_size", PAGODA_KEY_INT, "16", 1, 1024, "tokens per KV block"),
    { { "swa_kv", PAGODA_KEY_STRING, "window", 0, 0, "sliding-window layers keep only their window's KV, or every position" },
      "window|full", false },
    { { "realign", PAGODA_KEY_STRING, "on", 0, 0,
        "a prompt that spells a recent reply again gets the model's own tokens for it, so that reply's KV is reused (docs/http-api.md); off: the prompt's tokens as tokenized" },
      "on|off", false },
    EK("mla_decompress_min", PAGODA_KEY_INT, "320", 0, 16777216,
       "MLA models (deepseek2): a prefill chunk of at least this many tokens computes each head's K and V instead of attending over the latents (fewer FLOPs, same logits); 0: off"),
    EK("mla_decompress_ctx", PAGODA_KEY_INT, "4096", 0, 16777216,
       "MLA models: the longest context (cached prefix + chunk) a decompressed chunk may have, at most max_seq_len and never below max_batched_tokens; it sizes the scratch K/V pool; a longer context stays absorbed"),
    { { "chat_template", PAGODA_KEY_STRING, "auto", 0, 0, "chat template; auto: from the model" },
      "auto|chatml|llama2|llama3|mistral|zephyr|gemma|qwen3|chatml-think|qwen3-coder|qwen3.5|glm4|deepseek3|deepseek-r1|deepseek-v3.1|kimi-k2|harmony",
      false },
    EK("default_max_tokens", PAGODA_KEY_INT, "256", 0, 16777216, "max_tokens of a request that gives none; 0: up to the context"),
    EK("temperature", PAGODA_KEY_FLOAT, "1.0", 0, 100, "default sampling temperature; 0: greedy"),
    EK("top_p", PAGODA_KEY_FLOAT, "1.0", 0, 1, "default nucleus sampling mass; 1: off"),
    EK("top_k", PAGODA_KEY_INT, "0", 0, 1048576, "default top-k; 0: off"),
    EK("min_p", PAGODA_KEY_FLOAT, "0.0", 0, 1, "default min-p; 0: off"),
    EK("max_queue", PAGODA_KEY_INT, "1024", 1, 16777216, "requests waiting at most; more are refused"),
    { { "log_level", PAGODA_KEY_STRING, "info", 0, 0, "log level" }, "error|warn|info|debug", false },
    EK("tensor_parallel", PAGODA_KEY_INT, "1", 1, 4096,
       "ranks the model is split over (launch that many with mpirun); 1: no splitting"),
    EK("comm", PAGODA_KEY_STRING, "mpi", 0, 0,
       "collectives plugin name, used when tensor_parallel > 1 (mpi, nccl)"),
    { { "speculative", PAGODA_KEY_STRING, "off", 0, 0,
        "speculative decoding's drafter (ngram: prompt lookup; draft: a smaller model, "
        "spec_draft_model); off: none" }, "off|ngram|draft", false },
    EK("spec_draft_model", PAGODA_KEY_STRING, "", 0, 0,
       "the draft drafter's GGUF file, of the model's vocabulary (relative to the config file's folder)"),
    { { "spec_draft_batch", PAGODA_KEY_STRING, "on", 0, 0,
        "the draft drafter runs one forward pass per draft position for every drafting sequence; "
        "off: one sequence at a time (a measurement's other side)" }, "on|off", false },
    EK("spec_max_draft", PAGODA_KEY_INT, "8", 1, 256,
       "draft tokens a sequence verifies in one step at most (below max_seq_len)"),
    EK("spec_ngram", PAGODA_KEY_INT, "3", 1, 8, "tokens of the suffix the ngram drafter looks up"),
    EK("spec_max_seqs", PAGODA_KEY_INT, "4", 0, 1048576,
       "decoding sequences above which a step drafts nothing (it is compute-bound)"),
};
#undef EK
#define N_ENGINE_KEYS (sizeof engine_keys / sizeof engine_keys[0])

static const engine_key *engine_key_find(const char *name)
{
    for (size_t i = 0; i < N_ENGINE_KEYS; i++)
        if (strcmp(engine_keys[i].k.name, name) == 0) return &engine_keys[i];
    return NULL;
}

static const char *const section_kinds[] = { "backend", "scheduler", "kvcache", "frontend",
                                             "constraint", "comm" };
#define N_SECTION_KINDS (sizeof section_kinds / sizeof section_kinds[0])

/* ------------------------------------------------------------ small helpers */

static void set_err(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* Name of a plugin: letters, digits, '_' and '-' (it becomes a file name). */
/* 1 to 63 characters: the engine keeps a plugin name in 64 bytes. */
static bool valid_plugin_name(const char *s)
{
    if (!s || !*s || strlen(s) > 63) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return false;
    return true;
}

/* ------------------------------------------------------------ storage */

static void where_str(const pagoda_config *c, int line, char *buf, size_t n)
{
    if (line > 0) snprintf(buf, n, "%s:%d", c->file ? c->file : "?", line);
    else snprintf(buf, n, "--set");
}

static cfg_entry *entry_find(const pagoda_config *c, const char *section, const char *key)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->e[i].section, section) == 0 && strcmp(c->e[i].key, key) == 0) return &c->e[i];
    return NULL;
}

/* Paths written in a file are relative to the file's folder; the engine's
 * model and every plugin's `path` are paths. */
static bool is_path_key(const char *section, const char *key)
{
    return (strcmp(section, "engine") == 0 &&
            (strcmp(key, "model") == 0 || strcmp(key, "spec_draft_model") == 0)) ||
           (strcmp(section, "engine") != 0 && strcmp(key, "path") == 0);
}

static char *resolve_path(const pagoda_config *c, const char *v, bool from_file)
{
    if (!from_file || !*v || v[0] == '/' || strcmp(c->dir, ".") == 0) return strdup(v);
    size_t n = strlen(c->dir) + strlen(v) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", c->dir, v);
    return p;
}

static int entry_put(pagoda_config *c, const char *section, const char *key, const char *raw,
                     int line)
{
    char *value = is_path_key(section, key) ? resolve_path(c, raw, line > 0) : strdup(raw);
    if (!value) return PAGODA_ERR_NOMEM;
    cfg_entry *e = entry_find(c, section, key);
    if (e) { /* an override: --set over the file, or a later --set */
        char *r = strdup(raw);
        if (!r) { free(value); return PAGODA_ERR_NOMEM; }
        free(e->value);
        free(e->raw);
        e->value = value;
        e->raw = r;
        e->line = line;
        return PAGODA_OK;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 32;
        cfg_entry *ne = realloc(c->e, cap * sizeof *ne);
        if (!ne) { free(value); return PAGODA_ERR_NOMEM; }
        c->e = ne;
        c->cap = cap;
    }
    e = &c->e[c->n];
    e->section = xstrdup(section);
    e->key = xstrdup(key);
    e->raw = xstrdup(raw);
    e->value = value;
    e->line = line;
    if (!e->section || !e->key || !e->raw) {
        free(e->section); free(e->key); free(e->raw); free(e->value);
        return PAGODA_ERR_NOMEM;
    }
    c->n++;
    return PAGODA_OK;
}

static int section_note(pagoda_config *c, const char *name, int line)
{
    for (size_t i = 0; i < c->ns; i++)
        if (strcmp(c->s[i].name, name) == 0) return PAGODA_OK; /* repeated header: merged */
    if (c->ns == c->caps) {
        size_t cap = c->caps ? c->caps * 2 : 16;
        cfg_section *ns = realloc(c->s, cap * sizeof *ns);
        if (!ns) return PAGODA_ERR_NOMEM;
        c->s = ns;
        c->caps = cap;
    }
    c->s[c->ns].name = strdup(name);
    if (!c->s[c->ns].name) return PAGODA_ERR_NOMEM;
    c->s[c->ns].line = line;
    c->ns++;
    return PAGODA_OK;
}

/* ------------------------------------------------------------ checks */

/* A section name for a message: whole up to 80 characters, else its first
 * 64 and its length (a header may be as long as a line, 8K). */
static const char *sec_shown(const char *name, char *buf, size_t n)
{
    size_t l = strlen(name);
    if (l <= 80) snprintf(buf, n, "%s", name);
    else snprintf(buf, n, "%.64s... (%zu characters)", name, l);
    return buf;
}

/* Section names: [engine] or [kind.name] with a known kind. On error `why`
 * holds the text after "unknown section [x]". */
static int check_section_name(const char *sec, char *why, size_t n)
{
    if (strcmp(sec, "engine") == 0) return 0;
    const char *dot = strchr(sec, '.');
    const char *all[] = { "engine", "backend", "scheduler", "kvcache", "frontend", "constraint",
                          "comm" };
    if (dot) {
        size_t kl = (size_t)(dot - sec);
        char kind[64];
        snprintf(kind, sizeof kind, "%.*s", (int)(kl < 63 ? kl : 63), sec);
        bool known = false;
        for (size_t i = 0; i < N_SECTION_KINDS; i++) known |= strcmp(kind, section_kinds[i]) == 0;
        if (known) {
            if (valid_plugin_name(dot + 1)) return 0;
            snprintf(why, n, ": the plugin name after '%s.' must be 1 to 63 letters, digits, '_' "
                     "or '-'", kind);
            return -1;
        }
        const char *best = pagoda_closest(kind, all, 7);
        if (strcmp(best, "engine") == 0)
            snprintf(why, n, "; did you mean [engine]?");
        else
            snprintf(why, n, "; did you mean [%s.%s]?", best, dot + 1);
    } else {
        const char *best = pagoda_closest(sec, all, 7);
        if (strcmp(best, "engine") == 0) snprintf(why, n, "; did you mean [engine]?");
        else snprintf(why, n, "; did you mean [%s.NAME] (a plugin section is [kind.name])?", best);
    }
    size_t l = strlen(why);
    snprintf(why + l, n - l, " (valid: [engine], [backend.NAME], [scheduler.NAME], "
                             "[kvcache.NAME], [frontend.NAME], [constraint.NAME], [comm.NAME])");
    return -1;
}

static int check_engine_entry(const pagoda_config *c, const cfg_entry *e, char *err, size_t n)
{
    char where[4200];
    where_str(c, e->line, where, sizeof where);
    const engine_key *k = engine_key_find(e->key);
    if (!k) {
        const char *names[N_ENGINE_KEYS];
        for (size_t i = 0; i < N_ENGINE_KEYS; i++) names[i] = engine_keys[i].k.name;
        set_err(err, n, "%s: unknown key '%s' in [engine]; did you mean '%s'?", where, e->key,
                pagoda_closest(e->key, names, N_ENGINE_KEYS));
        return PAGODA_ERR_INVALID;
    }
    char why[256];
    if (pagoda_config_check_value_ex(&k->k, k->choices, k->auto_ok, e->raw, why, sizeof why) != 0) {
        set_err(err, n, "%s: bad value for engine.%s: '%s'; expected %s", where, e->key, e->raw,
                why);
        return PAGODA_ERR_INVALID;
    }
    if ((strcmp(e->key, "backend") == 0 || strcmp(e->key, "scheduler") == 0 ||
         strcmp(e->key, "kvcache") == 0 || strcmp(e->key, "frontend") == 0 ||
         strcmp(e->key, "constraint") == 0 || strcmp(e->key, "comm") == 0) &&
        !valid_plugin_name(e->raw)) {
        set_err(err, n, "%s: bad value for engine.%s: '%s'; expected a plugin name (letters, "
                        "digits, '_' or '-')", where, e->key, e->raw);
        return PAGODA_ERR_INVALID;
    }
    return PAGODA_OK;
}

/* ------------------------------------------------------------ loading */

typedef struct parse_state {
    pagoda_config *c;
    FILE *f;
    int line;            /* the line inih is working on */
    bool at_line_start;
    char *section;       /* the current section, as the reader read it (owned) */
    int err_line;        /* first error's line, 0 when none */
    char err[1024];
    int status;
} parse_state;

static void parse_fail(parse_state *st, int line, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void parse_fail(parse_state *st, int line, int status, const char *fmt, ...)
{
    if (st->err_line && st->err_line <= line) return; /* keep the first one */
    st->err_line = line;
    st->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->err, sizeof st->err, fmt, ap);
    va_end(ap);
}

static char *cfg_reader(char *str, int num, void *stream)
{
    parse_state *st = stream;
    char *r = fgets(str, num, st->f);
    if (!r) return NULL;
    if (st->at_line_start) st->line++;
    size_t l = strlen(r);
    st->at_line_start = l > 0 && r[l - 1] == '\n';
    if (!st->at_line_start && !feof(st->f)) {
        parse_fail(st, st->line, PAGODA_ERR_INVALID, "%s:%d: line longer than %d bytes",
                   st->c->file, st->line, CFG_MAX_LINE - 3);
        /* Skip the rest of the line so the count stays right. */
        int ch;
        while ((ch = fgetc(st->f)) != EOF && ch != '\n') {}
        st->at_line_start = true;
        return r;
    }
    /* Section headers are read here, whole, and the handler files keys
     * under this name, not inih's: inih keeps 49 characters of a name and
     * the spaces inside the brackets, so a long or spaced header's keys
     * went under a name no check looked at. Noting headers here also
     * checks an empty [section]. */
    const char *t = r;
    while (*t == ' ' || *t == '\t') t++;
    if (*t == '[') {
        const char *close = strchr(t, ']');
        if (close) {
            char *name = strndup(t + 1, (size_t)(close - t - 1));
            char *tn = name ? trim(name) : NULL;
            char *keep = tn ? strdup(tn) : NULL;
            free(name);
            free(st->section);
            st->section = keep;
            if (!keep || section_note(st->c, keep, st->line) != PAGODA_OK)
                parse_fail(st, st->line, PAGODA_ERR_NOMEM, "out of memory");
        }
    }
    return r;
}

static int cfg_handler(void *user, const char *section, const char *name, const char *value)
{
    parse_state *st = user;
    pagoda_config *c = st->c;
    (void)section; /* inih's copy: cut at 49 characters; st->section is whole */
    section = st->section;
    if (!section || !*section) {
        parse_fail(st, st->line, PAGODA_ERR_INVALID,
                   "%s:%d: key '%s' is outside any section; put it under [engine] or a "
                   "[kind.name] plugin section", c->file, st->line, name);
        return 1;
    }
    const cfg_entry *prev = entry_find(c, section, name);
    if (prev) {
        parse_fail(st, st->line, PAGODA_ERR_INVALID,
                   "%s:%d: [%s] %s is set twice (first at line %d); keep one", c->file,
                   st->line, section, name, prev->line);
        return 1;
    }
    if (entry_put(c, section, name, value ? value : "", st->line) != PAGODA_OK)
        parse_fail(st, st->line, PAGODA_ERR_NOMEM, "out of memory");
    return 1;
}

static pagoda_config *config_alloc(const char *file)
{
    pagoda_config *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (file) {
        c->file = strdup(file);
        const char *slash = strrchr(file, '/');
        if (!slash) c->dir = strdup(".");
        else if (slash == file) c->dir = strdup("/");
        else c->dir = strndup(file, (size_t)(slash - file));
        if (!c->file || !c->dir) { pagoda_config_free(c); return NULL; }
    } else {
        c->dir = strdup(".");
        if (!c->dir) { free(c); return NULL; }
    }
    return c;
}

pagoda_config *pagoda_config_new_empty(void) { return config_alloc(NULL); }

pagoda_config *pagoda_config_load(const char *path, char *err, size_t err_len)
{
    parse_state st = { 0 };
    pagoda_config *c = NULL;
    if (!path || !*path) {
        set_err(err, err_len, "no config file given");
        return NULL;
    }
    st.f = fopen(path, "r");
    if (!st.f) {
        set_err(err, err_len, "cannot open config file %s: %s", path, strerror(errno));
        return NULL;
    }
    c = config_alloc(path);
    if (!c) {
        set_err(err, err_len, "out of memory");
        goto fail;
    }
    st.c = c;
    st.at_line_start = true;

    /* Debian's inih reads these at run time: a heap line buffer long enough
     * for any sane line, and no multi-line values (an indented line is then
     * a syntax error instead of silently joining the previous value). */
    ini_use_stack = false;
    ini_initial_alloc = CFG_MAX_LINE;
    ini_max_line = CFG_MAX_LINE;
    ini_allow_realloc = false;
    ini_allow_multiline = false;
    int rc = ini_parse_stream(cfg_reader, &st, cfg_handler, &st);
    if (rc == -2) parse_fail(&st, 0, PAGODA_ERR_NOMEM, "out of memory parsing %s", path);
    else if (rc > 0)
        parse_fail(&st, rc, PAGODA_ERR_INVALID,
                   "%s:%d: syntax error: expected [section], key = value, or a comment "
                   "starting with ; or #", path, rc);

    /* Section names, then [engine] keys, keeping the earliest error. */
    for (size_t i = 0; i < c->ns; i++) {
        char why[512], shown[128];
        if (check_section_name(c->s[i].name, why, sizeof why) != 0)
            parse_fail(&st, c->s[i].line, PAGODA_ERR_INVALID, "%s:%d: unknown section [%s]%s",
                       path, c->s[i].line, sec_shown(c->s[i].name, shown, sizeof shown), why);
    }
    for (size_t i = 0; i < c->n; i++) {
        if (strcmp(c->e[i].section, "engine") != 0) continue;
        char msg[1024];
        if (check_engine_entry(c, &c->e[i], msg, sizeof msg) != PAGODA_OK)
            parse_fail(&st, c->e[i].line, PAGODA_ERR_INVALID, "%s", msg);
    }
    if (st.err_line || st.status) {
        set_err(err, err_len, "%s", st.err);
        goto fail;
    }
    fclose(st.f);
    free(st.section);
    return c;
fail:
    if (st.f) fclose(st.f);
    free(st.section);
    pagoda_config_free(c);
    return NULL;
}

int pagoda_config_set(pagoda_config *c, const char *assignment, char *err, size_t err_len)
{
    int st = PAGODA_ERR_INVALID;
    char *buf = assignment ? strdup(assignment) : NULL;
    if (!buf) {
        set_err(err, err_len, "--set: expected section.key=value (e.g. engine.block_size=32)");
        return assignment ? PAGODA_ERR_NOMEM : PAGODA_ERR_INVALID;
    }
    char *eq = strchr(buf, '=');
    char *dot = NULL;
    if (eq) {
        *eq = '\0';
        dot = strrchr(buf, '.');
    }
    if (!eq || !dot || dot == buf) {
        set_err(err, err_len, "--set '%s': expected section.key=value (e.g. engine.block_size=32)",
                assignment);
        goto out;
    }
    *dot = '\0';
    char *section = trim(buf), *key = trim(dot + 1), *value = trim(eq + 1);
    if (!*key) {
        set_err(err, err_len, "--set '%s': the key after the last '.' is empty", assignment);
        goto out;
    }
    char why[512], shown[128];
    if (check_section_name(section, why, sizeof why) != 0) {
        set_err(err, err_len, "--set: unknown section [%s]%s", sec_shown(section, shown, sizeof shown),
                why);
        goto out;
    }
    if (strcmp(section, "engine") == 0) {
        cfg_entry tmp = { .section = section, .key = key, .value = value, .raw = value, .line = 0 };
        if ((st = check_engine_entry(c, &tmp, err, err_len)) != PAGODA_OK) goto out;
    }
    if ((st = entry_put(c, section, key, value, 0)) != PAGODA_OK) {
        set_err(err, err_len, "out of memory");
        goto out;
    }
    if (section_note(c, section, 0) != PAGODA_OK) {
        st = PAGODA_ERR_NOMEM;
        set_err(err, err_len, "out of memory");
        goto out;
    }
    st = PAGODA_OK;
out:
    free(buf);
    return st;
}

/* ------------------------------------------------------------ lookups */

const char *pagoda_config_get(const pagoda_config *c, const char *section, const char *key)
{
    if (!c || !section || !key) return NULL;
    const cfg_entry *e = entry_find(c, section, key);
    return e ? e->value : NULL;
}

const char *pagoda_config_where(const pagoda_config *c, const char *section, const char *key,
                                char *buf, size_t n)
{
    if (!c || !section || !key || !buf || !n) return NULL;
    const cfg_entry *e = entry_find(c, section, key);
    if (!e) return NULL;
    where_str(c, e->line, buf, n);
    return buf;
}

const char *pagoda_config_engine_str(const pagoda_config *c, const char *key)
{
    if (!key) return NULL;
    const engine_key *k = engine_key_find(key);
    if (!k) return NULL;
    const char *v = c ? pagoda_config_get(c, "engine", key) : NULL;
    return v ? v : k->k.default_str;
}

const char *pagoda_config_file(const pagoda_config *c) { return c ? c->file : NULL; }
const char *pagoda_config_dir(const pagoda_config *c) { return c ? c->dir : "."; }

bool pagoda_config_entry(const pagoda_config *c, size_t i, const char **section, const char **key,
                         const char **value)
{
    if (!c || i >= c->n) return false;
    if (section) *section = c->e[i].section;
    if (key) *key = c->e[i].key;
    if (value) *value = c->e[i].value;
    return true;
}

bool pagoda_config_section_at(const pagoda_config *c, size_t i, const char **name, int *line)
{
    if (!c || i >= c->ns) return false;
    if (name) *name = c->s[i].name;
    if (line) *line = c->s[i].line;
    return true;
}

int pagoda_config_engine(const pagoda_config *c, pagoda_engine_config *out, char *err,
                         size_t err_len)
{
    memset(out, 0, sizeof *out);
    /* Every value passed check_engine_entry when it was stored, so the
     * parses below cannot fail on a config built through this API; the
     * checks stay as a guard. */
#define STR(k) pagoda_config_engine_str(c, k)
    snprintf(out->model, sizeof out->model, "%s", STR("model"));
    snprintf(out->backend, sizeof out->backend, "%s", STR("backend"));
    snprintf(out->scheduler, sizeof out->scheduler, "%s", STR("scheduler"));
    snprintf(out->kvcache, sizeof out->kvcache, "%s", STR("kvcache"));
    snprintf(out->frontend, sizeof out->frontend, "%s", STR("frontend"));
    snprintf(out->constraint, sizeof out->constraint, "%s", STR("constraint"));
    snprintf(out->comm, sizeof out->comm, "%s", STR("comm"));
    snprintf(out->chat_template, sizeof out->chat_template, "%s", STR("chat_template"));
    snprintf(out->speculative, sizeof out->speculative, "%s", STR("speculative"));
    snprintf(out->spec_draft_model, sizeof out->spec_draft_model, "%s", STR("spec_draft_model"));
    out->kv_dtype = strcmp(STR("kv_dtype"), "f32") == 0    ? PAGODA_DTYPE_F32
                  : strcmp(STR("kv_dtype"), "q8_0") == 0 ? PAGODA_DTYPE_Q8_0
                                                         : PAGODA_DTYPE_F16;
    out->swa_kv_full = strcmp(STR("swa_kv"), "full") == 0;
    out->realign_off = strcmp(STR("realign"), "off") == 0;
    out->spec_draft_batch_off = strcmp(STR("spec_draft_batch"), "off") == 0;
    int lvl = PAGODA_LOG_INFO;
    pagoda_log_level_parse(STR("log_level"), &lvl);
    out->log_level = lvl;

    int64_t i64;
    double f;
    bool ok = true;
    ok &= pagoda_parse_int(STR("max_seq_len"), &i64) == 0; out->max_seq_len = (int32_t)i64;
    ok &= pagoda_parse_int(STR("seed"), &i64) == 0; out->seed = (uint64_t)i64;
    ok &= pagoda_parse_int(STR("kv_cache_tokens"), &i64) == 0; out->kv_cache_tokens = i64;
    ok &= pagoda_parse_int(STR("block_size"), &i64) == 0; out->block_size = (int32_t)i64;
    ok &= pagoda_parse_int(STR("default_max_tokens"), &i64) == 0; out->default_max_tokens = (int32_t)i64;
    ok &= pagoda_parse_int(STR("top_k"), &i64) == 0; out->top_k = (int32_t)i64;
    ok &= pagoda_parse_int(STR("max_queue"), &i64) == 0; out->max_queue = (int32_t)i64;
    ok &= pagoda_parse_int(STR("tensor_parallel"), &i64) == 0; out->tensor_parallel = (int32_t)i64;
    ok &= pagoda_parse_int(STR("spec_max_draft"), &i64) == 0; out->spec_max_draft = (int32_t)i64;
    ok &= pagoda_parse_int(STR("spec_ngram"), &i64) == 0; out->spec_ngram = (int32_t)i64;
    ok &= pagoda_parse_int(STR("spec_max_seqs"), &i64) == 0; out->spec_max_seqs = (int32_t)i64;
    ok &= pagoda_parse_int(STR("mla_decompress_min"), &i64) == 0; out->mla_decompress_min = (int32_t)i64;
    ok &= pagoda_parse_int(STR("mla_decompress_ctx"), &i64) == 0; out->mla_decompress_ctx = (int32_t)i64;
    ok &= pagoda_parse_float(STR("gpu_memory_utilization"), &f) == 0; out->gpu_memory_utilization = f;
    ok &= pagoda_parse_float(STR("temperature"), &f) == 0; out->temperature = (float)f;
    ok &= pagoda_parse_float(STR("top_p"), &f) == 0; out->top_p = (float)f;
    ok &= pagoda_parse_float(STR("min_p"), &f) == 0; out->min_p = (float)f;
    const char *mb = STR("memory_budget");
    if (strcasecmp(mb, "auto") == 0) out->memory_budget = 0;
    else ok &= pagoda_parse_size(mb, &out->memory_budget) == 0;
#undef STR
    if (!ok) {
        set_err(err, err_len, "internal error: an [engine] value did not parse");
        return PAGODA_ERR_INTERNAL;
    }
    return PAGODA_OK;
}

int pagoda_config_validate_section(const pagoda_config *c, const char *section,
                                   const pagoda_config_key *keys, char *err, size_t err_len)
{
    static const pagoda_config_key path_key = { "path", PAGODA_KEY_STRING, "", 0, 0,
                                                "explicit plugin file (loader)" };
    if (!c || !section) return PAGODA_OK;
    for (size_t i = 0; i < c->n; i++) {
        const cfg_entry *e = &c->e[i];
        if (strcmp(e->section, section) != 0) continue;
        const pagoda_config_key *k = NULL;
        if (strcmp(e->key, "path") == 0) k = &path_key;
        for (const pagoda_config_key *p = keys; !k && p && p->name; p++)
            if (strcmp(p->name, e->key) == 0) k = p;
        char where[4200];
        where_str(c, e->line, where, sizeof where);
        if (!k) {
            const char *names[256];
            size_t nn = 0;
            /* path last: on a tie the plugin's own key is the better guess */
            for (const pagoda_config_key *p = keys; p && p->name && nn < 255; p++) names[nn++] = p->name;
            names[nn++] = "path";
            const char *best = pagoda_closest(e->key, names, nn);
            char list[1024] = "";
            for (size_t j = 0; j < nn; j++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s", j ? ", " : "", names[j]);
            }
            set_err(err, err_len, "%s: unknown key '%s' in [%s]; did you mean '%s'? (valid keys: %s)",
                    where, e->key, section, best, list);
            return PAGODA_ERR_INVALID;
        }
        char why[256];
        if (pagoda_config_check_value_ex(k, NULL, false, e->raw, why, sizeof why) != 0) {
            set_err(err, err_len, "%s: bad value for %s.%s: '%s'; expected %s", where, section,
                    e->key, e->raw, why);
            return PAGODA_ERR_INVALID;
        }
    }
    return PAGODA_OK;
}

uint64_t pagoda_config_hash(const pagoda_config *c)
{
    /* FNV-1a over every entry in order (file, then --set), 0-separated */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; c && i < c->n; i++) {
        const char *parts[3] = {c->e[i].section, c->e[i].key, c->e[i].raw};
        for (int p = 0; p < 3; p++) {
            for (const unsigned char *s = (const unsigned char *)(parts[p] ? parts[p] : ""); *s; s++)
                h = (h ^ *s) * 1099511628211ull;
            h = (h ^ 0xff) * 1099511628211ull;
        }
    }
    return h;
}

void pagoda_config_free(pagoda_config *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->e[i].section);
        free(c->e[i].key);
        free(c->e[i].value);
        free(c->e[i].raw);
    }
    for (size_t i = 0; i < c->ns; i++) free(c->s[i].name);
    free(c->e);
    free(c->s);
    free(c->file);
    free(c->dir);
    free(c);
}
