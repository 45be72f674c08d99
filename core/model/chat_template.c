/*
 * chat_template.c: chat message rendering for the common template families
 * and their detection from a Jinja template by marker substrings (see
 * chat_template.h for the exact formats).
 * Not for: evaluating Jinja; a template outside the families renders as
 * ChatML.
 */
#include "chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "pagoda/types.h"

#define DS_ASSISTANT "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"

/* ------------------------------------------------------------- detection */

pagoda_chat_family pagoda_chat_detect(const char *t)
{
    if (!t || !*t) return PAGODA_CHAT_UNKNOWN;
    /* Most specific markers first: each family's turn delimiter is unique
     * to it, except [INST] (Llama 2 and Mistral; <<SYS>> tells them apart)
     * and <|user|> (Zephyr, but also Phi-3, which ends turns with <|end|>). */
    if (strstr(t, "<|channel|>") && strstr(t, "<|start|>")) return PAGODA_CHAT_HARMONY;
    if (strstr(t, "<|im_middle|>")) return PAGODA_CHAT_KIMI_K2;
    /* DeepSeek-V3.1 closes the reasoning in its generation prompt and writes
     * calls N<｜tool▁sep｜>{...} (V3.2's DSML calls are not this family) */
    if (strstr(t, DS_ASSISTANT "<think></think>") && strstr(t, "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>") &&
        !strstr(t, "\xEF\xBD\x9C" "DSML\xEF\xBD\x9C"))
        return PAGODA_CHAT_DEEPSEEK31;
    if (strstr(t, DS_ASSISTANT)) return strstr(t, "<think>") ? PAGODA_CHAT_DEEPSEEK_R1 : PAGODA_CHAT_DEEPSEEK3;
    /* Qwen3-Coder's template writes past calls as <function=N><parameter=P>;
     * Qwen3.5's too, and it thinks */
    if (strstr(t, "<|im_start|>") && strstr(t, "<function=") && strstr(t, "<parameter="))
        return strstr(t, "<think>") ? PAGODA_CHAT_QWEN35 : PAGODA_CHAT_QWEN3_CODER;
    /* Qwen3 reads an assistant's reasoning_content; QwQ's template thinks
     * (its generation prompt opens <think>) without it */
    if (strstr(t, "<|im_start|>") && strstr(t, "<think>"))
        return strstr(t, "reasoning_content") ? PAGODA_CHAT_QWEN3 : PAGODA_CHAT_CHATML_THINK;
    if (strstr(t, "<|im_start|>")) return PAGODA_CHAT_CHATML;
    if (strstr(t, "[gMASK]")) return PAGODA_CHAT_GLM4;
    if (strstr(t, "<|start_header_id|>")) return PAGODA_CHAT_LLAMA3;
    if (strstr(t, "<start_of_turn>")) return PAGODA_CHAT_GEMMA;
    if (strstr(t, "[INST]")) return strstr(t, "<<SYS>>") ? PAGODA_CHAT_LLAMA2 : PAGODA_CHAT_MISTRAL;
    if (strstr(t, "<|user|>") && !strstr(t, "<|end|>")) return PAGODA_CHAT_ZEPHYR;
    return PAGODA_CHAT_UNKNOWN;
}

static const char *const family_names[] = {
    [PAGODA_CHAT_CHATML] = "chatml", [PAGODA_CHAT_LLAMA2] = "llama2",
    [PAGODA_CHAT_LLAMA3] = "llama3", [PAGODA_CHAT_MISTRAL] = "mistral",
    [PAGODA_CHAT_ZEPHYR] = "zephyr", [PAGODA_CHAT_GEMMA] = "gemma",
    [PAGODA_CHAT_QWEN3] = "qwen3", [PAGODA_CHAT_GLM4] = "glm4",
    [PAGODA_CHAT_DEEPSEEK3] = "deepseek3", [PAGODA_CHAT_DEEPSEEK_R1] = "deepseek-r1",
    [PAGODA_CHAT_KIMI_K2] = "kimi-k2", [PAGODA_CHAT_HARMONY] = "harmony",
    [PAGODA_CHAT_QWEN3_CODER] = "qwen3-coder", [PAGODA_CHAT_QWEN35] = "qwen3.5",
    [PAGODA_CHAT_DEEPSEEK31] = "deepseek-v3.1", [PAGODA_CHAT_CHATML_THINK] = "chatml-think",
    [PAGODA_CHAT_UNKNOWN] = "unknown",
};

const char *pagoda_chat_family_name(pagoda_chat_family f)
{
    if ((int)f < 0 || f > PAGODA_CHAT_UNKNOWN) return "unknown";
    return family_names[f];
}

int pagoda_chat_family_from_name(const char *name, pagoda_chat_family *out)
{
    if (!name || !out) return PAGODA_ERR_INVALID;
    for (int f = 0; f < PAGODA_CHAT_UNKNOWN; f++) {
        if (strcmp(name, family_names[f]) == 0) {
            *out = (pagoda_chat_family)f;
            return PAGODA_OK;
        }
    }
    return PAGODA_ERR_INVALID;
}

