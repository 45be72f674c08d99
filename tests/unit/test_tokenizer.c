/*
 * test_tokenizer.c: the tokenizers against llama.cpp's reference
 * tokenizations (tests/data/vocab, see SOURCES.md there), the pre-tokenizer
 * splits derived by hand from the regex definitions, decode round trips,
 * byte fallback, special-token parsing, the stories260K prompt from its
 * golden file, and the UTF-8 helpers.
 */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_writer.h"
#include "pagoda/types.h"
#include "testutil.h"
#include "tokenizer.h"
#include "unicode.h"

/* ------------------------------------------------------------ helpers */

static char *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, fp) != (size_t)n) { free(b); b = NULL; }
    fclose(fp);
    if (b) { b[n] = '\0'; *len = (size_t)n; }
    return b;
}

typedef struct vocab_fixture {
    gguf_file *f;
    pagoda_tokenizer *t;
} vocab_fixture;

static vocab_fixture load_vocab(const char *rel)
{
    vocab_fixture v;
    char err[512] = "";
    v.f = pagoda_gguf_open(tu_src(rel), err, sizeof err);
    ck_assert_msg(v.f != NULL, "open %s: %s", rel, err);
    v.t = pagoda_tokenizer_load(v.f, err, sizeof err);
    ck_assert_msg(v.t != NULL, "load %s: %s", rel, err);
    /* The tokenizer copies what it needs: close the file at once to prove it. */
    pagoda_gguf_close(v.f);
    v.f = NULL;
    return v;
}

/* Tokenize into a malloc'd array (exercising the retry-with-bigger-buffer
 * contract: the first call gets a buffer that is too small). */
static int32_t *tok(const pagoda_tokenizer *t, const char *s, size_t len, bool add_special,
                    bool parse_special, int32_t *n)
{
    int32_t small[2];
    ck_assert_int_eq(pagoda_tokenize(t, s, len, add_special, parse_special, small, 2, n), PAGODA_OK);
    int32_t *ids = malloc(sizeof *ids * (size_t)(*n + 1));
    int32_t n2 = -1;
    ck_assert_int_eq(pagoda_tokenize(t, s, len, add_special, parse_special, ids, *n, &n2), PAGODA_OK);
    ck_assert_int_eq(n2, *n);
    for (int32_t i = 0; i < *n && i < 2; i++) ck_assert_int_eq(small[i], ids[i]);
    return ids;
}

/* Concatenated token bytes (malloc'd, NUL-terminated). */
static char *detok(const pagoda_tokenizer *t, const int32_t *ids, int32_t n, bool render, size_t *len)
{
    size_t cap = 16, o = 0;
    char *b = malloc(cap);
    for (int32_t i = 0; i < n; i++) {
        size_t l;
        const char *p = pagoda_token_bytes(t, ids[i], render, &l);
        while (o + l + 1 > cap) { cap *= 2; b = realloc(b, cap); }
        memcpy(b + o, p, l);
        o += l;
    }
    b[o] = '\0';
    *len = o;
    return b;
}

/* Run every case of a llama.cpp vocab test (X.gguf.inp / X.gguf.out):
 * inputs separated by "\n__ggml_vocab_test__\n", one line of ids per
 * input. Tokenized as test-tokenizer-0 does: no BOS, no special parsing. */
static void run_vocab_cases(const pagoda_tokenizer *t, const char *inp_rel, const char *out_rel,
                            int n_cases, bool check_roundtrip, bool spm_prefix)
{
    size_t il, ol;
    char *inp = read_file(tu_src(inp_rel), &il);
    char *outs = read_file(tu_src(out_rel), &ol);
    ck_assert_msg(inp && outs, "missing %s or %s", inp_rel, out_rel);
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof SEP - 1;
    char *ip = inp, *op = outs;
    int cases = 0;
    while (ip < inp + il) {
        char *e = memmem(ip, (size_t)(inp + il - ip), SEP, sep_len);
        size_t len = e ? (size_t)(e - ip) : (size_t)(inp + il - ip);
        char *ol_end = strchr(op, '\n');
        ck_assert_msg(ol_end != NULL, "%s: fewer lines than cases", out_rel);
        *ol_end = '\0';
        int32_t expect[512], ne = 0;
        for (char *q = op; *q;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            expect[ne++] = (int32_t)v;
            q = end;
        }
        int32_t n;
        int32_t *ids = tok(t, ip, len, false, false, &n);
        char got[4096] = "";
        size_t gl = 0;
        for (int32_t i = 0; i < n && gl < sizeof got - 16; i++) gl += (size_t)snprintf(got + gl, sizeof got - gl, " %d", ids[i]);
        ck_assert_msg(n == ne && memcmp(ids, expect, sizeof *ids * (size_t)n) == 0,
                      "%s case %d '%.*s': expected '%s', got '%s'", inp_rel, cases, (int)len, ip, op, got);
        if (check_roundtrip) {
            size_t dl;
            char *d = detok(t, ids, n, false, &dl);
            /* SentencePiece adds a space before the text (llama.cpp strips it
             * when detokenizing a whole prompt). */
            size_t skip = spm_prefix && len > 0 ? 1 : 0;
            ck_assert_msg(dl == len + skip && memcmp(d + skip, ip, len) == 0 && (!skip || d[0] == ' '),
                          "%s case %d: decode gives '%s'", inp_rel, cases, d);
            free(d);
        }
        free(ids);
        cases++;
        op = ol_end + 1;
        if (!e) break;
        ip = e + sep_len;
    }
    /* every case of the file ran, and the .out has no more lines */
    ck_assert_int_eq(cases, n_cases);
    ck_assert_msg(*op == '\0', "%s: more lines than cases", out_rel);
    free(inp);
    free(outs);
}

/* ----------------------------------------------------------- UTF-8 */

