/*
 * tokenizer.c: the vocabulary half of the tokenizers in tokenizer.h:
 * loading tokenizer.ggml.* from a GGUF file (SentencePiece "llama" or
 * byte-level BPE "gpt2"), the piece -> id and merge tables, special and
 * end-of-generation tokens, each token's decoded bytes (id -> text), and
 * the queries. Behaviour follows llama.cpp's llama-vocab.cpp so that its
 * reference tokenizations hold.
 * Not for: text -> ids (tokenizer_encode.c), the BPE pre-tokenizer
 * regexes (tokenizer_pretok.c), chat templates, streaming
 * detokenization, reading GGUF files.
 */
#define _GNU_SOURCE /* qsort_r */
#include "tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "pagoda/types.h"
#include "tokenizer_internal.h"
#include "unicode.h"

/* Shared by the tokenizer files: a message into err, when there is room. */
void pagoda_tok_seterr(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* --------------------------------------------------------- piece map */

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

static int build_piece_map(pagoda_tokenizer *t)
{
    size_t cap = pow2_at_least((size_t)t->n_vocab * 2);
    t->slots = malloc(cap * sizeof *t->slots);
    if (!t->slots) return PAGODA_ERR_NOMEM;
    memset(t->slots, 0xFF, cap * sizeof *t->slots);
    t->slot_mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = tok_text(t, id);
        size_t n = t->text_len[id];
        size_t i = (size_t)XXH3_64bits(s, n) & t->slot_mask;
        for (;;) {
            int32_t o = t->slots[i];
            if (o < 0) { t->slots[i] = id; break; }
            /* A duplicate text: the last id wins, as in llama.cpp. */
            if (t->text_len[o] == n && memcmp(tok_text(t, o), s, n) == 0) { t->slots[i] = id; break; }
            i = (i + 1) & t->slot_mask;
        }
    }
    return PAGODA_OK;
}

/* --------------------------------------------------------- merge map */

/* Merges are "left right" strings; both halves must be tokens (as Hugging
 * Face requires), so a merge is keyed by the pair of ids. The first of
 * two equal merges keeps its rank, as llama.cpp's emplace does. */
static int build_merges(pagoda_tokenizer *t, const gguf_kv *kv, char *err, size_t err_len)
{
    const gguf_value *v = &kv->val;
    if (v->type != GGUF_T_ARRAY || v->v.arr.elem_type != GGUF_T_STRING) {
        pagoda_tok_seterr(err, err_len, "tokenizer.ggml.merges: expected an array of strings, found type %s",
                          pagoda_gguf_vtype_name(v->type));
        return PAGODA_ERR_INVALID;
    }
    uint64_t n = v->v.arr.count;
    if (n == 0) return PAGODA_OK;
    if (n > INT32_MAX) {
        pagoda_tok_seterr(err, err_len, "tokenizer.ggml.merges: %llu entries is too many", (unsigned long long)n);
        return PAGODA_ERR_INVALID;
    }
    size_t cap = pow2_at_least((size_t)n * 2);
    t->mkey = malloc(cap * sizeof *t->mkey);
    t->mrank = malloc(cap * sizeof *t->mrank);
    t->mres = malloc(cap * sizeof *t->mres);
    char *buf = NULL;
    size_t buf_cap = 0;
    if (!t->mkey || !t->mrank || !t->mres) return PAGODA_ERR_NOMEM;
    memset(t->mkey, 0xFF, cap * sizeof *t->mkey);
    t->mmask = cap - 1;
    for (uint64_t m = 0; m < n; m++) {
        const gguf_str *s = &v->v.arr.strs[m];
        const char *p = s->ptr;
        size_t len = (size_t)s->len;
        const char *sp = len > 1 ? memchr(p + 1, ' ', len - 1) : NULL;
        if (!sp) continue; /* not "a b": llama.cpp would refuse; we skip it */
        size_t ln = (size_t)(sp - p), rn = len - ln - 1;
        int32_t l = tok_lookup(t, p, ln), r = tok_lookup(t, sp + 1, rn);
        if (l < 0 || r < 0) continue; /* can never apply: its halves are no tokens */
        if (ln + rn > buf_cap) {
            buf_cap = (ln + rn) * 2;
            char *nb = realloc(buf, buf_cap);
            if (!nb) { free(buf); return PAGODA_ERR_NOMEM; }
            buf = nb;
        }
        memcpy(buf, p, ln);
        memcpy(buf + ln, sp + 1, rn);
        int32_t res = tok_lookup(t, buf, ln + rn);
        uint64_t k = TOK_MKEY(l, r);
        size_t i = tok_mix64(k) & t->mmask;
        while (t->mkey[i] != TOK_MKEY_EMPTY && t->mkey[i] != k) i = (i + 1) & t->mmask;
        if (t->mkey[i] == k) continue; /* first rank wins */
        t->mkey[i] = k;
        t->mrank[i] = (int32_t)m;
        t->mres[i] = res;
    }
    free(buf);
    return PAGODA_OK;
}