int pagoda_chat_select(const char *config_value, const char *jinja_template,
                       pagoda_chat_family *out, char *msg, size_t msg_len)
{
    if (msg && msg_len) msg[0] = '\0';
    if (!out) return PAGODA_ERR_INVALID;
    if (config_value && *config_value && strcmp(config_value, "auto") != 0) {
        if (pagoda_chat_family_from_name(config_value, out) == PAGODA_OK) return PAGODA_OK;
        if (msg && msg_len)
            snprintf(msg, msg_len,
                     "engine.chat_template: unknown value '%s'; expected auto, chatml, llama2, "
                     "llama3, mistral, zephyr, gemma, qwen3, chatml-think, qwen3-coder, qwen3.5, glm4, "
                     "deepseek3, deepseek-r1, deepseek-v3.1, kimi-k2 or harmony",
                     config_value);
        return PAGODA_ERR_INVALID;
    }
    *out = pagoda_chat_detect(jinja_template);
    if (*out == PAGODA_CHAT_UNKNOWN) {
        if (msg && msg_len)
            snprintf(msg, msg_len,
                     "chat template: %s; using ChatML (set engine.chat_template to choose a family)",
                     jinja_template && *jinja_template ? "not recognised"
                                                       : "the model has none");
        *out = PAGODA_CHAT_CHATML;
    }
    return PAGODA_OK;
}

/* ------------------------------------------------------------- rendering */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_addn(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap < b->len + n + 1) ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_add(sbuf *b, const char *s) { sb_addn(b, s, strlen(s)); }

/* s as a JSON string literal (Jinja's tojson on a string): quotes, and
 * escapes for quote, backslash and control characters */
static void sb_add_json_string(sbuf *b, const char *s)
{
    sb_add(b, "\"");
    for (const char *p = s; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\', esc[1] = (char)ch, esc[2] = 0;
        } else if (ch == '\n') {
            strcpy(esc, "\\n");
        } else if (ch == '\t') {
            strcpy(esc, "\\t");
        } else if (ch == '\r') {
            strcpy(esc, "\\r");
        } else if (ch < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", ch);
        } else {
            sb_addn(b, p, 1);
            continue;
        }
        sb_add(b, esc);
    }
    sb_add(b, "\"");
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Appends s without leading and trailing whitespace (Python strip, Jinja trim). */
static void sb_add_trimmed(sbuf *b, const char *s)
{
    size_t n = strlen(s);
    while (n && is_space(*s)) s++, n--;
    while (n && is_space(s[n - 1])) n--;
    sb_addn(b, s, n);
}

static const char *content_of(const pagoda_chat_message *m) { return m->content ? m->content : ""; }

static bool is_role(const pagoda_chat_message *m, const char *r) { return strcmp(m->role, r) == 0; }

/* s begins with head and ends with tail */
static bool starts_ends(const char *s, const char *head, const char *tail)
{
    size_t n = strlen(s), h = strlen(head), t = strlen(tail);
    return n >= h && n >= t && !strncmp(s, head, h) && !strcmp(s + n - t, tail);
}

static void render_chatml(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen)
{
    for (int32_t i = 0; i < n; i++) {
        sb_add(b, "<|im_start|>");
        sb_add(b, msgs[i].role);
        sb_add(b, "\n");
        sb_add(b, content_of(&msgs[i]));
        sb_add(b, "<|im_end|>\n");
    }
    if (gen) sb_add(b, "<|im_start|>assistant\n");
}

/* A tool result as Qwen3-Coder's (and GLM-4.5's) template writes it:
 * inside <tool_response>, on lines of its own. */
static void tool_response(sbuf *b, const pagoda_chat_message *m, bool trimmed)
{
    sb_add(b, "<tool_response>\n");
    if (trimmed) sb_add_trimmed(b, content_of(m));
    else sb_add(b, content_of(m));
    sb_add(b, "\n</tool_response>");
}

/* An assistant turn's text split at its reasoning: what lies between
 * <think> and the first </think> (both ends stripped of newlines) and what
 * follows the last </think> (leading newlines stripped), as Qwen3's and
 * GLM-4.5's templates split it. Without </think>: no reasoning, all text. */
typedef struct think_split {
    const char *r;
    size_t rn;
    const char *c;
} think_split;

static think_split split_think(const char *s)
{
    think_split t = {.r = "", .rn = 0, .c = s};
    const char *close = strstr(s, "</think>");
    if (!close) return t;
    const char *open = NULL;
    for (const char *p = strstr(s, "<think>"); p && p < close; p = strstr(p + 1, "<think>")) open = p;
    const char *r = open ? open + 7 : s, *re = close;
    while (r < re && *r == '\n') r++;
    while (re > r && re[-1] == '\n') re--;
    t.r = r;
    t.rn = (size_t)(re - r);
    const char *last = close;
    for (const char *p = strstr(close + 1, "</think>"); p; p = strstr(p + 1, "</think>")) last = p;
    t.c = last + 8;
    while (*t.c == '\n') t.c++;
    return t;
}

static int32_t last_user(const pagoda_chat_message *msgs, int32_t n)
{
    int32_t u = -1;
    for (int32_t i = 0; i < n; i++)
        if (is_role(&msgs[i], "user")) u = i;
    return u;
}

/* A run of tool results as Qwen3's and QwQ's templates
 * write them: one user turn, each result "\n<tool_response>\nR\n
 * </tool_response>". A result the caller already wrapped so (the HTTP
 * frontend does for the JSON-call families) is written as given, not
 * wrapped twice: the text is the same. */
