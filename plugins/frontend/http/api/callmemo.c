/*
 * callmemo.c: the recent calls as the model wrote them (callmemo.h): each
 * family's rendering of one call, the parse of a written span back into
 * (name, arguments, index), and a fixed ring of (family, name, rendered)
 * -> written under one mutex, searched linearly (256 short strings, once
 * per call in a prompt's history).
 * Not for: parsing calls out of a stream (toolfmt.c, split.c,
 * ../structured.c).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callmemo.h"
#include "toolfmt.h"

#define DS_SEP "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>"
#define KIMI_ARG "<|tool_call_argument_begin|>"
/* gpt-oss's template: <|start|>assistant to=functions.N HARMONY_TAIL A <|call|> */
#define HARMONY_TAIL "<|channel|>commentary json<|message|>"
#define HARMONY_MSG "<|message|>"

typedef struct memo_entry {
    int fmt;
    char *name, *rendered, *written;
} memo_entry;

static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;
static memo_entry memo[CALLMEMO_SIZE];
static size_t memo_next; /* the slot replaced next */
static _Atomic bool memo_on = true;

void callmemo_set_enabled(bool on) { memo_on = on; }

/* "\n" {"name": N, "arguments": A} "\n", A parsed and written again */
static char *hermes_body(const char *name, const char *args)
{
    json_t *av = args ? json_loads(args, JSON_DECODE_ANY, NULL) : NULL;
    json_t *call = av ? json_pack("{s:s,s:o}", "name", name ? name : "", "arguments", av) : NULL;
    char *txt = call ? json_dumps(call, 0) : strdup("{}");
    json_decref(call);
    if (!txt) return NULL;
    char *b = NULL;
    if (asprintf(&b, "\n%s\n", txt) < 0) b = NULL;
    free(txt);
    return b;
}

/* name as a JSON string, quotes included ("get" for get; a client's name
 * holding a quote or a backslash stays valid JSON) */
static char *json_quoted(const char *name)
{
    json_t *v = json_string(name);
    char *q = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
    json_decref(v);
    return q;
}

/* Qwen3-Coder's and GLM-4.5's call body, as their templates write a past
 * call: each argument a parameter (coder: <parameter=K>\nV\n</parameter>\n
 * after <function=N>\n; GLM: <arg_key>K</arg_key>\n<arg_value>V
 * </arg_value>\n after N\n), V a string's text, any other value as JSON
 * (the templates' rule; Qwen3-Coder's would write true as Python's True:
 * JSON here, as the constraint holds the model to, toolfmt.h) */
static char *xml_body(int fmt, const char *name, const char *args)
{
    json_t *av = json_loads(args, JSON_DECODE_ANY, NULL);
    sbuf b = {0};
    bool coder = fmt == FMT_QWEN3CODER;
    int bad = sb_str(&b, coder ? "\n<function=" : "");
    bad |= sb_str(&b, name);
    bad |= sb_str(&b, coder ? ">\n" : "\n");
    const char *k;
    json_t *v;
    json_object_foreach(json_is_object(av) ? av : NULL, k, v) {
        char *txt = json_is_string(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY);
        bad |= sb_str(&b, coder ? "<parameter=" : "<arg_key>");
        bad |= sb_str(&b, k);
        bad |= sb_str(&b, coder ? ">\n" : "</arg_key>\n<arg_value>");
        if (json_is_string(v)) bad |= sb_put(&b, json_string_value(v), json_string_length(v));
        else bad |= sb_str(&b, txt ? txt : "null");
        bad |= sb_str(&b, coder ? "\n</parameter>\n" : "</arg_value>\n");
        free(txt);
    }
    if (coder) bad |= sb_str(&b, "</function>\n");
    json_decref(av);
    if (bad) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

char *callmemo_render(int fmt, const char *name, const char *args, int index)
{
    char *s = NULL, *q = NULL;
    int r = 0;
    if (!name) name = "";
    if (!args) args = "{}";
    if (fmt == FMT_QWEN3CODER || fmt == FMT_GLM45) return xml_body(fmt, name, args);
    if ((fmt == FMT_LLAMA3 || fmt == FMT_MISTRAL) && !(q = json_quoted(name))) return NULL;
    switch (fmt) {
    case FMT_LLAMA3: r = asprintf(&s, "{\"name\": %s, \"parameters\": %s}", q, args); break;
    case FMT_DEEPSEEK: r = asprintf(&s, "function" DS_SEP "%s\n```json\n%s\n```", name, args); break;
    case FMT_DEEPSEEK31: r = asprintf(&s, "%s" DS_SEP "%s", name, args); break;
    case FMT_KIMI: r = asprintf(&s, "functions.%s:%d" KIMI_ARG "%s", name, index, args); break;
    case FMT_HARMONY: r = asprintf(&s, " to=functions.%s" HARMONY_TAIL "%s", name, args); break;
    case FMT_MISTRAL: r = asprintf(&s, "[{\"name\": %s, \"arguments\": %s}]", q, args); break;
    default: return hermes_body(name, args);
    }
    free(q);
    return r < 0 ? NULL : s;
}

/* JSON text v holds a call in the one shape the prompt writes for it: an
 * object of exactly a string "name" and an object under key (no other
 * keys, no key twice) */
static bool json_call(const char *s, size_t n, const char *key, char **name, json_t **args)
{
    json_t *v = json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL);
    json_t *nm = json_object_get(v, "name"), *a = json_object_get(v, key);
    bool ok = json_is_string(nm) && json_is_object(a) && json_object_size(v) == 2;
    if (ok) {
        *name = strdup(json_string_value(nm));
        *args = json_incref(a);
        ok = *name != NULL;
    }
    json_decref(v);
    return ok;
}