START_TEST(utf8_complete_prefix)
{
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("abc", 3), 3);
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("", 0), 0);
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("a\xE2\x96", 3), 1);        /* U+2581 cut */
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("a\xE2\x96\x81", 4), 4);
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("\xF0\x9F\x98", 3), 0);     /* emoji cut */
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("\xC3", 1), 0);
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("\xFF", 1), 1);             /* invalid: emit */
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("a\x80", 2), 2);            /* stray continuation */
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("\xED\xA0", 2), 2);         /* surrogate: never completes */
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("\xE0\x80", 2), 2);         /* overlong: never completes */
    ck_assert_uint_eq(pagoda_utf8_complete_prefix("\xC3\xA9\xE6\x88", 4), 2);
}
END_TEST

START_TEST(utf8_valid)
{
    ck_assert(pagoda_utf8_valid("", 0));
    ck_assert(pagoda_utf8_valid("h\xC3\xA9llo \xE6\x88\x91 \xF0\x9F\xA6\x99", 15));
    ck_assert(!pagoda_utf8_valid("\xC0\xAF", 2));           /* overlong '/' */
    ck_assert(!pagoda_utf8_valid("\xED\xA0\x80", 3));       /* surrogate */
    ck_assert(!pagoda_utf8_valid("\xF4\x90\x80\x80", 4));   /* > U+10FFFF */
    ck_assert(!pagoda_utf8_valid("\xE2\x96", 2));           /* truncated */
    ck_assert(!pagoda_utf8_valid("a\x80", 2));
    uint32_t cp;
    ck_assert_uint_eq(pagoda_utf8_decode("\xF0\x9F\xA6\x99", 4, &cp), 4);
    ck_assert_uint_eq(cp, 0x1F999);
    ck_assert_uint_eq(pagoda_utf8_decode("\xFF", 1, &cp), 1);
    ck_assert_uint_eq(cp, 0xFFFD);
    char buf[4];
    ck_assert_uint_eq(pagoda_utf8_encode(0x2581, buf), 3);
    ck_assert(memcmp(buf, "\xE2\x96\x81", 3) == 0);
    ck_assert_uint_eq(pagoda_utf8_encode(0xD800, buf), 0);
}
END_TEST

START_TEST(bpe_byte_map)
{
    bool seen[512] = { false };
    for (int b = 0; b < 256; b++) {
        uint32_t cp = pagoda_bpe_byte_to_cp((uint8_t)b);
        ck_assert_uint_lt(cp, 512);
        ck_assert_msg(!seen[cp], "code point %u used twice", cp);
        seen[cp] = true;
        ck_assert_int_eq(pagoda_bpe_cp_to_byte(cp), b);
    }
    ck_assert_uint_eq(pagoda_bpe_byte_to_cp(' '), 0x120);  /* 'Ġ' */
    ck_assert_uint_eq(pagoda_bpe_byte_to_cp('\n'), 0x10A); /* 'Ċ' */
    ck_assert_uint_eq(pagoda_bpe_byte_to_cp('a'), 'a');
    ck_assert_uint_eq(pagoda_bpe_byte_to_cp(0xAD), 0x143);
    ck_assert_int_eq(pagoda_bpe_cp_to_byte(0x144), -1);
    ck_assert_int_eq(pagoda_bpe_cp_to_byte(' '), -1);
}
END_TEST

/* ----------------------------------------------------- pre-tokenizer */

/* Split s with pre and compare with the expected pieces (NULL-ended). */
static void check_split(const char *pre, const char *s, const char *const *expect)
{
    pagoda_span sp[64];
    size_t n = 0;
    char err[256] = "";
    size_t len = strlen(s);
    ck_assert_msg(pagoda_pretokenize(pre, s, len, sp, 64, &n, err, sizeof err) == PAGODA_OK, "%s", err);
    size_t ne = 0;
    while (expect[ne]) ne++;
    char got[1024] = "";
    size_t gl = 0;
    for (size_t i = 0; i < n && i < 64 && gl < sizeof got - 64; i++)
        gl += (size_t)snprintf(got + gl, sizeof got - gl, "[%.*s]", (int)sp[i].len, s + sp[i].off);
    ck_assert_msg(n == ne, "%s on '%s': expected %zu pieces, got %zu: %s", pre, s, ne, n, got);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(sp[i].off == at, "%s on '%s': gap before piece %zu", pre, s, i);
        ck_assert_msg(sp[i].len == strlen(expect[i]) && memcmp(s + sp[i].off, expect[i], sp[i].len) == 0,
                      "%s on '%s': piece %zu is not [%s]: %s", pre, s, i, expect[i], got);
        at += sp[i].len;
    }
    ck_assert_uint_eq(at, len);
}

#define SPLIT(pre, s, ...) check_split(pre, s, (const char *const[]){ __VA_ARGS__, NULL })