static void qwen_tool_result(sbuf *b, const pagoda_chat_message *msgs, int32_t n, int32_t i)
{
    const char *c = content_of(&msgs[i]);
    if (i == 0 || !is_role(&msgs[i - 1], "tool")) sb_add(b, "<|im_start|>user");
    sb_add(b, "\n");
    if (starts_ends(c, "<tool_response>\n", "\n</tool_response>")) sb_add(b, c);
    else tool_response(b, &msgs[i], false);
    if (i + 1 == n || !is_role(&msgs[i + 1], "tool")) sb_add(b, "<|im_end|>\n");
}

/* Qwen3 (Qwen3-0.6B's template) and QwQ (chatml-think): ChatML turns,
 * tool results as qwen_tool_result writes them.
 * Qwen3: the last query is the last user message whose text is not a
 * wrapped tool response (<tool_response>...</tool_response>); an assistant
 * turn before it keeps only its answer (the text after its last </think>,
 * leading newlines stripped), one after it opens with its reasoning block
 * <think>\nR\n</think>\n\n when it has reasoning or is the last message
 * (the empty block then); +gen <|im_start|>assistant\n, and the empty
 * block after it with thinking off.
 * QwQ: every assistant turn but the last keeps only its answer (the last
 * is as given); a turn with calls whose answer is empty beside its
 * reasoning keeps the template's blank line before the first call; +gen
 * <|im_start|>assistant\n<think>\n, closed by </think> unless thinking is
 * on (the template closes it when enable_thinking is unset too). */
static void render_qwen3_think(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen, int thinking,
                               bool qwq)
{
    int32_t q = n - 1;
    for (int32_t i = n - 1; i >= 0; i--)
        if (is_role(&msgs[i], "user") && !starts_ends(content_of(&msgs[i]), "<tool_response>", "</tool_response>")) {
            q = i;
            break;
        }
    for (int32_t i = 0; i < n; i++) {
        if (is_role(&msgs[i], "tool")) {
            qwen_tool_result(b, msgs, n, i);
            continue;
        }
        sb_add(b, "<|im_start|>");
        sb_add(b, msgs[i].role);
        sb_add(b, "\n");
        const char *c = content_of(&msgs[i]);
        bool last = i == n - 1;
        if (is_role(&msgs[i], "assistant") && qwq) {
            think_split t = split_think(c);
            if (!last && strstr(c, "</think>") && !strncmp(t.c, "<tool_call>", 11)) sb_add(b, "\n");
            sb_add(b, last ? c : t.c);
        } else if (is_role(&msgs[i], "assistant")) {
            think_split t = split_think(c);
            const char *a = t.c;
            if (i > q && (last || t.rn)) {
                sb_add(b, "<think>\n");
                sb_addn(b, t.r, t.rn);
                sb_add(b, "\n</think>\n\n");
                while (*a == '\n') a++;
            }
            sb_add(b, a);
        } else {
            sb_add(b, c);
        }
        sb_add(b, "<|im_end|>\n");
    }
    if (!gen) return;
    sb_add(b, "<|im_start|>assistant\n");
    /* QwQ's own template always opens the block; llama.cpp's copy closes it
     * unless enable_thinking is true: open by default, closed when off */
    if (qwq) sb_add(b, thinking == 0 ? "<think>\n</think>" : "<think>\n");
    else if (thinking == 0) sb_add(b, "<think>\n\n</think>\n\n");
}

/* Qwen3-Coder (xml_tools): ChatML, but tool results are a user turn, each
 * inside <tool_response> on a line of its own, a run of them one turn (its
 * template has no reasoning to drop and no think block).
 * Qwen3.5 (xml_tools, thinks): Qwen3-Coder's results (a newline before
 * each, none before <|im_end|>), every text trimmed, earlier turns'
 * reasoning dropped, an assistant turn after the last user message opening
 * with its reasoning block (the empty one when it has none: the template
 * writes one always), and the generation prompt opening the block
 * (closing it empty, thinking off). Qwen3 itself: render_qwen3_think. */
static void render_qwen3(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen, int thinking,
                         bool xml_tools, bool thinks)
{
    int32_t u = last_user(msgs, n);
    for (int32_t i = 0; i < n; i++) {
        if (xml_tools && is_role(&msgs[i], "tool")) {
            if (i == 0 || !is_role(&msgs[i - 1], "tool")) sb_add(b, thinks ? "<|im_start|>user" : "<|im_start|>user\n");
            if (thinks) sb_add(b, "\n");
            tool_response(b, &msgs[i], thinks);
            if (!thinks) sb_add(b, "\n");
            if (i + 1 == n || !is_role(&msgs[i + 1], "tool")) sb_add(b, "<|im_end|>\n");
            continue;
        }
        sb_add(b, "<|im_start|>");
        sb_add(b, msgs[i].role);
        sb_add(b, "\n");
        /* Qwen3.5 trims every text before it splits it */
        sbuf t = {0};
        if (thinks) sb_add_trimmed(&t, content_of(&msgs[i]));
        if (t.oom) b->oom = true;
        const char *c = thinks ? (t.p ? t.p : "") : content_of(&msgs[i]);
        bool assistant = is_role(&msgs[i], "assistant");
        if (assistant && i < u && (!xml_tools || thinks)) {
            sb_add(b, split_think(c).c);
        } else if (assistant && thinks) {
            think_split ts = split_think(c);
            sb_add(b, "<think>\n");
            while (ts.rn && is_space(ts.r[ts.rn - 1])) ts.rn--;
            while (ts.rn && is_space(*ts.r)) ts.r++, ts.rn--;
            sb_addn(b, ts.r, ts.rn);
            sb_add(b, "\n</think>\n\n");
            sb_add(b, ts.c);
        } else {
            sb_add(b, c);
        }
        free(t.p);
        sb_add(b, "<|im_end|>\n");
    }
    if (gen) sb_add(b, "<|im_start|>assistant\n");
    /* enable_thinking false: Qwen3's and Qwen3.5's templates write an empty
     * think block; Qwen3.5's opens it otherwise */
    if (gen && thinking == 0 && (!xml_tools || thinks)) sb_add(b, "<think>\n\n</think>\n\n");
    else if (gen && thinks) sb_add(b, "<think>\n");
}