/* ------------------------------------------------------------ decode */

const char *pagoda_token_bytes(const pagoda_tokenizer *t, int32_t id, bool render_special, size_t *len)
{
    if (!t || id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return "";
    }
    uint8_t ty = t->types[id];
    if (ty == TT_CONTROL || ty == TT_UNKNOWN || ty == TT_UNUSED) {
        for (int i = 0; i < t->n_shown && !render_special; i++)
            if (t->shown[i] == id) render_special = true;
        if (!render_special) {
            if (len) *len = 0;
            return "";
        }
        if (len) *len = t->text_len[id];
        return tok_text(t, id);
    }
    if (len) *len = t->dec_len[id];
    return t->dec + t->dec_off[id];
}

bool pagoda_tokenizer_is_plain(const pagoda_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_vocab) return false;
    uint8_t ty = t->types[id];
    return ty == TT_NORMAL || ty == TT_BYTE || ty == TT_UNDEFINED;
}

/* "<0xNN>" -> NN, or -1. */
static int parse_byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decoded bytes of one token into dst (room for its text length); returns
 * the length. */
static size_t decode_token(const pagoda_tokenizer *t, int32_t id, char *dst)
{
    const char *s = tok_text(t, id);
    size_t n = t->text_len[id], o = 0;
    uint8_t ty = t->types[id];
    if (ty == TT_BYTE) {
        int b = parse_byte_token(s, n);
        if (b >= 0) { dst[0] = (char)b; return 1; }
    }
    if (ty == TT_USER || ty == TT_CONTROL || ty == TT_UNKNOWN || ty == TT_UNUSED || ty == TT_BYTE) {
        memcpy(dst, s, n);
        return n;
    }
    if (t->kind == VOCAB_SPM) {
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) { dst[o++] = ' '; i += 3; }
            else dst[o++] = s[i++];
        }
        return o;
    }
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = pagoda_utf8_decode(s + i, n - i, &cp);
        int b = pagoda_bpe_cp_to_byte(cp);
        if (b >= 0) dst[o++] = (char)b;
        else { memcpy(dst + o, s + i, k); o += k; } /* not a mapped char: keep as is */
        i += k;
    }
    return o;
}

/* ------------------------------------------------------------- load */

static int32_t get_id(const gguf_file *f, const char *key, int32_t n_vocab)
{
    int64_t v;
    if (!pagoda_gguf_get_int(f, key, &v)) return -1;
    return v >= 0 && v < n_vocab ? (int32_t)v : -1; /* 0xFFFFFFFF means none */
}

/* A control token named s (when the vocabulary has one) decodes as its text. */
static void shown_add(pagoda_tokenizer *t, const char *s)
{
    int32_t id = tok_lookup(t, s, strlen(s));
    if (id < 0 || t->types[id] != TT_CONTROL || t->n_shown >= SHOWN_MAX) return;
    t->shown[t->n_shown++] = id;
}