START_TEST(pretok_gpt2)
{
    SPLIT("gpt-2", "Hello world", "Hello", " world");
    SPLIT("gpt-2", "I'm here", "I", "'m", " here");
    SPLIT("gpt-2", "DON'T", "DON", "'", "T");          /* contractions are lowercase only */
    SPLIT("gpt-2", "  hi", " ", " hi");                 /* \s+(?!\S) leaves the last space */
    SPLIT("gpt-2", "a\n\nb", "a", "\n", "\n", "b");     /* a lone \n before a letter is a gap */
    SPLIT("gpt-2", "123 4567", "123", " 4567");         /* digits are not grouped */
    SPLIT("gpt-2", "x  ", "x", "  ");
    SPLIT("gpt-2", "a !b", "a", " !", "b");
    SPLIT("gpt-2", "a\xFF" "b", "a", "\xFF", "b");      /* invalid UTF-8 stays, as its own piece */
    /* An unknown name falls back to GPT-2. */
    SPLIT("no-such-pre", "a !b", "a", " !", "b");
    pagoda_span sp[2];
    size_t n = 99;
    ck_assert_int_eq(pagoda_pretokenize("gpt-2", "", 0, sp, 2, &n, NULL, 0), PAGODA_OK);
    ck_assert_uint_eq(n, 0);
    /* Too small a buffer: the full count comes back. */
    ck_assert_int_eq(pagoda_pretokenize("gpt-2", "a b c d", 7, sp, 2, &n, NULL, 0), PAGODA_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert_uint_eq(sp[1].off, 1);
    ck_assert_uint_eq(sp[1].len, 2);
}
END_TEST

START_TEST(pretok_llama3)
{
    SPLIT("llama-bpe", "Hello world", "Hello", " world");
    SPLIT("llama-bpe", "DON'T you'LL", "DON", "'T", " you", "'LL");  /* case-insensitive */
    SPLIT("llama-bpe", "1234567", "123", "456", "7");                 /* groups of up to 3 */
    SPLIT("llama-bpe", "a\n\nb", "a", "\n\n", "b");                    /* \s*[\r\n]+ */
    SPLIT("llama-bpe", "  hi", " ", " hi");
    SPLIT("llama-bpe", "$hello", "$hello");                            /* one non-letter may lead */
    SPLIT("llama-bpe", "hi!!\n\nok", "hi", "!!\n\n", "ok");
    SPLIT("llama-bpe", "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80",
          "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82", " \xD0\xBC\xD0\xB8\xD1\x80"); /* Cyrillic letters */
    SPLIT("llama-bpe", "ied 4 \xC2\xBD months", "ied", " ", "4", " ", "\xC2\xBD", " months"); /* ½ is \p{N} */
    SPLIT("llama-bpe", "x   ", "x", "   ");
    SPLIT("llama3", "ab 12", "ab", " ", "12");
    /* U+017F (long s) must not count as 's' in a contraction (as with
     * llama.cpp's [sS]): the apostrophe leads the letters instead. */
    SPLIT("llama-bpe", "it'\xC5\xBFt", "it", "'\xC5\xBFt");
    SPLIT("llama-bpe", "it'st", "it", "'s", "t");
}
END_TEST

START_TEST(pretok_qwen2)
{
    SPLIT("qwen2", "1234567", "1", "2", "3", "4", "5", "6", "7");    /* single digits */
    SPLIT("qwen2", "x 12", "x", " ", "1", "2");
    SPLIT("qwen2", "ied 4 \xC2\xBD months", "ied", " ", "4", " ", "\xC2\xBD", " months");
    SPLIT("qwen2", "We'Ve a'lL", "We", "'Ve", " a", "'lL");
    SPLIT("qwen2", "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8" "apple", "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8" "apple");
    SPLIT("qwen2", " (\n =", " (\n", " =");
}
END_TEST

START_TEST(pretok_smollm_and_default)
{
    /* smollm: first every digit alone, then GPT-2 within each piece. */
    SPLIT("smollm", " 123abc", " ", "1", "2", "3", "abc");
    SPLIT("smollm", "I'm 25", "I", "'m", " ", "2", "5");
    /* llama.cpp's "default": punctuation runs first, then GPT-2, then
     * numbers and groups of three ASCII digits. */
    SPLIT("default", "a !b", "a", " ", "!", "b");
    SPLIT("default", "12345", "123", "45");
    SPLIT("default", "Hello, world!", "Hello", ",", " world", "!");
}
END_TEST

START_TEST(pretok_deepseek_kimi_gpt4o)
{
    /* DeepSeek-V3: digits in threes, Han and kana runs apart from Latin,
     * one ASCII punctuation may lead ASCII letters. */
    SPLIT("deepseek-v3", "1234567", "123", "456", "7");
    SPLIT("deepseek-v3", "\xE6\x88\x91\xE6\x83\xB3" "apple", "\xE6\x88\x91\xE6\x83\xB3", "apple");
    SPLIT("deepseek-v3", "x.next->y", "x", ".next", "->", "y");
    SPLIT("deepseek-v3", "a  b\n\nc", "a", " ", " b", "\n\n", "c");
    /* gpt-4o: CamelCase words part at a lower-to-upper step, contractions
     * stay on the word, a slash after punctuation stays with it. */
    SPLIT("gpt-4o", "HelloWorld", "Hello", "World");
    SPLIT("gpt-4o", "DON'T you'LL", "DON'T", " you'LL");
    SPLIT("gpt-4o", "12345", "123", "45");
    SPLIT("gpt-4o", "a://b", "a", "://", "b");
    /* kimi-k2: Han runs never join letters, kana and Latin words do not
     * take Han either; CamelCase parts as in o200k. */
    SPLIT("kimi-k2", "\xE6\x88\x91\xE6\x83\xB3" "apple", "\xE6\x88\x91\xE6\x83\xB3", "apple");
    SPLIT("kimi-k2", "HelloWorld's", "Hello", "World's");
    SPLIT("kimi-k2", "1234 ab", "123", "4", " ab");
}
END_TEST

/* Token ids from llama.cpp's llama-tokenize for the pre-tokenizers added
 * from its table, on the GPT-2 vocabulary with only tokenizer.ggml.pre
 * changed (tests/data/vocab/make_pre_cases.py made the .out files). */
START_TEST(pre_reference_cases)
{
    static const char *const pres[] = { "deepseek-v3", "kimi-k2", "gpt-4o" };
    for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++) {
        char err[512] = "";
        gguf_file *f = pagoda_gguf_open(tu_src("tests/data/vocab/ggml-vocab-gpt-2.gguf"), err, sizeof err);
        ck_assert_msg(f != NULL, "%s", err);
        bool found = false;
        for (uint64_t k = 0; k < f->n_kv; k++) {
            gguf_kv *kv = &f->kv[k];
            if (kv->key.len == 18 && memcmp(kv->key.ptr, "tokenizer.ggml.pre", 18) == 0) {
                ck_assert_int_eq(kv->val.type, GGUF_T_STRING);
                kv->val.v.str.ptr = pres[i];
                kv->val.v.str.len = strlen(pres[i]);
                found = true;
            }
        }
        ck_assert(found);
        pagoda_tokenizer *t = pagoda_tokenizer_load(f, err, sizeof err);
        ck_assert_msg(t != NULL, "%s", err);
        pagoda_gguf_close(f);
        char out[128];
        snprintf(out, sizeof out, "tests/data/vocab/ggml-vocab-gpt-2.pre-%s.out", pres[i]);
        run_vocab_cases(t, "tests/data/vocab/pre-cases.inp", out, 26, true, false);
        pagoda_tokenizer_free(t);
    }
}
END_TEST