/* GLM-4.5/4.6: [gMASK]<sop>, then <|role|>\n and the text; an assistant
 * turn opens with its reasoning in <think></think> (empty before the last
 * user message) and its answer stripped; the generation prompt is the bare
 * <|assistant|> (thinking on). Thinking off (enable_thinking false) puts
 * /nothink after each user text not already ending with it, and the
 * generation prompt closes the reasoning: <|assistant|>\n<think></think>. */
static void render_glm4(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen, int thinking)
{
    int32_t u = last_user(msgs, n);
    sb_add(b, "[gMASK]<sop>");
    for (int32_t i = 0; i < n; i++) {
        if (is_role(&msgs[i], "assistant")) {
            think_split t = split_think(content_of(&msgs[i]));
            sb_add(b, "<|assistant|>\n<think>");
            if (i > u && t.rn) {
                sbuf r = {0};
                sb_addn(&r, t.r, t.rn);
                if (r.oom) b->oom = true;
                else sb_add_trimmed(b, r.p);
                free(r.p);
            }
            sb_add(b, "</think>");
            size_t k = 0;
            while (t.c[k] && is_space(t.c[k])) k++;
            if (t.c[k]) {
                sb_add(b, "\n");
                sb_add_trimmed(b, t.c);
            }
            continue;
        }
        if (is_role(&msgs[i], "tool")) { /* <|observation|> once for a run of results */
            if (i == 0 || !is_role(&msgs[i - 1], "tool")) sb_add(b, "<|observation|>");
            sb_add(b, "\n");
            tool_response(b, &msgs[i], false);
            continue;
        }
        sb_add(b, "<|");
        sb_add(b, msgs[i].role);
        sb_add(b, "|>\n");
        sb_add(b, content_of(&msgs[i]));
        /* thinking off: the template asks each user turn for no thinking */
        if (thinking == 0 && is_role(&msgs[i], "user") && !starts_ends(content_of(&msgs[i]), "", "/nothink"))
            sb_add(b, "/nothink");
    }
    if (gen) sb_add(b, thinking == 0 ? "<|assistant|>\n<think></think>" : "<|assistant|>");
}

