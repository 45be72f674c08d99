/*
 * toolfmt.c: each family's reasoning and tool-call markup turned into the
 * canonical <think> / <tool_call> form as it streams (toolfmt.h): one
 * scanner for the families that mark calls with an open and a close
 * marker (hermes, deepseek, kimi), one for Llama 3's whole-reply JSON,
 * one for harmony's channels, one for Mistral's [TOOL_CALLS] (no close
 * marker: the calls run to the end), and the call-body readers they share.
 * Not for: where the canonical text goes (split.c, ../structured.c).
 */
#define _GNU_SOURCE
#include "toolfmt.h"

#include <ctype.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "callmemo.h"
#include "split.h"

#define DS_CALLS_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALLS_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_CALL_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALL_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_SEP "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>"
#define DS_ASSISTANT "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"
#define KIMI_ARG "<|tool_call_argument_begin|>"
#define PY_TAG "<|python_tag|>"
#define MI_CALLS "[TOOL_CALLS]"
#define MI_ARGS "[ARGS]"
#define MI_ID "[CALL_ID]"

enum { S_TEXT = 0, S_CALL, S_START, S_WHOLE, S_PASS, S_HDR, S_BODY };
enum { CH_NONE = 0, CH_ANALYSIS, CH_COMMENTARY, CH_FINAL, CH_CALL };