/* ------------------------------------------------------ SentencePiece */

START_TEST(spm_reference_cases)
{
    vocab_fixture v = load_vocab("tests/data/vocab/ggml-vocab-llama-spm.gguf");
    ck_assert_int_eq(pagoda_tokenizer_n_vocab(v.t), 32000);
    run_vocab_cases(v.t, "tests/data/vocab/ggml-vocab-llama-spm.gguf.inp",
                    "tests/data/vocab/ggml-vocab-llama-spm.gguf.out", 46, true, true);
    pagoda_tokenizer_free(v.t);
}
END_TEST

START_TEST(spm_specials_and_flags)
{
    vocab_fixture v = load_vocab("tests/data/vocab/ggml-vocab-llama-spm.gguf");
    const pagoda_tokenizer *t = v.t;
    ck_assert_int_eq(pagoda_tokenizer_bos(t), 1);
    ck_assert_int_eq(pagoda_tokenizer_eos(t), 2);
    ck_assert(pagoda_tokenizer_add_bos(t));
    ck_assert(pagoda_tokenizer_is_eog(t, 2));
    ck_assert(!pagoda_tokenizer_is_eog(t, 1));
    ck_assert(!pagoda_tokenizer_is_eog(t, -1));
    ck_assert_int_eq(pagoda_tokenizer_find(t, "<s>"), 1);
    ck_assert_int_eq(pagoda_tokenizer_find(t, "<0x41>"), 3 + 0x41);
    ck_assert_int_eq(pagoda_tokenizer_find(t, "no such piece"), -1);
    ck_assert_str_eq(pagoda_tokenizer_piece(t, 2), "</s>");
    ck_assert_ptr_null(pagoda_tokenizer_piece(t, 32000));

    /* Decoding: control tokens are silent unless asked; ▁ is a space;
     * byte tokens are their byte. */
    size_t l;
    const char *p = pagoda_token_bytes(t, 1, false, &l);
    ck_assert_uint_eq(l, 0);
    p = pagoda_token_bytes(t, 1, true, &l);
    ck_assert(l == 3 && memcmp(p, "<s>", 3) == 0);
    p = pagoda_token_bytes(t, 3 + 0x41, false, &l);
    ck_assert(l == 1 && p[0] == 'A');
    int32_t hello = pagoda_tokenizer_find(t, "\xE2\x96\x81Hello");
    ck_assert_int_ge(hello, 0);
    p = pagoda_token_bytes(t, hello, false, &l);
    ck_assert(l == 6 && memcmp(p, " Hello", 6) == 0);
    p = pagoda_token_bytes(t, 99999, true, &l);
    ck_assert_uint_eq(l, 0);

    /* add_special: BOS first, no EOS (add_eos_token is false). */
    int32_t n, nh;
    int32_t *h = tok(t, "Hello", 5, false, false, &nh);
    int32_t *ids = tok(t, "Hello", 5, true, false, &n);
    ck_assert_int_eq(n, nh + 1);
    ck_assert_int_eq(ids[0], 1);
    ck_assert(memcmp(ids + 1, h, sizeof *h * (size_t)nh) == 0);
    free(ids);
    ids = tok(t, "", 0, true, false, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], 1);
    free(ids);

    /* parse_special: "<s>" and "</s>" become their ids and the text after a
     * special token gets the SentencePiece space prefix again. */
    ids = tok(t, "<s>Hello</s>", 12, false, true, &n);
    ck_assert_int_eq(n, nh + 2);
    ck_assert_int_eq(ids[0], 1);
    ck_assert(memcmp(ids + 1, h, sizeof *h * (size_t)nh) == 0);
    ck_assert_int_eq(ids[n - 1], 2);
    free(ids);
    /* Without it, the same text is plain text and decodes back to itself. */
    ids = tok(t, "<s>Hello</s>", 12, false, false, &n);
    for (int32_t i = 0; i < n; i++) ck_assert(ids[i] != 1 && ids[i] != 2);
    char *d = detok(t, ids, n, false, &l);
    ck_assert_str_eq(d, " <s>Hello</s>");
    free(d);
    free(ids);
    free(h);
    pagoda_tokenizer_free(v.t);
}
END_TEST

