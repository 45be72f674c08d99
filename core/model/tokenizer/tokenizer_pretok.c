/*
 * tokenizer_pretok.c: the byte-level BPE pre-tokenizer: the regexes of
 * llama.cpp's pre-tokenizer table chosen by tokenizer.ggml.pre, compiled
 * with PCRE2 (Unicode properties, JIT when available), and the split that
 * applies them one after another, as llama.cpp's unicode_regex_split
 * does. pagoda_pretokenize exposes it for tests and tools.
 * Not for: merging the pieces into tokens (tokenizer_encode.c) or the
 * vocabulary (tokenizer.c).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda/types.h"
#include "tokenizer_internal.h"
#include "unicode.h"

static int svec_push(svec *a, size_t off, size_t len)
{
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        pagoda_span *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return PAGODA_ERR_NOMEM;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n].off = off;
    a->v[a->n].len = len;
    a->n++;
    return PAGODA_OK;
}

static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
/* Llama 3's (?i:'s|'t|...) spelt with explicit classes: caseless matching
 * under Unicode rules would also let U+017F (long s) match 's'. */
static const char RE_LLAMA3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The contractions of Llama 3's (?i:...) in explicit classes (see above). */
#define RE_CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* DeepSeek-V3/R1 (LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM): digits in threes,
 * runs of Han (U+4E00-9FA5) and kana apart, then words, punctuation runs
 * and whitespace. */