static void eog_add(pagoda_tokenizer *t, int32_t id)
{
    if (id < 0 || t->n_eog >= EOG_MAX) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    t->eog[t->n_eog++] = id;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const pagoda_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

pagoda_tokenizer *pagoda_tokenizer_load(const gguf_file *f, char *err, size_t err_len)
{
    pagoda_tokenizer *t = NULL;
    char *model = NULL, *pre = NULL;
    int st = PAGODA_OK;
    if (err && err_len) err[0] = '\0';
    if (!f) {
        pagoda_tok_seterr(err, err_len, "pagoda_tokenizer_load: no GGUF file");
        return NULL;
    }
    model = pagoda_gguf_get_str(f, "tokenizer.ggml.model");
    if (!model) {
        pagoda_tok_seterr(err, err_len, "%s: no tokenizer.ggml.model key: the file carries no vocabulary", f->path ? f->path : "gguf");
        goto fail;
    }
    t = calloc(1, sizeof *t);
    if (!t) goto nomem;
    if (strcmp(model, "llama") == 0) t->kind = VOCAB_SPM;
    else if (strcmp(model, "gpt2") == 0) t->kind = VOCAB_BPE;
    else {
        pagoda_tok_seterr(err, err_len, "%s: tokenizer.ggml.model is '%s'; supported: 'llama' (SentencePiece), 'gpt2' (byte-level BPE)",
                          f->path ? f->path : "gguf", model);
        goto fail;
    }

    const gguf_kv *kt = pagoda_gguf_find(f, "tokenizer.ggml.tokens");
    if (!kt || kt->val.type != GGUF_T_ARRAY || kt->val.v.arr.elem_type != GGUF_T_STRING ||
        kt->val.v.arr.count == 0 || kt->val.v.arr.count > INT32_MAX) {
        pagoda_tok_seterr(err, err_len, "%s: tokenizer.ggml.tokens: expected a non-empty array of strings", f->path ? f->path : "gguf");
        goto fail;
    }
    t->n_vocab = (int32_t)kt->val.v.arr.count;
    size_t nv = (size_t)t->n_vocab;

    const gguf_kv *ks = pagoda_gguf_find(f, "tokenizer.ggml.scores");
    const gguf_kv *kty = pagoda_gguf_find(f, "tokenizer.ggml.token_type");
    if (ks && (ks->val.type != GGUF_T_ARRAY || ks->val.v.arr.count != nv ||
               (ks->val.v.arr.elem_type != GGUF_T_FLOAT32 && ks->val.v.arr.elem_type != GGUF_T_FLOAT64))) {
        pagoda_tok_seterr(err, err_len, "tokenizer.ggml.scores: expected %zu floats", nv);
        goto fail;
    }
    if (kty && (kty->val.type != GGUF_T_ARRAY || kty->val.v.arr.count != nv ||
                kty->val.v.arr.elem_type == GGUF_T_STRING || kty->val.v.arr.elem_type == GGUF_T_ARRAY ||
                kty->val.v.arr.elem_type == GGUF_T_FLOAT32 || kty->val.v.arr.elem_type == GGUF_T_FLOAT64)) {
        pagoda_tok_seterr(err, err_len, "tokenizer.ggml.token_type: expected %zu integers", nv);
        goto fail;
    }

    /* Copy the texts: the tokenizer outlives the mapping. */
    size_t total = 0;
    for (size_t i = 0; i < nv; i++) {
        uint64_t l = kt->val.v.arr.strs[i].len;
        if (l > UINT32_MAX / 4) {
            pagoda_tok_seterr(err, err_len, "tokenizer.ggml.tokens[%zu]: %llu bytes is too long", i, (unsigned long long)l);
            goto fail;
        }
        total += (size_t)l + 1;
    }
    t->text = malloc(total);
    t->text_off = malloc(nv * sizeof *t->text_off);
    t->text_len = malloc(nv * sizeof *t->text_len);
    t->scores = calloc(nv, sizeof *t->scores);
    t->types = malloc(nv);
    t->dec_off = malloc(nv * sizeof *t->dec_off);
    t->dec_len = malloc(nv * sizeof *t->dec_len);
    t->dec = malloc(total + 1); /* decoding never lengthens a token */
    if (!t->text || !t->text_off || !t->text_len || !t->scores || !t->types || !t->dec_off ||
        !t->dec_len || !t->dec)
        goto nomem;
    size_t o = 0;
    for (size_t i = 0; i < nv; i++) {
        const gguf_str *s = &kt->val.v.arr.strs[i];
        memcpy(t->text + o, s->ptr, (size_t)s->len);
        t->text[o + s->len] = '\0';
        t->text_off[i] = o;
        t->text_len[i] = (uint32_t)s->len;
        o += (size_t)s->len + 1;
        t->scores[i] = ks ? (float)pagoda_gguf_arr_num(&ks->val, i) : 0.0f;
        int64_t ty = kty ? (int64_t)pagoda_gguf_arr_num(&kty->val, i) : TT_NORMAL;
        /* Undefined or unknown type numbers are treated as normal text. */
        t->types[i] = ty >= TT_NORMAL && ty <= TT_BYTE ? (uint8_t)ty : TT_NORMAL;
    }
    if ((st = build_piece_map(t))) goto stfail;

    size_t d = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->dec_off[i] = d;
        t->dec_len[i] = (uint32_t)decode_token(t, i, t->dec + d);
        d += t->dec_len[i];
    }

    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = tok_lookup(t, name, 6);
        if (t->byte_id[b] < 0) { /* a vocabulary with raw single-byte tokens */
            char c = (char)b;
            t->byte_id[b] = tok_lookup(t, &c, 1);
        }
    }

    t->bos = get_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab);
    t->eos = get_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab);
    t->unk = get_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab);
    t->eot = get_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab);
    t->eom = get_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab);

    bool known = true;
    const pre_def *pd = NULL;
    if (t->kind == VOCAB_SPM) {
        t->add_bos = true;
        t->add_space_prefix = true;
    } else {
        pre = pagoda_gguf_get_str(f, "tokenizer.ggml.pre");
        pd = pagoda_pretok_find(pre, &known);
        if (!known)
            fprintf(stderr, "pagoda: warning: %s: unknown tokenizer.ggml.pre '%s', using the GPT-2 pre-tokenizer; "
                    "tokenization may differ from the model's own\n", f->path ? f->path : "gguf", pre);
        t->add_bos = pd->add_bos;
        t->ignore_merges = pd->ignore_merges;
        if ((st = pagoda_pretok_init(&t->pre, pd, err, err_len))) goto stfail;
        const gguf_kv *km = pagoda_gguf_find(f, "tokenizer.ggml.merges");
        if (!km) {
            pagoda_tok_seterr(err, err_len, "%s: byte-level BPE vocabulary without tokenizer.ggml.merges", f->path ? f->path : "gguf");
            goto fail;
        }
        if ((st = build_merges(t, km, err, err_len))) goto stfail;
    }
    bool flag;
    if (pagoda_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &flag)) t->add_bos = flag;
    if (pagoda_gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &flag)) t->add_eos = flag;
    if (pagoda_gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &flag) && t->kind == VOCAB_SPM)
        t->add_space_prefix = flag;

    /* Special tokens for the partition: control, user-defined, unknown. */
    t->specials = malloc(nv * sizeof *t->specials);
    if (!t->specials) goto nomem;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->types[i];
        if ((ty == TT_CONTROL || ty == TT_USER || ty == TT_UNKNOWN) && t->text_len[i] > 0)
            t->specials[t->n_specials++] = i;
    }
    qsort_r(t->specials, (size_t)t->n_specials, sizeof *t->specials, cmp_special, t);

    eog_add(t, t->eos);
    eog_add(t, t->eot);
    eog_add(t, t->eom);
    static const char *const EOG_NAMES[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
        "<EOT>", "_<EOT>", "<|end_of_text|>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    };
    for (size_t i = 0; i < sizeof EOG_NAMES / sizeof EOG_NAMES[0]; i++) {
        int32_t id = tok_lookup(t, EOG_NAMES[i], strlen(EOG_NAMES[i]));
        /* Only as special tokens: a normal piece that happens to read
         * "<|end|>" is text the model may legitimately produce. */
        if (id >= 0 && t->types[id] != TT_NORMAL) eog_add(t, id);
    }
    /* gpt-oss's harmony (o200k_harmony): <|return|> ends the reply and
     * <|call|> a tool call, while <|end|> only closes one channel's message
     * (the analysis comes before the final answer), so there it is no end. */
    static const char *const HARMONY[] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                                          "<|constrain|>", "<|call|>", "<|return|>"};
    int32_t ret = tok_lookup(t, "<|return|>", 10), call = tok_lookup(t, "<|call|>", 8);
    if (ret >= 0 && call >= 0 && t->types[ret] != TT_NORMAL && t->types[call] != TT_NORMAL) {
        int32_t end = tok_lookup(t, "<|end|>", 7);
        int k = 0;
        for (int i = 0; i < t->n_eog; i++)
            if (t->eog[i] != end) t->eog[k++] = t->eog[i];
        t->n_eog = k;
        eog_add(t, ret);
        eog_add(t, call);
        for (size_t i = 0; i < sizeof HARMONY / sizeof HARMONY[0]; i++) shown_add(t, HARMONY[i]);
    }
    /* Reasoning and tool-call markup the frontend reads out of the text
     * (plugins/frontend/http/api/toolfmt.h): kept in the output when the
     * vocabulary makes them control tokens, as llama.cpp does for gpt-oss. */
    static const char *const MARKUP[] = {
        "<think>", "</think>", "<tool_call>", "</tool_call>", "<|python_tag|>",
        "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",
        "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>",
        "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>",
        "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>",
        "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>",
        "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>",
        "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>",
    };
    /* shown_add drops what does not fit: every name of both lists must */
    _Static_assert(sizeof HARMONY / sizeof HARMONY[0] + sizeof MARKUP / sizeof MARKUP[0] <= SHOWN_MAX,
                   "SHOWN_MAX below the control tokens kept in the text");
    for (size_t i = 0; i < sizeof MARKUP / sizeof MARKUP[0]; i++) shown_add(t, MARKUP[i]);

    free(model);
    free(pre);
    return t;