START_TEST(spm_byte_fallback)
{
    vocab_fixture v = load_vocab("tests/data/vocab/ggml-vocab-llama-spm.gguf");
    const pagoda_tokenizer *t = v.t;
    /* U+1F999 (llama emoji) has no piece: ▁ then its four bytes. */
    int32_t n;
    int32_t *ids = tok(t, "\xF0\x9F\xA6\x99", 4, false, false, &n);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(ids[0], pagoda_tokenizer_find(t, "\xE2\x96\x81"));
    ck_assert_int_eq(ids[1], pagoda_tokenizer_find(t, "<0xF0>"));
    ck_assert_int_eq(ids[2], pagoda_tokenizer_find(t, "<0x9F>"));
    ck_assert_int_eq(ids[3], pagoda_tokenizer_find(t, "<0xA6>"));
    ck_assert_int_eq(ids[4], pagoda_tokenizer_find(t, "<0x99>"));
    free(ids);
    /* Rare CJK (U+9F98) mixed with common text round-trips byte for byte;
     * invalid UTF-8 too. */
    static const char *const cases[] = {
        "\xE9\xBE\x98 and \xE6\x88\x91 mixed",
        "tab\tnew\nline  two  spaces",
        "bad \xFF\xFE bytes \xC3",
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len = strlen(cases[c]), dl;
        ids = tok(t, cases[c], len, false, false, &n);
        char *d = detok(t, ids, n, false, &dl);
        ck_assert_msg(dl == len + 1 && d[0] == ' ' && memcmp(d + 1, cases[c], len) == 0, "case %zu: '%s'", c, d);
        free(d);
        free(ids);
    }
    pagoda_tokenizer_free(v.t);
}
END_TEST

START_TEST(spm_long_roundtrip)
{
    vocab_fixture v = load_vocab("tests/data/vocab/ggml-vocab-llama-spm.gguf");
    /* A prompt of a few thousand tokens from a mixed alphabet. */
    static const char *const alphabet[] = { "a", "e", "t", "s", " ", " ", "\n", ",", "7", "\xC3\xA9",
                                            "\xE6\x88\x91", "\xF0\x9F\x98\x80", "Q", "'" };
    tu_rng r;
    tu_rng_seed(&r, 7);
    char *s = malloc(20000);
    size_t len = 0;
    while (len < 19900) {
        const char *a = alphabet[tu_rng_u64(&r) % (sizeof alphabet / sizeof alphabet[0])];
        memcpy(s + len, a, strlen(a));
        len += strlen(a);
    }
    int32_t n;
    size_t dl;
    int32_t *ids = tok(v.t, s, len, true, false, &n);
    ck_assert_int_gt(n, 2000);
    char *d = detok(v.t, ids + 1, n - 1, false, &dl);
    ck_assert(dl == len + 1 && memcmp(d + 1, s, len) == 0);
    free(d);
    free(ids);
    free(s);
    pagoda_tokenizer_free(v.t);
}
END_TEST

START_TEST(stories260k_prompt)
{
    vocab_fixture v = load_vocab("models/stories260K.gguf");
    const pagoda_tokenizer *t = v.t;
    ck_assert_int_eq(pagoda_tokenizer_n_vocab(t), 512);
    json_error_t je;
    json_t *g = json_load_file(tu_src("tests/data/stories260K.golden.json"), 0, &je);
    ck_assert_msg(g != NULL, "golden: %s", je.text);
    json_t *c0 = json_array_get(json_object_get(g, "cases"), 0);
    const char *prompt = json_string_value(json_object_get(c0, "prompt"));
    json_t *gen = json_object_get(c0, "generated_tokens");
    ck_assert(prompt && json_is_array(gen));
    /* The prompt's tokens are the leading generated_tokens whose pieces
     * spell " " + prompt (SentencePiece's dummy prefix). */
    char want[256];
    snprintf(want, sizeof want, " %s", prompt);
    char acc[256] = "";
    size_t al = 0, np = 0;
    while (al < strlen(want) && np < json_array_size(gen)) {
        size_t l;
        const char *p = pagoda_token_bytes(t, (int32_t)json_integer_value(json_array_get(gen, np)), false, &l);
        memcpy(acc + al, p, l);
        al += l;
        acc[al] = '\0';
        np++;
    }
    ck_assert_str_eq(acc, want);
    int32_t n;
    int32_t *ids = tok(t, prompt, strlen(prompt), true, false, &n);
    ck_assert_int_eq(n, (int32_t)np + 1);
    ck_assert_int_eq(ids[0], 1);
    for (size_t i = 0; i < np; i++)
        ck_assert_int_eq(ids[i + 1], (int32_t)json_integer_value(json_array_get(gen, i)));
    /* "Once upon a time" is these four pieces in this vocabulary. */
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(ids[1], 403);
    ck_assert_int_eq(ids[4], 378);
    free(ids);
    json_decref(g);
    pagoda_tokenizer_free(v.t);
}
END_TEST

/* ----------------------------------------------------- byte-level BPE */

/* One of llama.cpp's vocabulary tests on its vocabulary: at least min_vocab
 * ids (exactly that many when exact), then every case of X.gguf.inp /
 * X.gguf.out, the text back on decode. */
static void vocab_reference(const char *gguf, int32_t min_vocab, bool exact)
{
    char inp[256], out[256];
    snprintf(inp, sizeof inp, "%s.inp", gguf);
    snprintf(out, sizeof out, "%s.out", gguf);
    vocab_fixture v = load_vocab(gguf);
    if (exact) ck_assert_int_eq(pagoda_tokenizer_n_vocab(v.t), min_vocab);
    else ck_assert_int_ge(pagoda_tokenizer_n_vocab(v.t), min_vocab);
    run_vocab_cases(v.t, inp, out, 46, true, false);
    pagoda_tokenizer_free(v.t);
}

START_TEST(gpt2_reference_cases)
{
    vocab_reference("tests/data/vocab/ggml-vocab-gpt-2.gguf", 50257, true);
}
END_TEST

/* The real Llama 3 (128,256 tokens, pre-tokenizer llama-bpe) and Qwen2
 * (151,646 + specials, qwen2) vocabularies against llama.cpp's expected
 * ids for the same 46 cases (tests/data/vocab/SOURCES.md). */