/* Kimi's index: functions.N:IDX before the argument marker */
static bool kimi_index(const char *s, size_t n, int *index)
{
    const char *arg = memmem(s, n, KIMI_ARG, strlen(KIMI_ARG));
    const char *colon = arg ? memrchr(s, ':', (size_t)(arg - s)) : NULL;
    if (!colon || colon + 1 == arg) return false;
    int v = 0;
    for (const char *p = colon + 1; p < arg; p++) {
        if (!isdigit((unsigned char)*p) || v > 99999) return false;
        v = v * 10 + (*p - '0');
    }
    *index = v;
    return true;
}

/* A harmony call's header as written, h[0..n) (after <|start|>assistant,
 * before <|message|>), that the history may replay: words apart by
 * spaces, nothing else: <|channel|>commentary and to=functions.NAME once
 * each, at most one content type (json, or <|constrain|>json), in any
 * order. The template's " to=functions.N<|channel|>commentary json" and
 * the model's "<|channel|>commentary to=functions.N <|constrain|>json"
 * are two; text or other markup in it is not replayed. */
static bool harmony_header_ok(const char *h, size_t n, const char *name)
{
    static const char ch[] = "<|channel|>", cons[] = "<|constrain|>", to[] = "to=functions.";
    bool chan = false, recipient = false, ctype = false;
    size_t nl = strlen(name), i = 0;
    while (i < n) {
        size_t w;
        if (h[i] == ' ') {
            i++;
        } else if (n - i >= sizeof ch - 1 && !memcmp(h + i, ch, sizeof ch - 1)) {
            i += sizeof ch - 1;
            w = harmony_word_len(h + i, n - i);
            if (chan || w != 10 || memcmp(h + i, "commentary", 10)) return false;
            chan = true;
            i += w;
        } else if (n - i >= sizeof cons - 1 && !memcmp(h + i, cons, sizeof cons - 1)) {
            i += sizeof cons - 1;
            w = harmony_word_len(h + i, n - i);
            if (ctype || !w) return false;
            ctype = true;
            i += w;
        } else if (n - i >= sizeof to - 1 && !memcmp(h + i, to, sizeof to - 1)) {
            i += sizeof to - 1;
            w = harmony_word_len(h + i, n - i);
            if (recipient || w != nl || memcmp(h + i, name, nl)) return false;
            recipient = true;
            i += w;
        } else {
            w = harmony_word_len(h + i, n - i); /* a bare content type */
            if (ctype || !w) return false;
            ctype = true;
            i += w;
        }
    }
    return chan && recipient;
}

/* The one call a written span holds (callmemo_render's spans, in any form
 * the family's reader takes): its name, arguments object and index */