nomem:
    st = PAGODA_ERR_NOMEM;
stfail:
    if (err && err_len && (!err[0] || st == PAGODA_ERR_NOMEM))
        pagoda_tok_seterr(err, err_len, "loading the tokenizer: %s", pagoda_status_str(st));
fail:
    free(model);
    free(pre);
    pagoda_tokenizer_free(t);
    return NULL;
}

void pagoda_tokenizer_free(pagoda_tokenizer *t)
{
    if (!t) return;
    pagoda_pretok_free(&t->pre);
    free(t->text);
    free(t->text_off);
    free(t->text_len);
    free(t->dec);
    free(t->dec_off);
    free(t->dec_len);
    free(t->scores);
    free(t->types);
    free(t->slots);
    free(t->mkey);
    free(t->mrank);
    free(t->mres);
    free(t->specials);
    free(t);
}

/* ------------------------------------------------------------ queries */

int32_t pagoda_tokenizer_n_vocab(const pagoda_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t pagoda_tokenizer_bos(const pagoda_tokenizer *t) { return t ? t->bos : -1; }
int32_t pagoda_tokenizer_eos(const pagoda_tokenizer *t) { return t ? t->eos : -1; }
bool pagoda_tokenizer_add_bos(const pagoda_tokenizer *t) { return t && t->add_bos && t->bos >= 0; }

bool pagoda_tokenizer_is_eog(const pagoda_tokenizer *t, int32_t id)
{
    if (!t || id < 0) return false;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

int32_t pagoda_tokenizer_find(const pagoda_tokenizer *t, const char *piece)
{
    if (!t || !piece) return -1;
    return tok_lookup(t, piece, strlen(piece));
}

const char *pagoda_tokenizer_piece(const pagoda_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    return tok_text(t, id);
}