START_TEST(llama3_reference_cases)
{
    vocab_reference("tests/data/vocab/ggml-vocab-llama-bpe.gguf", 128000, false);
}
END_TEST

START_TEST(qwen2_reference_cases)
{
    vocab_reference("tests/data/vocab/ggml-vocab-qwen2.gguf", 151643, false);
}
END_TEST

START_TEST(gpt2_specials_and_roundtrip)
{
    vocab_fixture v = load_vocab("tests/data/vocab/ggml-vocab-gpt-2.gguf");
    const pagoda_tokenizer *t = v.t;
    ck_assert_int_eq(pagoda_tokenizer_eos(t), 50256);
    ck_assert(pagoda_tokenizer_is_eog(t, 50256));
    ck_assert(!pagoda_tokenizer_add_bos(t)); /* no add_bos_token key: BPE default */
    int32_t n, nh;
    int32_t *h = tok(t, "Hello world", 11, false, false, &nh);
    ck_assert_int_eq(nh, 2);
    ck_assert_str_eq(pagoda_tokenizer_piece(t, h[1]), "\xC4\xA0world"); /* "Ġworld" */
    int32_t *ids = tok(t, "Hello world", 11, true, false, &n);
    ck_assert_int_eq(n, nh); /* add_special adds nothing here */
    free(ids);
    ids = tok(t, "<|endoftext|>Hello world<|endoftext|>", 37, false, true, &n);
    ck_assert_int_eq(n, nh + 2);
    ck_assert_int_eq(ids[0], 50256);
    ck_assert(memcmp(ids + 1, h, sizeof *h * (size_t)nh) == 0);
    ck_assert_int_eq(ids[n - 1], 50256);
    size_t dl;
    char *d = detok(t, ids, n, false, &dl);
    ck_assert_str_eq(d, "Hello world");
    free(d);
    d = detok(t, ids, n, true, &dl);
    ck_assert_str_eq(d, "<|endoftext|>Hello world<|endoftext|>");
    free(d);
    free(ids);
    ids = tok(t, "<|endoftext|>", 13, false, false, &n);
    ck_assert_int_gt(n, 1);
    for (int32_t i = 0; i < n; i++) ck_assert_int_ne(ids[i], 50256);
    free(ids);
    free(h);

    /* Byte-level BPE is lossless for any bytes, valid UTF-8 or not. */
    tu_rng r;
    tu_rng_seed(&r, 11);
    for (int round = 0; round < 50; round++) {
        char s[300];
        size_t len = 1 + tu_rng_u64(&r) % sizeof s;
        for (size_t i = 0; i < len; i++) {
            uint64_t x = tu_rng_u64(&r);
            /* Mostly text-like bytes, some arbitrary ones. */
            s[i] = (x & 3) ? " aeinst.'\n9\xC3\xA9"[(x >> 8) % 14] : (char)(x >> 16);
        }
        ids = tok(t, s, len, false, false, &n);
        d = detok(t, ids, n, false, &dl);
        ck_assert_msg(dl == len && memcmp(d, s, len) == 0, "round %d", round);
        free(d);
        free(ids);
    }
    pagoda_tokenizer_free(v.t);
}
END_TEST

/* Write a small vocabulary to a temporary GGUF and load it. */
static pagoda_tokenizer *synthetic(const char *model, const char *pre, const char *const *toks,
                                   const float *scores, const int32_t *types, uint64_t n,
                                   const char *const *merges, uint64_t n_merges, int add_bos,
                                   int add_eos, int space_prefix)
{
    char path[] = "/tmp/pagoda-tokv-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *fp = fdopen(fd, "wb");
    gguf_writer *w = pagoda_gguf_writer_new();
    ck_assert_int_eq(pagoda_gguf_w_str(w, "tokenizer.ggml.model", model), PAGODA_OK);
    if (pre) ck_assert_int_eq(pagoda_gguf_w_str(w, "tokenizer.ggml.pre", pre), PAGODA_OK);
    ck_assert_int_eq(pagoda_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, n), PAGODA_OK);
    if (scores) ck_assert_int_eq(pagoda_gguf_w_arr_f32(w, "tokenizer.ggml.scores", scores, n), PAGODA_OK);
    ck_assert_int_eq(pagoda_gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, n), PAGODA_OK);
    if (merges) ck_assert_int_eq(pagoda_gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, n_merges), PAGODA_OK);
    ck_assert_int_eq(pagoda_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1), PAGODA_OK);
    ck_assert_int_eq(pagoda_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2), PAGODA_OK);
    if (add_bos >= 0) ck_assert_int_eq(pagoda_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", add_bos), PAGODA_OK);
    if (add_eos >= 0) ck_assert_int_eq(pagoda_gguf_w_bool(w, "tokenizer.ggml.add_eos_token", add_eos), PAGODA_OK);
    if (space_prefix >= 0)
        ck_assert_int_eq(pagoda_gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", space_prefix), PAGODA_OK);
    ck_assert_int_eq(pagoda_gguf_w_begin(w, fp), PAGODA_OK);
    fclose(fp);
    pagoda_gguf_writer_free(w);
    char err[256] = "";
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    pagoda_tokenizer *t = pagoda_tokenizer_load(f, err, sizeof err);
    ck_assert_msg(t != NULL, "%s", err);
    pagoda_gguf_close(f);
    unlink(path);
    return t;
}

START_TEST(synthetic_spm_flags)
{
    /* ids: 0 <unk>, 1 <s>, 2 </s>, 3 <|im_end|>, 4 <|user|>, 5 a, 6 b,
     * 7 ab, 8 ▁a, 9..264 <0x00>..<0xFF> */
    const char *toks[9 + 256];
    float scores[9 + 256];
    int32_t types[9 + 256];
    static char names[256][8];
    const char *fixed[] = { "<unk>", "<s>", "</s>", "<|im_end|>", "<|user|>", "a", "b", "ab", "\xE2\x96\x81" "a" };
    const int32_t ftypes[] = { 2, 3, 3, 3, 4, 1, 1, 1, 1 };
    for (int i = 0; i < 9; i++) { toks[i] = fixed[i]; types[i] = ftypes[i]; scores[i] = 0.0f; }
    scores[7] = -2.0f;
    scores[8] = -1.0f;
    for (int b = 0; b < 256; b++) {
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        toks[9 + b] = names[b];
        types[9 + b] = 6;
        scores[9 + b] = 0.0f;
    }
    pagoda_tokenizer *t = synthetic("llama", NULL, toks, scores, types, 9 + 256, NULL, 0, 1, 1, 0);
    ck_assert(pagoda_tokenizer_is_eog(t, 3));  /* <|im_end|> by name */
    ck_assert(pagoda_tokenizer_is_eog(t, 2));
    ck_assert(!pagoda_tokenizer_is_eog(t, 4));
    /* The user-defined token is cut out even without parse_special; with
     * add_space_prefix false no ▁ is added; add_eos_token appends EOS. */
    int32_t n;
    int32_t *ids = tok(t, "ab<|user|>a", 11, true, false, &n);
    const int32_t want[] = { 1, 7, 4, 5, 2 };
    ck_assert_int_eq(n, 5);
    ck_assert(memcmp(ids, want, sizeof want) == 0);
    free(ids);
    /* A control token is text unless parse_special: '<' etc. fall back to bytes. */
    ids = tok(t, "<|im_end|>", 10, false, false, &n);
    ck_assert_int_eq(n, 10);
    ck_assert_int_eq(ids[0], 9 + '<');
    free(ids);
    ids = tok(t, "<|im_end|>", 10, false, true, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], 3);
    free(ids);
    /* " a": ▁a (score -1) is a token; "a b" then merges to ab. */
    ids = tok(t, " ab", 3, false, false, &n);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(ids[0], 8);   /* ▁a outscores ab */
    ck_assert_int_eq(ids[1], 6);
    free(ids);
    size_t l;
    const char *p = pagoda_token_bytes(t, 4, false, &l); /* user-defined: its text */
    ck_assert(l == 8 && memcmp(p, "<|user|>", 8) == 0);
    pagoda_tokenizer_free(t);
}
END_TEST

