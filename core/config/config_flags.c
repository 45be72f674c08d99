/*
 * core/config/config_flags.c: see config_flags.h. A flag becomes the text
 * of a --set ("frontend.http.port=8080") and goes through
 * pagoda_config_set, so its value is checked where any other setting of
 * that key is: [engine] keys at once, plugin keys with the plugin's own
 * section before anything loads (config_check.c).
 * Not for: the INI syntax (config.c).
 */
#include "config_flags.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const pagoda_cli_flag pagoda_cli_flags[] = {
    {"-m|--model", "engine.model", "llama-server, vllm; also the first bare argument"},
    {"--host", "frontend.http.host", "llama-server, vllm"},
    {"--port", "frontend.http.port", "llama-server, vllm"},
    {"--api-key", "frontend.http.api_key", "llama-server, vllm"},
    {"-a|--alias|--served-model-name", "frontend.http.served_model_name", "llama-server, vllm"},
    {"-c|--ctx-size|--max-model-len", "engine.max_seq_len", "llama-server (-c N), vllm"},
    {"-np|--parallel|--max-num-seqs", "scheduler.*.max_num_seqs", "llama-server, vllm"},
    {"-b|--batch-size|--max-num-batched-tokens", "scheduler.*.max_batched_tokens",
     "llama-server, vllm"},
    {"-t|--threads", "backend.*.threads", "llama-server"},
    {"-n|--n-predict", "engine.default_max_tokens", "llama-server"},
    {"--temp", "engine.temperature", "llama-server"},
    {"--top-k", "engine.top_k", "llama-server"},
    {"--top-p", "engine.top_p", "llama-server"},
    {"--min-p", "engine.min_p", "llama-server"},
    {"--seed", "engine.seed", "llama-server, vllm"},
    {"--chat-template", "engine.chat_template", "llama-server (a built-in name)"},
    {"--block-size", "engine.block_size", "vllm"},
    {"--gpu-memory-utilization", "engine.gpu_memory_utilization", "vllm"},
    {"-tp|--tensor-parallel-size", "engine.tensor_parallel", "vllm (start with mpirun -n N)"},
    {NULL, NULL, NULL},
};