/* The families with call markers: open, close, and markers dropped. */
static const struct marks {
    const char *open, *close, *drop[2];
} MARKS[FMT_COUNT] = {
    [FMT_HERMES] = {"<tool_call>", "</tool_call>", {NULL, NULL}},
    [FMT_DEEPSEEK] = {DS_CALL_BEGIN, DS_CALL_END, {DS_CALLS_BEGIN, DS_CALLS_END}},
    [FMT_DEEPSEEK31] = {DS_CALL_BEGIN, DS_CALL_END, {DS_CALLS_BEGIN, DS_CALLS_END}},
    [FMT_KIMI] = {"<|tool_call_begin|>", "<|tool_call_end|>",
                  {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"}},
    [FMT_QWEN3CODER] = {"<tool_call>", "</tool_call>", {NULL, NULL}},
    [FMT_GLM45] = {"<tool_call>", "</tool_call>", {NULL, NULL}},
};

static const char *const HARMONY_ENDS[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
static const char *const HARMONY_MARKS[] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                                            "<|call|>", "<|return|>", "<|constrain|>"};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define HDR_MAX 512 /* a harmony header longer than this is no header: text */

int fmt_from_probe(const char *r)
{
    if (!r) return FMT_HERMES;
    size_t n = strlen(r);
    while (n && (r[n - 1] == '\n' || r[n - 1] == ' ')) n--;
    static const char harmony[] = "<|start|>assistant";
    if (n >= sizeof harmony - 1 && !memcmp(r + n - (sizeof harmony - 1), harmony, sizeof harmony - 1))
        return FMT_HARMONY;
    if (strstr(r, "<|im_assistant|>")) return FMT_KIMI;
    if (strstr(r, DS_ASSISTANT "<think></think>")) return FMT_DEEPSEEK31; /* V3.1 closes the reasoning */
    if (strstr(r, DS_ASSISTANT)) return FMT_DEEPSEEK;
    if (strstr(r, "<|start_header_id|>")) return FMT_LLAMA3;
    if (strstr(r, "[INST]") && !strstr(r, "<<SYS>>")) return FMT_MISTRAL;
    if (strstr(r, "[gMASK]")) return FMT_GLM45; /* GLM-4.5/4.6's opening */
    return FMT_HERMES;
}

const char *fmt_name(int fmt)
{
    static const char *const names[FMT_COUNT] = {"hermes", "llama3", "deepseek", "kimi", "harmony", "mistral",
                                                  "qwen3-coder", "glm45", "deepseek-v3.1"};
    return fmt >= 0 && fmt < FMT_COUNT ? names[fmt] : "hermes";
}

void fmt_init(fmt_norm *f, int fmt)
{
    memset(f, 0, sizeof *f);
    f->fmt = fmt >= 0 && fmt < FMT_COUNT ? fmt : FMT_HERMES;
    f->state = f->fmt == FMT_LLAMA3 ? S_START : f->fmt == FMT_HARMONY ? S_HDR : S_TEXT;
}

void fmt_set_tools(fmt_norm *f, const json_t *tools)
{
    json_decref(f->tools);
    f->tools = tools ? json_deep_copy(tools) : NULL;
}

void fmt_free(fmt_norm *f)
{
    json_decref(f->tools);
    f->tools = NULL;
    free(f->held.p);
    free(f->hdr.p);
    free(f->raw.p);
    memset(&f->held, 0, sizeof f->held);
    memset(&f->hdr, 0, sizeof f->hdr);
    memset(&f->raw, 0, sizeof f->raw);
}

/* ------------------------------------------------------------ helpers */

static void trim(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

bool fmt_param_is_text(const json_t *schema)
{
    json_t *t = json_object_get(schema, "type");
    if (t) return json_is_string(t) && !strcmp(json_string_value(t), "string");
    json_t *c = json_object_get(schema, "const"), *e = json_object_get(schema, "enum");
    if (c) return json_is_string(c);
    if (!json_is_array(e) || !json_array_size(e)) return false;
    size_t i;
    json_t *v;
    json_array_foreach(e, i, v) if (!json_is_string(v)) return false;
    return true;
}

/* The schema of parameter p of function fn in tools (a chat request's
 * "tools"), or NULL when tools, the function or the parameter is not there. */
static const json_t *param_schema(const json_t *tools, const char *fn, size_t fl, const char *p, size_t pl)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        json_t *nm = json_object_get(f, "name");
        if (!json_is_string(nm) || json_string_length(nm) != fl || memcmp(json_string_value(nm), fn, fl)) continue;
        json_t *props = json_object_get(json_object_get(f, "parameters"), "properties");
        char *key = strndup(p, pl);
        json_t *ps = key ? json_object_get(props, key) : NULL;
        free(key);
        return ps;
    }
    return NULL;
}

/* A parameter's value as an XML family writes it: the text itself for a
 * parameter its schema makes text (fmt_param_is_text), else JSON when it
 * parses (the spellings Python's str() gives True, False and None too, as
 * Qwen3-Coder's template writes them), else the text as a string. */
static json_t *xml_value(const json_t *schema, const char *s, size_t n)
{
    if (schema && fmt_param_is_text(schema)) return json_stringn(s, n);
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    if (v) return v;
    const char *t = s;
    size_t tn = n;
    trim(&t, &tn);
    if (tn == 4 && !memcmp(t, "True", 4)) return json_true();
    if (tn == 5 && !memcmp(t, "False", 5)) return json_false();
    if (tn == 4 && !memcmp(t, "None", 4)) return json_null();
    return json_stringn(s, n);
}

/* {"name": name, "arguments": args} appended to out as JSON */
/* A function name as the templates write one (and OpenAI's rule, plus
 * the dots of namespaced tools): letters, digits, '_', '-', '.'. A reply
 * whose "name" is anything else is not a call (it stays text). */
static bool name_ok(const char *s, size_t n)
{
    if (!n) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.') return false;
    return true;
}

static int put_call(const char *name, size_t nn, json_t *args, sbuf *out)
{
    if (!nn || !args) {
        json_decref(args);
        return -1;
    }
    json_t *o = json_object();
    json_object_set_new(o, "name", json_stringn(name, nn));
    json_object_set_new(o, "arguments", args);
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(o);
    if (!s) return -1;
    sb_str(out, s);
    free(s);
    return 0;
}

/* the arguments: a JSON object, or a string holding one */
static json_t *args_of(const char *s, size_t n)
{
    trim(&s, &n);
    if (!n) return json_object();
    json_t *v = json_loadb(s, n, 0, NULL);
    if (json_is_string(v)) {
        json_t *in = json_loads(json_string_value(v), 0, NULL);
        json_decref(v);
        v = in;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        return NULL;
    }
    return v;
}

/* <tag=NAME>: the NAME after tag at s (tag includes '='), up to '>' */
static bool tag_value(const char *s, const char *e, const char *tag, const char **v, size_t *vn, const char **after)
{
    size_t tl = strlen(tag);
    if ((size_t)(e - s) < tl || memcmp(s, tag, tl)) return false;
    const char *gt = memchr(s + tl, '>', (size_t)(e - s - tl));
    if (!gt) return false;
    *v = s + tl;
    *vn = (size_t)(gt - *v);
    *after = gt + 1;
    return true;
}

static const char *skip_space(const char *s, const char *e)
{
    while (s < e && isspace((unsigned char)*s)) s++;
    return s;
}

/* a parameter's text: one newline either side belongs to the markup */
static json_t *param_value(const json_t *schema, const char *s, size_t n)
{
    if (n && *s == '\n') s++, n--;
    if (n && s[n - 1] == '\n') n--;
    return xml_value(schema, s, n);
}

/* Qwen3-Coder: <function=N><parameter=P>V</parameter>...</function> */
static int coder_call(const json_t *tools, const char *s, const char *e, sbuf *out)
{
    const char *name, *p;
    size_t nn;
    if (!tag_value(s, e, "<function=", &name, &nn, &p) || !name_ok(name, nn)) return -1;
    json_t *args = json_object();
    for (;;) {
        p = skip_space(p, e);
        const char *pn, *v;
        size_t pl;
        if (!tag_value(p, e, "<parameter=", &pn, &pl, &v)) break;
        size_t end = split_find(v, (size_t)(e - v), "</parameter>");
        if (end == (size_t)-1) break;
        json_object_setn_new(args, pn, pl, param_value(param_schema(tools, name, nn, pn, pl), v, end));
        p = v + end + 12;
    }
    p = skip_space(p, e);
    if ((size_t)(e - p) < 11 || memcmp(p, "</function>", 11)) {
        json_decref(args);
        return -1;
    }
    return put_call(name, nn, args, out);
}

/* GLM-4.5: N\n<arg_key>P</arg_key>\n<arg_value>V</arg_value>... (N
 * alone: a call without arguments) */
static int glm_call(const json_t *tools, const char *s, const char *e, sbuf *out)
{
    size_t at = split_find(s, (size_t)(e - s), "<arg_key>");
    if (at == (size_t)-1) at = (size_t)(e - s);
    const char *name = s;
    size_t nn = at;
    trim(&name, &nn);
    if (!name_ok(name, nn)) return -1;
    json_t *args = json_object();
    const char *p = s + at;
    while (p < e) {
        p = skip_space(p, e);
        if (p == e) break;
        if ((size_t)(e - p) < 9 || memcmp(p, "<arg_key>", 9)) goto bad;
        p += 9;
        size_t kl = split_find(p, (size_t)(e - p), "</arg_key>");
        if (kl == (size_t)-1) goto bad;
        const char *k = p;
        p = skip_space(p + kl + 10, e);
        if ((size_t)(e - p) < 11 || memcmp(p, "<arg_value>", 11)) goto bad;
        p += 11;
        size_t vl = split_find(p, (size_t)(e - p), "</arg_value>");
        if (vl == (size_t)-1) goto bad;
        json_object_setn_new(args, k, kl, xml_value(param_schema(tools, name, nn, k, kl), p, vl));
        p += vl + 12;
    }
    return put_call(name, nn, args, out);
bad:
    json_decref(args);
    return -1;
}

int fmt_call_json(const char *body, size_t n, sbuf *out) { return fmt_call_read(FMT_HERMES, NULL, body, n, out); }

int fmt_call_read(int fmt, const json_t *tools, const char *body, size_t n, sbuf *out)
{
    const char *s = body;
    trim(&s, &n);
    const char *e = s + n;
    if (n && *s == '{') { /* Hermes, Llama 3 */
        json_t *v = json_loadb(s, n, 0, NULL);
        json_t *nm = json_object_get(v, "name");
        json_t *a = json_object_get(v, "arguments");
        if (!a) a = json_object_get(v, "parameters");
        int r = -1;
        if (json_is_string(nm)) {
            json_t *args = !a ? json_object() : json_is_string(a) ? args_of(json_string_value(a), strlen(json_string_value(a)))
                                                                  : json_is_object(a) ? json_incref(a) : NULL;
            r = put_call(json_string_value(nm), strlen(json_string_value(nm)), args, out);
        }
        json_decref(v);
        return r;
    }
    if (n && *s == '[') { /* Mistral: a list of one call */
        json_t *v = json_loadb(s, n, 0, NULL);
        int r = -1;
        if (json_is_array(v) && json_array_size(v) == 1) {
            char *one = json_dumps(json_array_get(v, 0), 0);
            r = one && *one == '{' ? fmt_call_read(fmt, tools, one, strlen(one), out) : -1;
            free(one);
        }
        json_decref(v);
        return r;
    }
    if (n > 10 && !memcmp(s, "<function=", 10)) return coder_call(tools, s, e, out);
    if (split_find(s, n, "<arg_key>") != (size_t)-1) return glm_call(tools, s, e, out);
    if (fmt == FMT_GLM45) return glm_call(tools, s, e, out); /* a name alone */
    size_t sep = split_find(s, n, DS_SEP);
    if (sep != (size_t)-1) {
        const char *l = s, *r = s + sep + strlen(DS_SEP);
        size_t ln = sep, rn = (size_t)(e - r);
        trim(&l, &ln);
        if (ln == 8 && !memcmp(l, "function", 8)) { /* V3, R1: N\n```json\nARGS\n``` */
            const char *nl = memchr(r, '\n', rn);
            if (!nl) { /* a name alone, no arguments */
                const char *name = r;
                size_t nn = rn;
                trim(&name, &nn);
                return name_ok(name, nn) ? put_call(name, nn, json_object(), out) : -1;
            }
            const char *name = r;
            size_t nn = (size_t)(nl - r);
            trim(&name, &nn);
            if (!name_ok(name, nn)) return -1;
            const char *a = nl + 1;
            size_t an = (size_t)(e - a);
            size_t f = split_find(a, an, "```json");
            if (f != (size_t)-1) {
                a += f + 7;
                an = (size_t)(e - a);
                size_t c = split_find(a, an, "```");
                if (c != (size_t)-1) an = c;
            }
            return put_call(name, nn, args_of(a, an), out);
        }
        if (!name_ok(l, ln)) return -1;
        return put_call(l, ln, args_of(r, rn), out); /* V3.1: N<sep>ARGS */
    }
    size_t ka = split_find(s, n, KIMI_ARG);
    if (ka != (size_t)-1) { /* Kimi: functions.N:IDX<arg>ARGS */
        const char *id = s;
        size_t in = ka;
        trim(&id, &in);
        if (in > 10 && !memcmp(id, "functions.", 10)) id += 10, in -= 10;
        const char *colon = memrchr(id, ':', in);
        if (colon) in = (size_t)(colon - id);
        if (!name_ok(id, in)) return -1;
        const char *a = s + ka + strlen(KIMI_ARG);
        return put_call(id, in, args_of(a, (size_t)(e - a)), out);
    }
    size_t ma = split_find(s, n, MI_ARGS);
    if (ma != (size_t)-1) { /* Mistral v11: N[ARGS]{...}, [CALL_ID]ID before [ARGS] */
        size_t nn = ma, id = split_find(s, ma, MI_ID);
        if (id != (size_t)-1) nn = id;
        const char *name = s;
        trim(&name, &nn);
        if (!name_ok(name, nn)) return -1;
        const char *a = s + ma + strlen(MI_ARGS);
        return put_call(name, nn, args_of(a, (size_t)(e - a)), out);
    }
    return -1;
}

/* a call block out: canonical when it parses, else the text it was */
static void call_out(const fmt_norm *f, const char *open, const char *body, size_t n, const char *close, sbuf *out)
{
    int fmt = f->fmt;
    sbuf j = {0};
    if (fmt_call_read(fmt, f->tools, body, n, &j) == 0) {
        callmemo_note(fmt, f->tools, NULL, body, n); /* as the model wrote it, for the next turn's prompt */
        sb_str(out, "<tool_call>\n");
        sb_put(out, j.p, j.len);
        sb_str(out, "\n</tool_call>");
    } else {
        sb_str(out, open);
        sb_put(out, body, n);
        sb_str(out, close);
    }
    free(j.p);
}

/* ------------------------------------------------ marker families */

static void feed_marks(fmt_norm *f, sbuf *out, bool end)
{
    const struct marks *m = &MARKS[f->fmt];
    while (f->held.len) {
        const char *h = f->held.p;
        size_t len = f->held.len;
        if (f->state == S_CALL) {
            size_t at = split_find(h, len, m->close);
            if (at == (size_t)-1) {
                if (!end) return;
                sb_str(out, m->open); /* unfinished: the text it was */
                sb_put(out, h, len);
                split_drop(&f->held, len);
                return;
            }
            call_out(f, m->open, h, at, m->close, out);
            split_drop(&f->held, at + strlen(m->close));
            f->state = S_TEXT;
            continue;
        }
        /* text: the first marker, or all but a possible marker's start */
        size_t best = (size_t)-1;
        const char *which = NULL;
        const char *all[3] = {m->open, m->drop[0], m->drop[1]};
        for (int i = 0; i < 3; i++) {
            if (!all[i]) continue;
            size_t at = split_find(h, len, all[i]);
            if (at < best) best = at, which = all[i];
        }
        if (which) {
            sb_put(out, h, best);
            split_drop(&f->held, best + strlen(which));
            if (which == m->open) f->state = S_CALL;
            continue;
        }
        size_t keep = 0;
        for (int i = 0; i < 3 && !end; i++) {
            size_t l = all[i] ? split_partial(h, len, all[i]) : 0;
            if (l > keep) keep = l;
        }
        sb_put(out, h, len - keep);
        split_drop(&f->held, len - keep);
        return;
    }
}

/* -------------------------------------------------------- Llama 3 */

static void feed_llama3(fmt_norm *f, sbuf *out, bool end)
{
    if (f->state == S_START) {
        const char *h = f->held.p;
        size_t i = 0, len = f->held.len;
        while (i < len && isspace((unsigned char)h[i])) i++;
        if (i < len && h[i] == '{') f->state = S_WHOLE;
        else if (len - i >= strlen(PY_TAG) && !memcmp(h + i, PY_TAG, strlen(PY_TAG))) f->state = S_WHOLE;
        else if (i < len && (len - i >= strlen(PY_TAG) || memcmp(h + i, PY_TAG, len - i))) f->state = S_PASS;
        else if (!end) return; /* only space, or a start of the tag, so far */
        else f->state = S_PASS;
    }
    if (f->state == S_PASS) {
        sb_put(out, f->held.p, f->held.len);
        split_drop(&f->held, f->held.len);
        return;
    }
    if (!end) return; /* the whole reply decides */
    const char *h = f->held.p;
    size_t len = f->held.len;
    size_t t = split_find(h, len, PY_TAG);
    const char *b = t == (size_t)-1 ? h : h + t + strlen(PY_TAG);
    sbuf j = {0};
    if (fmt_call_json(b, (size_t)(h + len - b), &j) == 0) {
        const char *e = h + len;
        while (b < e && isspace((unsigned char)*b)) b++;
        while (e > b && isspace((unsigned char)e[-1])) e--;
        callmemo_note(FMT_LLAMA3, NULL, NULL, b, (size_t)(e - b));
        sb_str(out, "<tool_call>\n");
        sb_put(out, j.p, j.len);
        sb_str(out, "\n</tool_call>");
    } else {
        sb_put(out, h, len);
    }
    free(j.p);
    split_drop(&f->held, len);
}

/* -------------------------------------------------------- harmony */

size_t harmony_word_len(const char *h, size_t n)
{
    size_t k = 0;
    while (k < n && (isalnum((unsigned char)h[k]) || h[k] == '_' || h[k] == '.' || h[k] == ':' || h[k] == '-')) k++;
    return k;
}

/* the word after key in h[0..n) (harmony_word_len's), or n = 0 */
static const char *word_after(const char *h, size_t n, const char *key, size_t *wn)
{
    size_t at = split_find(h, n, key);
    *wn = 0;
    if (at == (size_t)-1) return NULL;
    const char *w = h + at + strlen(key), *e = h + n;
    while (w < e && *w == ' ') w++;
    *wn = harmony_word_len(w, (size_t)(e - w));
    return w;
}

static void harmony_header(fmt_norm *f, const char *h, size_t n)
{
    size_t cn, rn;
    const char *c = word_after(h, n, "<|channel|>", &cn);
    const char *r = word_after(h, n, "to=", &rn);
    f->chan = CH_NONE;
    if (c && cn == 8 && !memcmp(c, "analysis", 8)) f->chan = CH_ANALYSIS;
    else if (c && cn == 10 && !memcmp(c, "commentary", 10)) f->chan = CH_COMMENTARY;
    else if (c && cn == 5 && !memcmp(c, "final", 5)) f->chan = CH_FINAL;
    f->hdr.len = 0;
    f->raw.len = 0;
    /* the header after the generation prompt's (or a later message's)
     * <|start|>assistant: the call's text the memo keeps (callmemo.h) */
    static const char start[] = "<|start|>assistant";
    if (n >= sizeof start - 1 && !memcmp(h, start, sizeof start - 1)) h += sizeof start - 1, n -= sizeof start - 1;
    sb_put(&f->raw, h, n);
    if (r && rn && !(rn == 4 && !memcmp(r, "user", 4)) && !(rn == 9 && !memcmp(r, "assistant", 9))) {
        if (rn > 10 && !memcmp(r, "functions.", 10)) r += 10, rn -= 10;
        sb_put(&f->hdr, r, rn);
        f->chan = CH_CALL;
    }
}

/* header text that never became a header: its words, without markup */
static void harmony_plain(const char *h, size_t n, sbuf *out)
{
    size_t i = 0;
    while (i < n) {
        size_t skip = 0;
        for (size_t k = 0; k < N_OF(HARMONY_MARKS) && !skip; k++) {
            size_t l = strlen(HARMONY_MARKS[k]);
            if (n - i >= l && !memcmp(h + i, HARMONY_MARKS[k], l)) skip = l;
        }
        if (skip) {
            i += skip;
            continue;
        }
        sb_put(out, h + i, 1);
        i++;
    }
}

static void body_out(fmt_norm *f, const char *p, size_t n, sbuf *out)
{
    if (f->chan != CH_CALL) sb_put(out, p, n);
}

static void body_end(fmt_norm *f, const char *p, size_t n, sbuf *out)
{
    sbuf j = {0};
    if (f->chan == CH_CALL && put_call(f->hdr.p, f->hdr.len, args_of(p, n), &j) == 0) {
        /* the whole message as the model wrote it, header and arguments */
        sbuf w = {0};
        int bad = sb_put(&w, f->raw.p ? f->raw.p : "", f->raw.len);
        bad |= sb_str(&w, "<|message|>");
        bad |= sb_put(&w, p, n);
        if (!bad) callmemo_note(FMT_HARMONY, NULL, f->hdr.p, w.p, w.len);
        free(w.p);
        sb_str(out, "<tool_call>\n");
        sb_put(out, j.p, j.len);
        sb_str(out, "\n</tool_call>");
    } else {
        sb_put(out, p, n); /* text, or arguments that are no JSON object */
    }
    free(j.p);
    if (f->chan == CH_ANALYSIS) sb_str(out, "</think>");
}

static void feed_harmony(fmt_norm *f, sbuf *out, bool end)
{
    while (f->held.len) {
        const char *h = f->held.p;
        size_t len = f->held.len;
        if (f->state == S_HDR) {
            size_t at = split_find(h, len, "<|message|>");
            if (at == (size_t)-1) {
                if (len <= HDR_MAX && !end) return;
                /* at the end, a header cut short (the "<|start|>assistant"
                 * of a message never written) is markup, dropped; text
                 * without markup, or too long for a header, is plain text */
                bool markup = false;
                for (size_t k = 0; k < N_OF(HARMONY_MARKS) && !markup; k++)
                    markup = split_find(h, len, HARMONY_MARKS[k]) != (size_t)-1;
                if (!(end && markup && len <= HDR_MAX)) harmony_plain(h, len, out);
                split_drop(&f->held, len);
                return;
            }
            harmony_header(f, h, at);
            split_drop(&f->held, at + 11);
            f->state = S_BODY;
            if (f->chan == CH_ANALYSIS) sb_str(out, "<think>");
            continue;
        }
        size_t best = (size_t)-1, bl = 0;
        for (size_t k = 0; k < N_OF(HARMONY_ENDS); k++) {
            size_t at = split_find(h, len, HARMONY_ENDS[k]);
            if (at < best) {
                best = at;
                /* <|start|> begins the next header: it stays for S_HDR */
                bl = k == 3 ? 0 : strlen(HARMONY_ENDS[k]);
            }
        }
        if (best != (size_t)-1) {
            body_end(f, h, best, out);
            split_drop(&f->held, best + bl);
            f->state = S_HDR;
            f->chan = CH_NONE;
            continue;
        }
        if (end) {
            body_end(f, h, len, out);
            split_drop(&f->held, len);
            f->state = S_HDR;
            return;
        }
        if (f->chan == CH_CALL) return; /* the arguments go out whole */
        size_t keep = 0;
        for (size_t k = 0; k < N_OF(HARMONY_ENDS); k++) {
            size_t l = split_partial(h, len, HARMONY_ENDS[k]);
            if (l > keep) keep = l;
        }
        body_out(f, h, len - keep, out);
        split_drop(&f->held, len - keep);
        return;
    }
}

/* -------------------------------------------------------- Mistral */

/* The length of the one call (or list of calls) at the start of s (the
 * text after a [TOOL_CALLS]): a JSON list of calls, or N[ARGS]{...}; 0
 * when none starts there. The calls go to out canonically. */
static size_t mistral_calls(const char *s, size_t n, sbuf *out)
{
    size_t lead = 0;
    while (lead < n && isspace((unsigned char)s[lead])) lead++;
    json_error_t err;
    if (lead < n && s[lead] == '[') {
        json_t *v = json_loadb(s + lead, n - lead, JSON_DISABLE_EOF_CHECK, &err);
        size_t used = v ? err.position : 0;
        sbuf j = {0};
        size_t k;
        json_t *c;
        bool ok = json_is_array(v) && json_array_size(v) > 0;
        json_array_foreach(v, k, c) {
            char *one = json_is_object(c) ? json_dumps(c, 0) : NULL;
            sb_str(&j, "<tool_call>\n");
            ok = ok && one && fmt_call_json(one, strlen(one), &j) == 0;
            sb_str(&j, "\n</tool_call>");
            free(one);
        }
        json_decref(v);
        if (ok && j.p) {
            sb_put(out, j.p, j.len);
            /* one call: as the model wrote it (its leading space too), for the next turn's prompt */
            if (k == 1) callmemo_note(FMT_MISTRAL, NULL, NULL, s, lead + used);
        }
        free(j.p);
        return ok ? lead + used : 0;
    }
    size_t ma = split_find(s, n, MI_ARGS);
    if (ma == (size_t)-1) return 0;
    size_t a = ma + strlen(MI_ARGS);
    while (a < n && isspace((unsigned char)s[a])) a++;
    json_t *v = a < n && s[a] == '{' ? json_loadb(s + a, n - a, JSON_DISABLE_EOF_CHECK, &err) : NULL;
    size_t end = v ? a + err.position : 0;
    json_decref(v);
    sbuf j = {0};
    if (!end || fmt_call_json(s + lead, end - lead, &j) < 0) {
        free(j.p);
        return 0;
    }
    callmemo_note(FMT_MISTRAL, NULL, NULL, s, end); /* its leading space too: the prompt writes it after [TOOL_CALLS] */
    sb_str(out, "<tool_call>\n");
    sb_put(out, j.p, j.len);
    sb_str(out, "\n</tool_call>");
    free(j.p);
    return end;
}

/* Text streams until [TOOL_CALLS]; from there the rest of the reply is
 * held (a call has no close marker) and read at the end: each
 * [TOOL_CALLS] followed by its calls, the text after them passed on; one
 * that holds no call is passed on as the text it was. */
static void feed_mistral(fmt_norm *f, sbuf *out, bool end)
{
    const char *h = f->held.p;
    size_t len = f->held.len;
    if (f->state == S_TEXT) {
        size_t at = split_find(h, len, MI_CALLS);
        if (at == (size_t)-1) {
            size_t keep = end ? 0 : split_partial(h, len, MI_CALLS);
            sb_put(out, h, len - keep);
            split_drop(&f->held, len - keep);
            return;
        }
        sb_put(out, h, at);
        split_drop(&f->held, at);
        f->state = S_CALL;
        h = f->held.p;
        len = f->held.len;
    }
    if (!end) return; /* the calls run to the end of the reply */
    size_t i = 0, ml = strlen(MI_CALLS);
    while (i < len) {
        size_t at = split_find(h + i, len - i, MI_CALLS);
        if (at == (size_t)-1) {
            sb_put(out, h + i, len - i);
            break;
        }
        sb_put(out, h + i, at);
        i += at + ml;
        size_t used = mistral_calls(h + i, len - i, out);
        if (!used) sb_str(out, MI_CALLS); /* no call: the text it was */
        i += used;
    }
    split_drop(&f->held, len);
    f->state = S_TEXT;
}

/* ------------------------------------------------------------ entry */

static void run(fmt_norm *f, sbuf *out, bool end)
{
    if (f->fmt == FMT_HARMONY) feed_harmony(f, out, end);
    else if (f->fmt == FMT_LLAMA3) feed_llama3(f, out, end);
    else if (f->fmt == FMT_MISTRAL) feed_mistral(f, out, end);
    else feed_marks(f, out, end);
}

void fmt_feed(fmt_norm *f, const char *p, size_t n, sbuf *out)
{
    if (n) sb_put(&f->held, p, n);
    run(f, out, false);
}

void fmt_end(fmt_norm *f, sbuf *out)
{
    run(f, out, true);
    f->held.len = 0;
}