static bool parse_span(int fmt, const json_t *tools, const char *hname, const char *s, size_t n, char **name,
                       json_t **args, int *index)
{
    *index = 0;
    const char *t = s;
    size_t tn = n;
    while (tn && isspace((unsigned char)*t)) t++, tn--;
    switch (fmt) {
    case FMT_HARMONY: {
        const char *msg = hname && *hname ? memmem(s, n, HARMONY_MSG, strlen(HARMONY_MSG)) : NULL;
        if (!msg || !harmony_header_ok(s, (size_t)(msg - s), hname)) return false;
        const char *b = msg + strlen(HARMONY_MSG);
        json_t *v = json_loadb(b, n - (size_t)(b - s), JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(v) || !(*name = strdup(hname))) {
            json_decref(v);
            return false;
        }
        *args = v;
        return true;
    }
    case FMT_LLAMA3: return tn && *t == '{' && json_call(s, n, "parameters", name, args);
    case FMT_MISTRAL: {
        /* a list of one call; the v11 form N[ARGS]{...} is read by toolfmt.c
         * and remembered as its list rendering's replacement too */
        if (tn && *t == '[') {
            json_t *v = json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL);
            bool one = json_is_array(v) && json_array_size(v) == 1;
            char *txt = one ? json_dumps(json_array_get(v, 0), 0) : NULL;
            json_decref(v);
            bool ok = txt && json_call(txt, strlen(txt), "arguments", name, args);
            free(txt);
            return ok;
        }
        break;
    }
    case FMT_HERMES:
        if (tn && *t == '{') return json_call(s, n, "arguments", name, args);
        break;
    case FMT_KIMI:
        if (!kimi_index(s, n, index)) return false;
        break;
    default: break;
    }
    /* the other forms: what the family's reader makes of them */
    sbuf j = {0};
    if (fmt_call_read(fmt, tools, s, n, &j) < 0) {
        free(j.p);
        return false;
    }
    bool ok = json_call(j.p, j.len, "arguments", name, args);
    free(j.p);
    return ok;
}

void callmemo_note(int fmt, const json_t *tools, const char *hname, const char *span, size_t n)
{
    if (!memo_on || !span || n == 0 || n > CALLMEMO_MAX_BODY || fmt < 0 || fmt >= FMT_COUNT) return;
    if (memchr(span, 0, n)) return; /* a NUL inside: not a span to write back */
    char *name = NULL, *atxt = NULL, *rendered = NULL, *written = NULL;
    json_t *args = NULL;
    int index;
    if (!parse_span(fmt, tools, hname, span, n, &name, &args, &index)) goto out;
    atxt = json_dumps(args, JSON_ENCODE_ANY); /* as the prompt writes a client's arguments */
    rendered = atxt ? callmemo_render(fmt, name, atxt, index) : NULL;
    if (!rendered || (strlen(rendered) == n && !memcmp(rendered, span, n)))
        goto out; /* written as rendered: the prompt's own text already */
    written = strndup(span, n);
    if (!written) goto out;
    pthread_mutex_lock(&memo_mu);
    size_t at = CALLMEMO_SIZE;
    for (size_t i = 0; i < CALLMEMO_SIZE && at == CALLMEMO_SIZE; i++)
        if (memo[i].rendered && memo[i].fmt == fmt && !strcmp(memo[i].name, name) &&
            !strcmp(memo[i].rendered, rendered))
            at = i; /* the latest writing wins */
    if (at == CALLMEMO_SIZE) {
        at = memo_next;
        memo_next = (memo_next + 1) % CALLMEMO_SIZE;
    }
    free(memo[at].name);
    free(memo[at].rendered);
    free(memo[at].written);
    memo[at] = (memo_entry){fmt, name, rendered, written};
    pthread_mutex_unlock(&memo_mu);
    name = rendered = written = NULL;
out:
    json_decref(args);
    free(name);
    free(atxt);
    free(rendered);
    free(written);
}

char *callmemo_written(int fmt, const char *name, const char *rendered)
{
    char *out = NULL;
    if (!memo_on || !name || !rendered) return NULL;
    pthread_mutex_lock(&memo_mu);
    for (size_t i = 0; i < CALLMEMO_SIZE && !out; i++)
        if (memo[i].rendered && memo[i].fmt == fmt && !strcmp(memo[i].name, name) &&
            !strcmp(memo[i].rendered, rendered))
            out = strdup(memo[i].written);
    pthread_mutex_unlock(&memo_mu);
    return out;
}

void callmemo_clear(void)
{
    pthread_mutex_lock(&memo_mu);
    for (size_t i = 0; i < CALLMEMO_SIZE; i++) {
        free(memo[i].name);
        free(memo[i].rendered);
        free(memo[i].written);
        memo[i] = (memo_entry){0, NULL, NULL, NULL};
    }
    memo_next = 0;
    pthread_mutex_unlock(&memo_mu);
}

/* The plugin unloaded (dlclose): its memo goes with it, or the sanitizer
 * would see the entries as lost once the array is unmapped. */
__attribute__((destructor)) static void callmemo_unload(void) { callmemo_clear(); }
