/*
 * api.c: what the Messages and Responses halves share (api.h): the
 * per-request state, the output hooks output.c and generate.c call (each
 * passed on to the request's API), SSE events with names, token counts,
 * whether the template thinks, and the request's API key.
 * Not for: either API's shapes (messages.c, responses.c).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stddef.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../reply.h"
#include "../structured.h"
#include "api.h"
#include "toolfmt.h"

api_state *api_state_new(int api, const char *prefix)
{
    static atomic_uint_fast64_t seq;
    api_state *as = calloc(1, sizeof *as);
    if (!as) return NULL;
    as->api = api;
    uint64_t x = (uint64_t)time(NULL) << 24 ^ atomic_fetch_add(&seq, 1) ^ (uint64_t)(uintptr_t)as;
    uint64_t a = 0, b = 0;
    for (int i = 0; i < 2; i++) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        if (i) b = z;
        else a = z;
    }
    snprintf(as->id, sizeof as->id, "%s%016llx%016llx", prefix, (unsigned long long)a, (unsigned long long)b);
    return as;
}

void api_state_free(api_state *as)
{
    if (!as) return;
    split_free(&as->sp);
    free(as->ws.p);
    free(as->text.p);
    free(as->reasoning.p);
    json_decref(as->out_items);
    json_decref(as->req);
    json_decref(as->history);
    free(as);
}

void api_sse(hreq *hr, const char *name, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    if (!s) return;
    sb_str(&hr->out, "event: ");
    sb_str(&hr->out, name);
    sb_str(&hr->out, "\ndata: ");
    sb_str(&hr->out, s);
    sb_str(&hr->out, "\n\n");
    free(s);
}

int64_t api_count_tokens(const pagoda_host *h, const char *text)
{
    int32_t cap = 4096, n = 0;
    int32_t *ids = NULL;
    for (int tries = 0; tries < 2; tries++) {
        free(ids);
        ids = malloc(sizeof(int32_t) * (size_t)cap);
        if (!ids) return 0;
        if (h->tokenize(h, text, strlen(text), false, true, ids, cap, &n) != PAGODA_OK) {
            n = 0;
            break;
        }
        if (n <= cap) break;
        cap = n;
    }
    free(ids);
    return n;
}

int api_prompt_opens_think(const char *prompt)
{
    size_t len = prompt ? strlen(prompt) : 0;
    while (len && (prompt[len - 1] == '\n' || prompt[len - 1] == ' ')) len--;
    return len >= 7 && !memcmp(prompt + len - 7, "<think>", 7);
}

void api_template_thinks(http_fe *fe, int *think, int *think_open)
{
    /* a block the template opens in the prompt is seen in a rendered
     * probe's generation prompt (DeepSeek-R1's "<think>\n"); one the model
     * opens itself (Qwen3) is found in the output, so <think> is always
     * read as reasoning. The template does not change: probed once. */
    const pagoda_host *h = fe->host;
    *think = 1;
    *think_open = 0;
    int known = atomic_load(&fe->template_thinks);
    if (known) {
        *think_open = known == 2;
        return;
    }
    if (!h->chat_render) return;
    pagoda_chat_message m = {.role = "user", .content = "hi"};
    char *r = NULL;
    int32_t ids[16], n = 0;
    if (h->chat_render(h, &m, 1, true, &r, ids, 16, &n) != PAGODA_OK || !r) return;
    *think_open = api_prompt_opens_think(r);
    h->free(h, r);
    atomic_store(&fe->template_thinks, *think_open ? 2 : 1);
}

/* Is the engine's chat template family (ABI 1.17) one of names (NULL-ended)? */
static bool template_named(const pagoda_host *h, const char *const *names)
{
    pagoda_model_info mi = {.struct_size = sizeof mi};
    if (!h->model_info || h->model_info(h, &mi) != PAGODA_OK ||
        mi.struct_size < offsetof(pagoda_model_info, chat_template) + sizeof mi.chat_template)
        return false;
    for (; *names; names++)
        if (!strcmp(mi.chat_template, *names)) return true;
    return false;
}

int api_template_fmt(http_fe *fe)
{
    int known = atomic_load(&fe->template_fmt);
    if (known) return known - 1;
    const pagoda_host *h = fe->host;
    /* Qwen3-Coder renders one turn as ChatML does, and Qwen3.5 as Qwen3:
     * the engine's template name says it */
    static const char *const xml[] = {"qwen3-coder", "qwen3.5", NULL};
    if (template_named(h, xml)) {
        atomic_store(&fe->template_fmt, FMT_QWEN3CODER + 1);
        return FMT_QWEN3CODER;
    }
    static const char *const v31[] = {"deepseek-v3.1", NULL};
    if (template_named(h, v31)) {
        atomic_store(&fe->template_fmt, FMT_DEEPSEEK31 + 1);
        return FMT_DEEPSEEK31;
    }
    if (!h->chat_render) return FMT_HERMES;
    pagoda_chat_message m = {.role = "user", .content = "hi"};
    char *r = NULL;
    int32_t ids[16], n = 0;
    if (h->chat_render(h, &m, 1, true, &r, ids, 16, &n) != PAGODA_OK || !r) return FMT_HERMES;
    if (strstr(r, "[INST]")) {
        /* Mistral or Llama 2: one user turn renders alike; a system turn
         * shows Llama 2's <<SYS>> */
        pagoda_chat_message two[2] = {{.role = "system", .content = "s"}, {.role = "user", .content = "hi"}};
        char *r2 = NULL;
        if (h->chat_render(h, two, 2, true, &r2, ids, 16, &n) == PAGODA_OK && r2) {
            h->free(h, r);
            r = r2;
        }
    }
    int fmt = fmt_from_probe(r);
    h->free(h, r);
    atomic_store(&fe->template_fmt, fmt + 1);
    return fmt;
}