static void set_err(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

/* Is `word` (up to len bytes) one of the '|'-separated names? */
static bool names_have(const char *names, const char *word, size_t len)
{
    for (const char *p = names; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == len && strncmp(p, word, len) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static const pagoda_cli_flag *flag_find(const char *word, size_t len)
{
    for (const pagoda_cli_flag *f = pagoda_cli_flags; f->names; f++)
        if (names_have(f->names, word, len)) return f;
    return NULL;
}

/* The spelling nearest to an unknown argument, for the message (NULL: none). */
static const char *closest_flag(const char *word)
{
    static char all[2048];
    const char *names[128];
    size_t n = 0, used = 0;
    static const char *const own[] = {"--config", "--set", "--help", "--version"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) names[n++] = own[i];
    for (const pagoda_cli_flag *f = pagoda_cli_flags; f->names && n < 120; f++) {
        size_t l = strlen(f->names) + 1;
        if (used + l > sizeof all) break;
        memcpy(all + used, f->names, l);
        for (char *p = all + used, *tok = p;; p++) {
            if (*p == '|' || !*p) {
                bool end = !*p;
                *p = '\0';
                if (n < 127) names[n++] = tok;
                if (end) break;
                tok = p + 1;
            }
        }
        used += l;
    }
    return pagoda_closest(word, names, n);
}

static bool is_number(const char *s)
{
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

static int push(pagoda_serve_args *out, const pagoda_cli_flag *f, const char *spelled,
                const char *text)
{
    out->a[out->n].flag = f;
    out->a[out->n].spelled = spelled;
    out->a[out->n].text = text;
    out->n++;
    return PAGODA_OK;
}

int pagoda_serve_args_parse(int argc, char **argv, int first, pagoda_serve_args *out, char *err,
                            size_t err_len)
{
    memset(out, 0, sizeof *out);
    out->a = calloc((size_t)(argc > 0 ? argc : 1), sizeof *out->a);
    if (!out->a) {
        set_err(err, err_len, "out of memory");
        return PAGODA_ERR_NOMEM;
    }
    const pagoda_cli_flag *model_flag = flag_find("--model", 7);
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { out->help = true; continue; }
        if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) { out->version = true; continue; }
        if (a[0] != '-' || !a[1]) {
            if (out->model_given) {
                set_err(err, err_len, "unexpected argument '%s': the model is given already (one "
                        "MODEL.gguf; other settings are flags, see pagoda --help)", a);
                return PAGODA_ERR_INVALID;
            }
            out->model_given = true;
            push(out, model_flag, "MODEL", a);
            continue;
        }
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t wl = eq ? (size_t)(eq - a) : strlen(a);
        const char *val = eq ? eq + 1 : NULL;
        bool is_config = (wl == 8 && strncmp(a, "--config", 8) == 0);
        bool is_set = (wl == 5 && strncmp(a, "--set", 5) == 0) || strcmp(a, "-s") == 0;
        const pagoda_cli_flag *f = NULL;
        if (!is_config && !is_set) {
            f = flag_find(a, wl);
            if (!f && strcmp(a, "-c") != 0) {
                char word[128];
                snprintf(word, sizeof word, "%.*s", (int)wl, a);
                const char *best = closest_flag(word);
                /* a guess only when it is one: a typo, not another word */
                if (best && pagoda_levenshtein(word, best) <= 2)
                    set_err(err, err_len, "unknown argument '%s'; did you mean '%s'? (see pagoda "
                            "--help)", word, best);
                else
                    set_err(err, err_len, "unknown argument '%s' (see pagoda --help)", word);
                return PAGODA_ERR_INVALID;
            }
        }
        if (!val) {
            if (i + 1 >= argc) {
                set_err(err, err_len, "%.*s needs a value (see pagoda --help)", (int)wl, a);
                return PAGODA_ERR_INVALID;
            }
            val = argv[++i];
        }
        /* -c N is llama-server's context size; -c FILE our --config */
        if (strcmp(a, "-c") == 0 && !is_number(val)) {
            is_config = true;
            f = NULL;
        }
        if (is_config) {
            if (out->config_path) {
                set_err(err, err_len, "--config given twice ('%s' and '%s')", out->config_path, val);
                return PAGODA_ERR_INVALID;
            }
            out->config_path = val;
        } else if (is_set) {
            push(out, NULL, "--set", val);
        } else {
            if (f == model_flag) {
                if (out->model_given) {
                    set_err(err, err_len, "the model is given twice (MODEL, -m or --model once)");
                    return PAGODA_ERR_INVALID;
                }
                out->model_given = true;
            }
            push(out, f, a, val);
        }
    }
    return PAGODA_OK;
}

/* The flag's "section.key=value", its '*' replaced by the plugin [engine]
 * names for that kind. */
static int assignment(const pagoda_config *cfg, const pagoda_serve_arg *a, char *out, size_t n)
{
    const char *key = a->flag->key;
    const char *star = strstr(key, ".*.");
    if (!star) return snprintf(out, n, "%s=%s", key, a->text) < (int)n ? 0 : -1;
    char kind[32];
    snprintf(kind, sizeof kind, "%.*s", (int)(star - key), key);
    const char *plugin = pagoda_config_engine_str(cfg, kind);
    return snprintf(out, n, "%s.%s.%s=%s", kind, plugin ? plugin : "", star + 3, a->text) < (int)n
               ? 0 : -1;
}

int pagoda_serve_args_apply(const pagoda_serve_args *a, pagoda_config *cfg, char *err,
                            size_t err_len)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < a->n; i++) {
            const pagoda_serve_arg *x = &a->a[i];
            bool late = x->flag && strstr(x->flag->key, ".*.");
            if (late != (pass == 1)) continue;
            char msg[2048];
            if (!x->flag) {
                if (pagoda_config_set(cfg, x->text, err, err_len) != PAGODA_OK) return PAGODA_ERR_INVALID;
                continue;
            }
            size_t n = strlen(x->flag->key) + strlen(x->text) + 128;
            char *as = malloc(n);
            if (!as) {
                set_err(err, err_len, "out of memory");
                return PAGODA_ERR_NOMEM;
            }
            int st = assignment(cfg, x, as, n) == 0 ? pagoda_config_set(cfg, as, msg, sizeof msg)
                                                    : PAGODA_ERR_INVALID;
            if (st != PAGODA_OK) {
                char *eq = strchr(as, '=');
                if (eq) *eq = '\0';
                const char *m = strncmp(msg, "--set: ", 7) == 0 ? msg + 7 : msg;
                set_err(err, err_len, "%s %s (%s): %s", x->spelled, x->text, as, m);
            }
            free(as);
            if (st != PAGODA_OK) return PAGODA_ERR_INVALID;
        }
    }
    return PAGODA_OK;
}

void pagoda_serve_args_free(pagoda_serve_args *a)
{
    if (!a) return;
    free(a->a);
    memset(a, 0, sizeof *a);
}

void pagoda_cli_flags_help(FILE *f)
{
    for (const pagoda_cli_flag *x = pagoda_cli_flags; x->names; x++) {
        char names[96], *p = names;
        snprintf(names, sizeof names, "%s", x->names);
        for (; *p; p++)
            if (*p == '|') *p = ',';
        char shown[128];
        snprintf(shown, sizeof shown, "%s V", names);
        const char *key = x->key;
        fprintf(f, "  %-42s %s%s\n", shown, key, strstr(key, ".*.") ? " (* = the [engine] plugin)" : "");
    }
}