START_TEST(synthetic_bpe_ranks)
{
    /* "Ġ" is GPT-2's space. Merge ranks decide: "a b" (rank 0) applies
     * before "Ġ a" (rank 1), so " ab" is Ġ + ab, not Ġa + b. */
    const char *toks[] = { "a", "<s>", "</s>", "b", "ab", "\xC4\xA0", "\xC4\xA0" "a", "<|im_start|>" };
    const int32_t types[] = { 1, 3, 3, 1, 1, 1, 1, 3 };
    const char *merges[] = { "a b", "\xC4\xA0 a" };
    pagoda_tokenizer *t = synthetic("gpt2", "no-such-pre", toks, NULL, types, 8, merges, 2, -1, -1, -1);
    int32_t n;
    int32_t *ids = tok(t, " ab", 3, true, false, &n);
    ck_assert_int_eq(n, 2); /* no BOS: BPE default */
    ck_assert_int_eq(ids[0], 5);
    ck_assert_int_eq(ids[1], 4);
    free(ids);
    ids = tok(t, " a", 2, false, false, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], 6);
    free(ids);
    ids = tok(t, "<|im_start|> ab", 15, false, true, &n);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[0], 7);
    free(ids);
    size_t l;
    const char *p = pagoda_token_bytes(t, 6, false, &l);
    ck_assert(l == 2 && memcmp(p, " a", 2) == 0);
    pagoda_tokenizer_free(t);
}
END_TEST

/* End of generation: <|end|> ends a Phi-3 style reply, but in a harmony
 * vocabulary (gpt-oss: <|return|> and <|call|> are special) it only closes
 * one channel's message, so the reply ends at <|return|> or <|call|>. */
START_TEST(eog_harmony)
{
    const char *toks[] = { "a", "<s>", "</s>", "<|end|>", "<|return|>", "<|call|>", "<|start|>" };
    const int32_t types[] = { 1, 3, 3, 3, 3, 3, 3 };
    const char *merges[] = { "a a" };
    pagoda_tokenizer *t = synthetic("gpt2", "gpt-4o", toks, NULL, types, 7, merges, 1, -1, -1, -1);
    ck_assert(!pagoda_tokenizer_is_eog(t, 3));
    ck_assert(pagoda_tokenizer_is_eog(t, 4));
    ck_assert(pagoda_tokenizer_is_eog(t, 5));
    ck_assert(pagoda_tokenizer_is_eog(t, 2));  /* the EOS stays one */
    ck_assert(!pagoda_tokenizer_is_eog(t, 6));
    /* the channel markup stays in the output text (the frontend reads it) */
    size_t l;
    const char *b = pagoda_token_bytes(t, 3, false, &l);
    ck_assert(l == 7 && !memcmp(b, "<|end|>", 7));
    b = pagoda_token_bytes(t, 6, false, &l);
    ck_assert(l == 9 && !memcmp(b, "<|start|>", 9));
    pagoda_token_bytes(t, 2, false, &l); /* other control tokens do not */
    ck_assert_uint_eq(l, 0);
    pagoda_tokenizer_free(t);
    /* without <|call|>, <|end|> is an end as before */
    const char *toks2[] = { "a", "<s>", "</s>", "<|end|>", "<|return|>" };
    t = synthetic("gpt2", "gpt-4o", toks2, NULL, types, 5, merges, 1, -1, -1, -1);
    ck_assert(pagoda_tokenizer_is_eog(t, 3));
    pagoda_token_bytes(t, 3, false, &l); /* Phi-3's <|end|> is no markup */
    ck_assert_uint_eq(l, 0);
    pagoda_tokenizer_free(t);
}
END_TEST