static const char RE_DSV3_CJK[] = "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
static const char RE_DSV3_WORD[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
/* GPT-4o's o200k (LLAMA_VOCAB_PRE_TYPE_GPT4O) as llama.cpp spells it: the
 * upper-then-lower word classes written with lookaheads, so a letter that
 * is neither ASCII case counts as both. */
static const char RE_GPT4O[] =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" RE_CONTR "?|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" RE_CONTR "?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Kimi K2: the pattern of its tokenization_kimi.py, which llama.cpp quotes
 * (and runs as hand-written code); the class intersection
 * [...&&[^\p{Han}]] is spelt as a (?!\p{Han}) lookahead before the class,
 * with Han as llama.cpp's ranges: CJK ideographs, extensions A-F and the
 * compatibility blocks. */
#define KIMI_HAN "\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2EBEF}" \
                 "\\x{F900}-\\x{FAFF}\\x{2F800}-\\x{2FA1F}"
#define KIMI_UP "(?:(?![" KIMI_HAN "])[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])"
#define KIMI_LO "(?:(?![" KIMI_HAN "])[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])"
static const char RE_KIMI[] =
    "[" KIMI_HAN "]+|"
    "[^\\r\\n\\p{L}\\p{N}]?" KIMI_UP "*" KIMI_LO "+" RE_CONTR "?|"
    "[^\\r\\n\\p{L}\\p{N}]?" KIMI_UP "+" KIMI_LO "*" RE_CONTR "?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* From llama.cpp's pre-tokenizer table (LLAMA_VOCAB_PRE_TYPE_*). */
static const pre_def PRE_DEFS[] = {
    { "default", { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" }, false, false },
    { "llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral", { RE_LLAMA3 }, true, true },
    { "dbrx|smaug-bpe|chatglm-bpe|glm4", { RE_LLAMA3 }, false, false },
    { "qwen2|deepseek-r1-qwen|stablelm2|megrez", { RE_QWEN2 }, false, false },
    { "smollm|starcoder|refact|command-r|codeshell|exaone|minerva-7b", { "\\p{N}", RE_GPT2 }, false, false },
    { "gpt-2|gpt2|phi-2|mpt|olmo|jais|exaone4|jina-es|jina-de|gigachat|roberta-bpe", { RE_GPT2 }, false, false },
    { "deepseek-v3", { "\\p{N}{1,3}", RE_DSV3_CJK, RE_DSV3_WORD }, false, false },
    { "gpt-4o|llama4", { RE_GPT4O }, false, false },
    { "kimi-k2", { RE_KIMI }, false, false },
    { "falcon", { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]" }, false, false },
};
#define PRE_GPT2_INDEX 5

static bool name_in(const char *names, const char *name)
{
    size_t n = strlen(name);
    const char *p = names;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && memcmp(p, name, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

/* The definition for a pre name; *known = false when it fell back. */
const pre_def *pagoda_pretok_find(const char *name, bool *known)
{
    *known = true;
    if (!name || !*name) return &PRE_DEFS[0];
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++)
        if (name_in(PRE_DEFS[i].names, name)) return &PRE_DEFS[i];
    *known = false;
    return &PRE_DEFS[PRE_GPT2_INDEX];
}

void pagoda_pretok_free(pretok *p)
{
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    p->n = 0;
}

int pagoda_pretok_init(pretok *p, const pre_def *d, char *err, size_t err_len)
{
    p->n = 0;
    for (int i = 0; i < PRE_MAX_RE && d->re[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)d->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            pagoda_tok_seterr(err, err_len, "pre-tokenizer regex %d of '%s' does not compile at %zu: %s", i,
                              d->names, (size_t)eo, (const char *)msg);
            pagoda_pretok_free(p);
            return PAGODA_ERR_INTERNAL;
        }
        /* JIT is an optimization only: the interpreter gives the same answers. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        p->re[p->n++] = re;
    }
    return PAGODA_OK;
}

/* Split text into out (appended): each regex refines every piece so far. */
int pagoda_pretok_split(const pretok *p, const char *text, size_t len, svec *out)
{
    int st = PAGODA_OK;
    svec cur = { 0 }, next = { 0 };
    pcre2_match_data *md = NULL;
    if (len == 0) return PAGODA_OK;
    if ((st = svec_push(&cur, 0, len))) goto out;
    for (int r = 0; r < p->n; r++) {
        pcre2_code *re = p->re[r];
        md = pcre2_match_data_create_from_pattern(re, NULL);
        if (!md) { st = PAGODA_ERR_NOMEM; goto out; }
        next.n = 0;
        for (size_t s = 0; s < cur.n; s++) {
            /* The subject is the piece alone: lookaheads see its end. */
            const char *sub = text + cur.v[s].off;
            size_t sl = cur.v[s].len, pos = 0, last = 0;
            while (pos < sl) {
                int rc = pcre2_match(re, (PCRE2_SPTR)sub, sl, pos, 0, md, NULL);
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) { st = PAGODA_ERR_INTERNAL; goto out; }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                size_t ms = ov[0], me = ov[1];
                if (me <= ms) { /* none of our patterns matches empty; be safe */
                    pos = ms + pagoda_utf8_seq_len((uint8_t)sub[ms]);
                    continue;
                }
                if (ms > last && (st = svec_push(&next, cur.v[s].off + last, ms - last))) goto out;
                if ((st = svec_push(&next, cur.v[s].off + ms, me - ms))) goto out;
                last = pos = me;
            }
            if (last < sl && (st = svec_push(&next, cur.v[s].off + last, sl - last))) goto out;
        }
        pcre2_match_data_free(md);
        md = NULL;
        svec tmp = cur; cur = next; next = tmp;
    }
    for (size_t s = 0; s < cur.n; s++)
        if ((st = svec_push(out, cur.v[s].off, cur.v[s].len))) goto out;
out:
    pcre2_match_data_free(md);
    free(cur.v);
    free(next.v);
    return st;
}

int pagoda_pretokenize(const char *pre_name, const char *text, size_t len, pagoda_span *spans,
                       size_t cap, size_t *n_out, char *err, size_t err_len)
{
    if ((!text && len) || !n_out || (!spans && cap)) {
        pagoda_tok_seterr(err, err_len, "pagoda_pretokenize: NULL text, spans or n_out");
        return PAGODA_ERR_INVALID;
    }
    bool known;
    const pre_def *d = pagoda_pretok_find(pre_name, &known);
    pretok p;
    svec out = { 0 };
    int st = pagoda_pretok_init(&p, d, err, err_len);
    if (st) return st;
    st = pagoda_pretok_split(&p, text, len, &out);
    if (st == PAGODA_OK) {
        for (size_t i = 0; i < out.n && i < cap; i++) spans[i] = out.v[i];
        *n_out = out.n;
    } else {
        pagoda_tok_seterr(err, err_len, "pagoda_pretokenize: %s", pagoda_status_str(st));
    }
    free(out.v);
    pagoda_pretok_free(&p);
    return st;
}