int api_template_keeps_reasoning(http_fe *fe)
{
    int known = atomic_load(&fe->template_keeps);
    if (known) return known == 2;
    static const char *const keeping[] = {"qwen3", "qwen3.5", "glm4", NULL};
    bool keeps = template_named(fe->host, keeping);
    atomic_store(&fe->template_keeps, keeps ? 2 : 1);
    return keeps;
}

unsigned api_template_chat_flags(http_fe *fe)
{
    static const char *const qwen3[] = {"qwen3", NULL}, *const qwq[] = {"chatml-think", NULL};
    unsigned f = api_template_keeps_reasoning(fe) ? ST_KEEP_REASONING : 0;
    if (template_named(fe->host, qwen3)) f |= ST_TOOLS_QWEN3;
    else if (template_named(fe->host, qwq)) f |= ST_TOOLS_QWQ;
    return f;
}

void api_norm_setup(hreq *hr, int tools, const json_t *tool_list)
{
    int fmt = api_template_fmt(hr->fe);
    if (fmt != FMT_HARMONY && !tools) return;
    for (int i = 0; i < hr->n_choices; i++) {
        fmt_norm *f = malloc(sizeof *f);
        if (!f) continue;
        fmt_init(f, fmt);
        /* the families that read the XML forms type their values by the schema */
        if (fmt == FMT_HERMES || fmt == FMT_QWEN3CODER || fmt == FMT_GLM45) fmt_set_tools(f, tool_list);
        hr->choices[i].norm = f;
    }
}

void api_norm_event(choice *c, ev_item *e)
{
    if (!c->norm || !e->text_len) return;
    sbuf o = {0};
    fmt_feed(c->norm, e->text, e->text_len, &o);
    free(e->text);
    e->text = o.p;
    e->text_len = o.len;
}

char *api_norm_end(choice *c, size_t *len)
{
    *len = 0;
    if (!c->norm) return NULL;
    sbuf o = {0};
    fmt_end(c->norm, &o);
    api_norm_free(c);
    *len = o.len;
    return o.p;
}

void api_norm_free(choice *c)
{
    if (!c->norm) return;
    fmt_free(c->norm);
    free(c->norm);
    c->norm = NULL;
}

const char *api_key_of(struct MHD_Connection *conn)
{
    const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (a && !strncasecmp(a, "Bearer ", 7)) {
        a += 7;
        while (*a == ' ') a++;
        return a;
    }
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
    return x ? x : "";
}

void api_stream_start(hreq *hr, const char *rendered)
{
    api_state *as = hr->as;
    if (rendered) as->input_tokens = api_count_tokens(hr->fe->host, rendered);
    if (as->api == API_MESSAGES) msg_stream_start(hr);
    else resp_stream_start(hr);
}

void api_stream_event(hreq *hr, ev_item *e)
{
    if (e->type == PAGODA_EVENT_PROMPT) return;
    if (hr->as->api == API_MESSAGES) msg_stream_event(hr, e);
    else resp_stream_event(hr, e);
}

void api_stream_tail(hreq *hr)
{
    if (hr->as->api == API_MESSAGES) msg_stream_tail(hr);
    else resp_stream_tail(hr);
}

enum MHD_Result api_answer_full(struct MHD_Connection *conn, hreq *hr)
{
    if (hr->as->api == API_MESSAGES) return msg_answer_full(conn, hr);
    return resp_answer_full(conn, hr);
}

/* The tools' field names the chat-completions parser wrote (a tool is
 * tools[N].function.NAME there) in the API's own: Messages' tools.N.NAME
 * (parameters: input_schema), Responses' tools[N].NAME. */
void api_field_names(int api, char *msg, size_t cap)
{
    static const char pre[] = "tools[", fn[] = ".function", par[] = ".parameters";
    char out[1024];
    size_t o = 0;
    const char *p = msg;
    while (*p && o + 1 < sizeof out) {
        const char *q = p + sizeof pre - 1;
        size_t nd = 0;
        while (isdigit((unsigned char)q[nd])) nd++;
        if (strncmp(p, pre, sizeof pre - 1) || !nd || q[nd] != ']') {
            out[o++] = *p++;
            continue;
        }
        const char *r = q + nd + 1;
        bool has_fn = !strncmp(r, fn, sizeof fn - 1);
        if (has_fn) r += sizeof fn - 1;
        bool has_par = has_fn && !strncmp(r, par, sizeof par - 1);
        if (has_par) r += sizeof par - 1;
        int w = api == API_MESSAGES ? snprintf(out + o, sizeof out - o, "tools.%.*s%s", (int)nd, q,
                                               has_par ? ".input_schema" : "")
                                    : snprintf(out + o, sizeof out - o, "tools[%.*s]%s", (int)nd, q,
                                               has_par ? ".parameters" : "");
        if (w < 0 || (size_t)w >= sizeof out - o) break;
        o += (size_t)w;
        p = r;
    }
    out[o] = 0;
    snprintf(msg, cap, "%s", out);
}