static void render_llama3(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen, const char *bos)
{
    sb_add(b, bos);
    for (int32_t i = 0; i < n; i++) {
        sb_add(b, "<|start_header_id|>");
        sb_add(b, msgs[i].role);
        sb_add(b, "<|end_header_id|>\n\n");
        sb_add_trimmed(b, content_of(&msgs[i]));
        sb_add(b, "<|eot_id|>");
    }
    if (gen) sb_add(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_zephyr(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen, const char *eos)
{
    for (int32_t i = 0; i < n; i++) {
        sb_add(b, "<|");
        sb_add(b, msgs[i].role);
        sb_add(b, "|>\n");
        sb_add(b, content_of(&msgs[i]));
        sb_add(b, eos);
        sb_add(b, "\n");
    }
    if (gen) sb_add(b, "<|assistant|>\n");
}

/* Llama 2, Mistral and Gemma have no system turn: system text waits in
 * `sys` and is folded into the next user turn. A system message with no
 * user turn after it becomes a user turn of its own. */
static void render_llama2(sbuf *b, const pagoda_chat_message *msgs, int32_t n, const char *bos,
                          const char *eos)
{
    const char *sys = NULL;
    for (int32_t i = 0; i <= n; i++) {
        bool last = i == n;
        if (!last && is_role(&msgs[i], "system")) {
            sys = content_of(&msgs[i]);
            continue;
        }
        if (!last && is_role(&msgs[i], "assistant")) {
            sb_add(b, " ");
            sb_add_trimmed(b, content_of(&msgs[i]));
            sb_add(b, " ");
            sb_add(b, eos);
            continue;
        }
        if (last && !sys) break;
        sb_add(b, bos);
        sb_add(b, "[INST] ");
        if (sys) {
            sb_add(b, "<<SYS>>\n");
            sb_add_trimmed(b, sys);
            sb_add(b, "\n<</SYS>>\n\n");
            sys = NULL;
        }
        if (!last) sb_add_trimmed(b, content_of(&msgs[i]));
        sb_add(b, " [/INST]");
    }
}

static void render_mistral(sbuf *b, const pagoda_chat_message *msgs, int32_t n, const char *bos,
                           const char *eos)
{
    const char *sys = NULL;
    sb_add(b, bos);
    for (int32_t i = 0; i <= n; i++) {
        bool last = i == n;
        if (!last && is_role(&msgs[i], "system")) {
            sys = content_of(&msgs[i]);
            continue;
        }
        if (!last && is_role(&msgs[i], "assistant")) {
            sb_add(b, content_of(&msgs[i]));
            sb_add(b, eos);
            continue;
        }
        if (last && !sys) break;
        sb_add(b, "[INST] ");
        if (sys) {
            sb_add(b, sys);
            if (!last) sb_add(b, "\n\n");
            sys = NULL;
        }
        if (!last) sb_add(b, content_of(&msgs[i]));
        sb_add(b, " [/INST]");
    }
}

static void render_gemma(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen, const char *bos)
{
    const char *sys = NULL;
    sb_add(b, bos);
    for (int32_t i = 0; i <= n; i++) {
        bool last = i == n;
        if (!last && is_role(&msgs[i], "system")) {
            sys = content_of(&msgs[i]);
            continue;
        }
        if (last && !sys) break;
        const char *role = last ? "user" : is_role(&msgs[i], "assistant") ? "model" : msgs[i].role;
        sb_add(b, "<start_of_turn>");
        sb_add(b, role);
        sb_add(b, "\n");
        if (sys && strcmp(role, "user") == 0) {
            /* Gemma's template prefixes the system text, then trims the whole. */
            sbuf t = {0};
            sb_add(&t, sys);
            if (!last) {
                sb_add(&t, "\n\n");
                sb_add(&t, content_of(&msgs[i]));
            }
            if (t.oom) b->oom = true;
            else sb_add_trimmed(b, t.p);
            free(t.p);
            sys = NULL;
        } else {
            sb_add_trimmed(b, content_of(&msgs[i]));
        }
        sb_add(b, "<end_of_turn>\n");
    }
    if (gen) sb_add(b, "<start_of_turn>model\n");
}

/* ------------------------------------------- DeepSeek-V3/R1, Kimi K2 */

#define DS_BOS "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
#define DS_EOS "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
#define DS_USER "<\xEF\xBD\x9CUser\xEF\xBD\x9C>"
#define DS_OUTS_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81outputs\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_OUTS_END "<\xEF\xBD\x9Ctool\xE2\x96\x81outputs\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_OUT_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81output\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_OUT_END "<\xEF\xBD\x9Ctool\xE2\x96\x81output\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_CALLS_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>"

/* DeepSeek-V3 (r1 false) and R1 (r1 true): the system texts first (V3
 * joins them with a blank line, R1 keeps the last), then <｜User｜> and
 * <｜Assistant｜> turns, an assistant turn closed by <｜end▁of▁sentence｜>;
 * tool results between <｜tool▁outputs▁begin｜> (written once, as the
 * templates do) and <｜tool▁outputs▁end｜>, after which the assistant's
 * answer follows with no role marker. R1 keeps only the text after an
 * earlier turn's last </think> and opens <think>\n in the generation
 * prompt (closed at once when thinking is off). */
static void render_deepseek(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen, bool r1,
                            int thinking, const char *bos)
{
    bool first_sp = true, is_tool = false, out_first = true;
    sb_add(b, bos);
    const char *last_sys = NULL;
    for (int32_t i = 0; i < n; i++) {
        if (!is_role(&msgs[i], "system")) continue;
        if (r1) {
            last_sys = content_of(&msgs[i]);
            continue;
        }
        if (!first_sp) sb_add(b, "\n\n");
        sb_add(b, content_of(&msgs[i]));
        first_sp = false;
    }
    if (last_sys) sb_add(b, last_sys);
    for (int32_t i = 0; i < n; i++) {
        const char *c = content_of(&msgs[i]);
        if (is_role(&msgs[i], "user")) {
            is_tool = false;
            sb_add(b, DS_USER);
            sb_add(b, c);
        } else if (is_role(&msgs[i], "assistant")) {
            if (is_tool) {
                sb_add(b, DS_OUTS_END);
                sb_add(b, c);
                is_tool = false;
            } else {
                sb_add(b, DS_ASSISTANT);
                if (r1) {
                    const char *e = NULL;
                    for (const char *p = strstr(c, "</think>"); p; p = strstr(p + 1, "</think>")) e = p;
                    if (e) c = e + 8;
                }
                sb_add(b, c);
            }
            sb_add(b, DS_EOS);
        } else if (is_role(&msgs[i], "tool")) {
            is_tool = true;
            if (out_first) sb_add(b, DS_OUTS_BEGIN);
            else sb_add(b, "\n");
            out_first = false;
            sb_add(b, DS_OUT_BEGIN);
            sb_add(b, c);
            sb_add(b, DS_OUT_END);
        }
    }
    if (is_tool) sb_add(b, DS_OUTS_END);
    if (gen && !is_tool) {
        sb_add(b, DS_ASSISTANT);
        if (r1) sb_add(b, thinking == 0 ? "<think>\n</think>" : "<think>\n");
    }
}

/* DeepSeek-V3.1: deepseek3's system texts and user turns; an assistant
 * turn right after a user message opens with the closed, empty reasoning
 * (<｜Assistant｜><think></think>), one after a tool result has no marker
 * (the model answers straight after the output), and its text is what
 * follows the first </think> (a turn with calls, which the frontend writes
 * into the content, or one after a result, is as given); results follow one another, each in
 * <｜tool▁output▁begin｜>...<｜tool▁output▁end｜>; the generation prompt
 * only after a user message, closed unless thinking is on. */
static void render_deepseek31(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen, int thinking,
                              const char *bos)
{
    bool first_sp = true, last_user = false, after_tool = false;
    sb_add(b, bos);
    for (int32_t i = 0; i < n; i++) {
        if (!is_role(&msgs[i], "system")) continue;
        if (!first_sp) sb_add(b, "\n\n");
        sb_add(b, content_of(&msgs[i]));
        first_sp = false;
    }
    for (int32_t i = 0; i < n; i++) {
        const char *c = content_of(&msgs[i]);
        if (is_role(&msgs[i], "user")) {
            sb_add(b, DS_USER);
            sb_add(b, c);
            last_user = true;
            after_tool = false;
        } else if (is_role(&msgs[i], "assistant")) {
            if (last_user) sb_add(b, DS_ASSISTANT "<think></think>");
            const char *e = strstr(c, "</think>");
            if (e && !after_tool && !strstr(c, DS_CALLS_BEGIN)) c = e + 8;
            sb_add(b, c);
            sb_add(b, DS_EOS);
            last_user = after_tool = false;
        } else if (is_role(&msgs[i], "tool")) {
            sb_add(b, DS_OUT_BEGIN);
            sb_add(b, c);
            sb_add(b, DS_OUT_END);
            last_user = false;
            after_tool = true;
        }
    }
    if (gen && last_user) sb_add(b, thinking == 1 ? DS_ASSISTANT "<think>" : DS_ASSISTANT "<think></think>");
}

/* Kimi K2: <|im_system|> / <|im_user|> / <|im_assistant|> with the role
 * name and <|im_middle|>, each turn closed by <|im_end|>; a conversation
 * without a system turn first gets Kimi's default one; a tool result is
 * a system turn named tool. */
static void render_kimi(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen)
{
    for (int32_t i = 0; i < n; i++) {
        if (i == 0 && !is_role(&msgs[0], "system"))
            sb_add(b, "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>");
        if (is_role(&msgs[i], "system")) sb_add(b, "<|im_system|>system<|im_middle|>");
        else if (is_role(&msgs[i], "user")) sb_add(b, "<|im_user|>user<|im_middle|>");
        else if (is_role(&msgs[i], "assistant")) sb_add(b, "<|im_assistant|>assistant<|im_middle|>");
        else if (is_role(&msgs[i], "tool")) sb_add(b, "<|im_system|>tool<|im_middle|>");
        sb_add(b, content_of(&msgs[i]));
        sb_add(b, "<|im_end|>");
    }
    if (gen) sb_add(b, "<|im_assistant|>assistant<|im_middle|>");
}

/* ------------------------------------------------------ gpt-oss harmony */

/* "Reasoning: low|medium|high" on a line of s, or NULL. */
static const char *effort_in(const char *s)
{
    static const char *const levels[] = {"low", "medium", "high"};
    for (const char *p = strstr(s, "Reasoning:"); p; p = strstr(p + 1, "Reasoning:")) {
        if (p != s && p[-1] != '\n') continue;
        const char *v = p + 10;
        while (*v == ' ') v++;
        for (int i = 0; i < 3; i++) {
            size_t l = strlen(levels[i]);
            if (!strncasecmp(v, levels[i], l) && (v[l] == '\0' || v[l] == '\n' || v[l] == '\r' || v[l] == ' '))
                return levels[i];
        }
    }
    return NULL;
}

static bool is_effort(const char *e)
{
    return !strcmp(e, "low") || !strcmp(e, "medium") || !strcmp(e, "high");
}

/* gpt-oss's harmony format, as openai/gpt-oss's chat template writes it:
 * a system message (identity, knowledge cutoff, the date, "Reasoning:
 * EFFORT", the valid channels), the first system/developer message as a
 * developer message "# Instructions", then <|start|>ROLE<|message|>...
 * <|end|> turns; an earlier assistant turn is its final channel only (the
 * analysis of earlier turns is dropped, as the template does); the
 * generation prompt is <|start|>assistant, the model writing the channel.
 * Later system messages are dropped, as the template drops them. The
 * frontend's conventions (chat_template.h): a "tools" message is the tools
 * namespace (the developer message's "# Tools", and the system message's
 * line that calls go to the commentary channel), an "analysis" message an
 * assistant's analysis beside its calls. Returns false with err filled for
 * markup in an assistant turn. */
static bool render_harmony(sbuf *b, const pagoda_chat_message *msgs, int32_t n, bool gen, const char *effort,
                           const char *date, char *err, size_t err_len)
{
    char today[16];
    if (!date) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(today, sizeof today, "%Y-%m-%d", &tm);
        date = today;
    }
    const char *tools = NULL;
    for (int32_t i = 0; i < n; i++)
        if (is_role(&msgs[i], "tools")) tools = content_of(&msgs[i]);
    int32_t start = 0;
    while (start < n && is_role(&msgs[start], "tools")) start++;
    const char *dev = NULL;
    if (start < n && (is_role(&msgs[start], "system") || is_role(&msgs[start], "developer"))) {
        dev = content_of(&msgs[start]);
        start++;
    }
    if (!effort && dev) effort = effort_in(dev);
    sb_add(b, "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
              "Knowledge cutoff: 2024-06\nCurrent date: ");
    sb_add(b, date);
    sb_add(b, "\n\nReasoning: ");
    sb_add(b, effort ? effort : "medium");
    sb_add(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
              "message.");
    if (tools) sb_add(b, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    sb_add(b, "<|end|>");
    if ((dev && *dev) || tools) {
        sb_add(b, "<|start|>developer<|message|>");
        if (dev && *dev) {
            sb_add(b, "# Instructions\n\n");
            sb_add(b, dev);
            sb_add(b, "\n\n");
        }
        if (tools) {
            sb_add(b, "# Tools\n\n");
            sb_add(b, tools);
        }
        sb_add(b, "<|end|>");
    }
    for (int32_t i = start; i < n; i++) {
        const char *c = content_of(&msgs[i]);
        bool analysis = is_role(&msgs[i], "analysis");
        if ((analysis || is_role(&msgs[i], "assistant")) &&
            (strstr(c, "<|channel|>") || strstr(c, "<|start|>") || strstr(c, "<|message|>"))) {
            if (err && err_len)
                snprintf(err, err_len, "chat render: message %d (%s) holds harmony markup "
                         "(<|channel|>, <|start|> or <|message|>); give the %s alone as its content", i,
                         msgs[i].role, analysis ? "reasoning" : "final answer");
            return false;
        }
        if (is_role(&msgs[i], "assistant")) {
            bool last = i == n - 1 && !gen;
            sb_add(b, "<|start|>assistant<|channel|>final<|message|>");
            sb_add(b, c);
            sb_add(b, last ? "<|return|>" : "<|end|>");
        } else if (is_role(&msgs[i], "analysis")) {
            /* an assistant's text beside its calls: the template's analysis message */
            sb_add(b, "<|start|>assistant<|channel|>analysis<|message|>");
            sb_add(b, c);
            sb_add(b, "<|end|>");
        } else if (is_role(&msgs[i], "user")) {
            sb_add(b, "<|start|>user<|message|>");
            sb_add(b, c);
            sb_add(b, "<|end|>");
        } else if (is_role(&msgs[i], "assistant written")) {
            /* a call as the model wrote it: its header (the recipient
             * after the channel, <|constrain|>) and arguments */
            sb_add(b, "<|start|>assistant");
            sb_add(b, c);
            sb_add(b, "<|call|>");
        } else if (!strncmp(msgs[i].role, "assistant to=", 13)) {
            /* a call: the role names its recipient, the content is its arguments */
            sb_add(b, "<|start|>");
            sb_add(b, msgs[i].role);
            sb_add(b, "<|channel|>commentary json<|message|>");
            sb_add(b, c);
            sb_add(b, "<|call|>");
        } else if (!strncmp(msgs[i].role, "functions.", 10)) {
            /* a tool's result, authored by the tool, its text as a JSON string */
            sb_add(b, "<|start|>");
            sb_add(b, msgs[i].role);
            sb_add(b, " to=assistant<|channel|>commentary<|message|>");
            sb_add_json_string(b, c);
            sb_add(b, "<|end|>");
        }
    }
    if (gen) sb_add(b, "<|start|>assistant");
    return true;
}

int pagoda_chat_render(pagoda_chat_family f, const pagoda_chat_message *msgs, int32_t n,
                       bool add_generation_prompt, const char *bos_text, const char *eos_text,
                       char **out, char *err, size_t err_len)
{
    return pagoda_chat_render_opts(f, msgs, n, add_generation_prompt, bos_text, eos_text, NULL, out, err,
                                   err_len);
}

int pagoda_chat_render_opts(pagoda_chat_family f, const pagoda_chat_message *msgs, int32_t n,
                            bool add_generation_prompt, const char *bos_text, const char *eos_text,
                            const pagoda_chat_opts *opts, char **out, char *err, size_t err_len)
{
#define FAIL(st, ...) do { if (err && err_len) snprintf(err, err_len, __VA_ARGS__); status = (st); goto out; } while (0)
    int status = PAGODA_OK;
    sbuf b = {0};
    if (out) *out = NULL;
    if (!out) FAIL(PAGODA_ERR_INVALID, "chat render: no output pointer");
    if (n < 0 || (n > 0 && !msgs)) FAIL(PAGODA_ERR_INVALID, "chat render: %d messages at %p", n, (const void *)msgs);
    for (int32_t i = 0; i < n; i++)
        if (!msgs[i].role || !*msgs[i].role)
            FAIL(PAGODA_ERR_INVALID, "chat render: message %d has no role; give system, user or assistant", i);
    int thinking = opts ? opts->enable_thinking : -1;
    const char *effort = opts ? opts->reasoning_effort : NULL;
    if (effort && *effort && !is_effort(effort))
        FAIL(PAGODA_ERR_INVALID, "chat render: reasoning_effort '%s'; expected low, medium or high", effort);
    if (effort && !*effort) effort = NULL;
    if (f == PAGODA_CHAT_HARMONY)
        for (int32_t i = 0; i < n; i++)
            if (is_role(&msgs[i], "tool"))
                FAIL(PAGODA_ERR_UNSUPPORTED, "chat render: message %d is a tool result without its "
                     "function: harmony names the author of a result (give the role as functions.NAME)", i);

    const char *eos = eos_text ? eos_text : "</s>";
    sb_add(&b, ""); /* an empty conversation still renders to a string */
    switch (f) {
    case PAGODA_CHAT_LLAMA2: render_llama2(&b, msgs, n, bos_text ? bos_text : "<s>", eos); break;
    case PAGODA_CHAT_LLAMA3:
        render_llama3(&b, msgs, n, add_generation_prompt, bos_text ? bos_text : "<|begin_of_text|>");
        break;
    case PAGODA_CHAT_MISTRAL: render_mistral(&b, msgs, n, bos_text ? bos_text : "<s>", eos); break;
    case PAGODA_CHAT_ZEPHYR: render_zephyr(&b, msgs, n, add_generation_prompt, eos); break;
    case PAGODA_CHAT_GEMMA: render_gemma(&b, msgs, n, add_generation_prompt, bos_text ? bos_text : "<bos>"); break;
    case PAGODA_CHAT_QWEN3: render_qwen3_think(&b, msgs, n, add_generation_prompt, thinking, false); break;
    case PAGODA_CHAT_CHATML_THINK: render_qwen3_think(&b, msgs, n, add_generation_prompt, thinking, true); break;
    case PAGODA_CHAT_DEEPSEEK3:
    case PAGODA_CHAT_DEEPSEEK_R1:
        render_deepseek(&b, msgs, n, add_generation_prompt, f == PAGODA_CHAT_DEEPSEEK_R1, thinking,
                        bos_text ? bos_text : DS_BOS);
        break;
    case PAGODA_CHAT_DEEPSEEK31:
        render_deepseek31(&b, msgs, n, add_generation_prompt, thinking, bos_text ? bos_text : DS_BOS);
        break;
    case PAGODA_CHAT_KIMI_K2: render_kimi(&b, msgs, n, add_generation_prompt); break;
    case PAGODA_CHAT_HARMONY:
        if (!render_harmony(&b, msgs, n, add_generation_prompt, effort, opts ? opts->date : NULL, err, err_len)) {
            status = PAGODA_ERR_INVALID;
            goto out;
        }
        break;
    case PAGODA_CHAT_GLM4: render_glm4(&b, msgs, n, add_generation_prompt, thinking); break;
    case PAGODA_CHAT_QWEN3_CODER: render_qwen3(&b, msgs, n, add_generation_prompt, thinking, true, false); break;
    case PAGODA_CHAT_QWEN35: render_qwen3(&b, msgs, n, add_generation_prompt, thinking, true, true); break;
    case PAGODA_CHAT_CHATML:
    case PAGODA_CHAT_UNKNOWN:
    default: render_chatml(&b, msgs, n, add_generation_prompt); break;
    }
    if (b.oom) FAIL(PAGODA_ERR_NOMEM, "chat render: out of memory after %zu bytes", b.len);
    *out = b.p;
    b.p = NULL;
out:
    free(b.p);
    return status;
#undef FAIL
}

const char *const *pagoda_chat_stop_strings(pagoda_chat_family f)
{
    static const char *const chatml[] = {"<|im_end|>", NULL};
    static const char *const llama3[] = {"<|eot_id|>", NULL};
    static const char *const gemma[] = {"<end_of_turn>", NULL};
    static const char *const eos[] = {"</s>", NULL};
    static const char *const glm4[] = {"<|user|>", "<|observation|>", "<|endoftext|>", NULL};
    static const char *const deepseek[] = {DS_EOS, NULL};
    /* harmony: <|end|> closes a channel's message, not the reply */
    static const char *const harmony[] = {"<|return|>", "<|call|>", NULL};
    switch (f) {
    case PAGODA_CHAT_DEEPSEEK3:
    case PAGODA_CHAT_DEEPSEEK_R1:
    case PAGODA_CHAT_DEEPSEEK31: return deepseek;
    case PAGODA_CHAT_HARMONY: return harmony;
    case PAGODA_CHAT_GLM4: return glm4;
    case PAGODA_CHAT_LLAMA3: return llama3;
    case PAGODA_CHAT_GEMMA: return gemma;
    case PAGODA_CHAT_LLAMA2:
    case PAGODA_CHAT_MISTRAL:
    case PAGODA_CHAT_ZEPHYR: return eos;
    default: return chatml;
    }
}

/* ------------------------------------------------ default system prompt */

bool pagoda_chat_default_system(const char *t, char *buf, size_t buf_len)
{
    static const char open[] = "<|im_start|>system";
    if (!t) return false;
    for (const char *p = strstr(t, open); p; p = strstr(p + 1, open)) {
        /* It must start a Jinja string literal: a quote right before it. */
        if (p == t || (p[-1] != '\'' && p[-1] != '"')) continue;
        char quote = p[-1];
        const char *q = p + sizeof open - 1;
        /* then a newline, written as an escape or as itself */
        if (q[0] == '\\' && q[1] == 'n') q += 2;
        else if (q[0] == '\n') q += 1;
        else continue;
        /* and literal text up to <|im_end|> inside the same literal; a quote
         * or an expression first means the text is a variable, not a default */
        const char *end = strstr(q, "<|im_end|>");
        if (!end || end == q) continue;
        bool literal = true;
        for (const char *c = q; c < end; c++) {
            if (*c == quote && c[-1] != '\\') { literal = false; break; }
            if (*c == '{' || *c == '}') { literal = false; break; }
        }
        if (!literal) continue;
        size_t w = 0;
        for (const char *c = q; c < end; c++) {
            char ch = *c;
            if (ch == '\\' && c + 1 < end) {
                c++;
                ch = *c == 'n' ? '\n' : *c == 't' ? '\t' : *c;
            }
            if (buf && w + 1 < buf_len) buf[w++] = ch;
        }
        if (buf && buf_len) buf[w] = '\0';
        return true;
    }
    return false;
}