/* The tool-call markup of Qwen/Hermes, Llama 3.1 and Mistral as control
 * (or user-defined) tokens: kept in the output text, as harmony's, so the
 * frontend reads the calls and a grammar's <tool_call> / <[TOOL_CALLS]>
 * reference can ask for the one token; not plain text; another control
 * token still writes nothing, and <|eom_id|> ends the output. */
START_TEST(tool_markup_tokens)
{
    const char *toks[] = { "a", "<s>", "</s>", "<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]",
                           "[ARGS]", "[CALL_ID]", "<|eom_id|>", "[INST]" };
    const int32_t types[] = { 1, 3, 3, 3, 4, 3, 3, 3, 3, 3, 3 };
    const char *merges[] = { "a a" };
    pagoda_tokenizer *t = synthetic("gpt2", "gpt-4o", toks, NULL, types, 11, merges, 1, -1, -1, -1);
    for (int32_t i = 3; i <= 8; i++) {
        size_t l;
        const char *b = pagoda_token_bytes(t, i, false, &l);
        ck_assert_msg(l == strlen(toks[i]) && !memcmp(b, toks[i], l), "%s", toks[i]);
        ck_assert(!pagoda_tokenizer_is_plain(t, i));
        ck_assert(!pagoda_tokenizer_is_eog(t, i));
    }
    ck_assert(pagoda_tokenizer_is_eog(t, 9));
    size_t l;
    pagoda_token_bytes(t, 10, false, &l); /* [INST] is prompt markup: no output text */
    ck_assert_uint_eq(l, 0);
    /* the prompt's text of a call tokenizes to the one token */
    int32_t n = 0;
    int32_t *ids = tok(t, "[TOOL_CALLS]a<tool_call>", 24, false, true, &n);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[0], 6);
    ck_assert_int_eq(ids[1], 0);
    ck_assert_int_eq(ids[2], 3);
    free(ids);
    pagoda_tokenizer_free(t);
}
END_TEST

START_TEST(load_errors)
{
    /* A file without a vocabulary is refused with a message. */
    char path[] = "/tmp/pagoda-tok-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *fp = fdopen(fd, "wb");
    gguf_writer *w = pagoda_gguf_writer_new();
    ck_assert_int_eq(pagoda_gguf_w_str(w, "general.architecture", "llama"), PAGODA_OK);
    ck_assert_int_eq(pagoda_gguf_w_begin(w, fp), PAGODA_OK);
    fclose(fp);
    pagoda_gguf_writer_free(w);
    char err[256] = "";
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_ptr_null(pagoda_tokenizer_load(f, err, sizeof err));
    ck_assert_msg(strstr(err, "tokenizer.ggml.model") != NULL, "%s", err);
    pagoda_gguf_close(f);

    /* An unsupported model name is named in the message. */
    fp = fopen(path, "wb");
    w = pagoda_gguf_writer_new();
    const char *toks[] = { "a", "b" };
    ck_assert_int_eq(pagoda_gguf_w_str(w, "tokenizer.ggml.model", "bert"), PAGODA_OK);
    ck_assert_int_eq(pagoda_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 2), PAGODA_OK);
    ck_assert_int_eq(pagoda_gguf_w_begin(w, fp), PAGODA_OK);
    fclose(fp);
    pagoda_gguf_writer_free(w);
    f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_ptr_null(pagoda_tokenizer_load(f, err, sizeof err));
    ck_assert_msg(strstr(err, "bert") != NULL, "%s", err);
    pagoda_gguf_close(f);
    unlink(path);
    ck_assert_ptr_null(pagoda_tokenizer_load(NULL, err, sizeof err));
    int32_t n;
    ck_assert_int_eq(pagoda_tokenize(NULL, "a", 1, false, false, NULL, 0, &n), PAGODA_ERR_INVALID);
}
END_TEST

static Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *u = tcase_create("unicode");
    tcase_add_test(u, utf8_complete_prefix);
    tcase_add_test(u, utf8_valid);
    tcase_add_test(u, bpe_byte_map);
    suite_add_tcase(s, u);
    TCase *p = tcase_create("pretokenize");
    tcase_add_test(p, pretok_gpt2);
    tcase_add_test(p, pretok_llama3);
    tcase_add_test(p, pretok_qwen2);
    tcase_add_test(p, pretok_smollm_and_default);
    tcase_add_test(p, pretok_deepseek_kimi_gpt4o);
    suite_add_tcase(s, p);
    TCase *spm = tcase_create("spm");
    tcase_add_test(spm, spm_reference_cases);
    tcase_add_test(spm, spm_specials_and_flags);
    tcase_add_test(spm, spm_byte_fallback);
    tcase_add_test(spm, spm_long_roundtrip);
    tcase_add_test(spm, stories260k_prompt);
    suite_add_tcase(s, spm);
    TCase *bpe = tcase_create("bpe");
    tcase_add_test(bpe, gpt2_reference_cases);
    tcase_add_test(bpe, llama3_reference_cases);
    tcase_add_test(bpe, qwen2_reference_cases);
    tcase_add_test(bpe, gpt2_specials_and_roundtrip);
    tcase_add_test(bpe, pre_reference_cases);
    tcase_add_test(bpe, eog_harmony);
    tcase_add_test(bpe, tool_markup_tokens);
    tcase_add_test(bpe, load_errors);
    tcase_add_test(bpe, synthetic_spm_flags);
    tcase_add_test(bpe, synthetic_bpe_ranks);
    suite_add_tcase(s, bpe);
    return s;
}

int main(void)
{
    return tu_run(tokenizer_suite());
}
