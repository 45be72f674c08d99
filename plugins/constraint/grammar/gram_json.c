/*
 * gram_json.c: the JSON text rules every schema shares, made once per
 * grammar on first use: whitespace (nothing or one space in a schema's
 * output; also a newline and a bounded indent in any JSON), strings (one escape per character JSON escapes,
 * optional length bounds), integers and numbers (bounded digits), any
 * value and any object (recursive), and integer / number ranges written
 * as digit patterns.
 * Not for: schema keywords (gram_schema.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

/* Bounds on what is generated, so that a sampled output always ends. */
#define INT_DIGITS 16      /* integer part of a number, unbounded side */
#define FRAC_DIGITS 15
#define EXP_DIGITS 2       /* e+99 at most: every parser reads it as a finite double */

void g_json_init(g_json *j, g_grammar *g)
{
    memset(j, 0, sizeof *j);
    j->g = g;
    j->ws = j->jchar = j->jstr = j->num = j->integer = j->value = j->object = j->array = -1;
}


static void set_range(uint8_t *set, int lo, int hi)
{
    for (int c = lo; c <= hi; c++) set[c >> 3] |= (uint8_t)(1u << (c & 7));
}

static void seq_digits(g_grammar *g, g_seq *s, int lo, int hi)
{
    uint8_t set[32] = {0};
    set_range(set, '0' + lo, '0' + hi);
    g_seq_set(g, s, set);
}

static int32_t digit_rule(g_grammar *g, int lo, int hi)
{
    int32_t r = g_rule_new(g, "[%d-%d]", lo, hi);
    g_seq s = {0};
    seq_digits(g, &s, lo, hi);
    g_rule_alt(g, r, &s);
    g_seq_free(&s);
    return r;
}

/* ws: nothing or one space; unless compact, also a newline and up to
 * G_JSON_INDENT of indent. Bounded so that a small model cannot pad an
 * output past its max_tokens (a run of 40 spaces after a newline was
 * common): compact, a schema's whole output has a length the schema
 * bounds; pretty-printing still fits in any JSON. */
int32_t g_json_ws(g_json *c)
{
    if (c->ws >= 0) return c->ws;
    g_grammar *g = c->g;
    g_seq s = {0};
    int32_t ws = g_rule_new(g, c->compact ? "ws (compact)" : "ws");
    g_rule_alt(g, ws, &s);
    g_seq_byte(g, &s, ' ');
    g_rule_alt(g, ws, &s);
    if (!c->compact) {
        int32_t ind = g_rule_new(g, "indent-char");
        uint8_t set[32] = {0};
        set_range(set, ' ', ' ');
        set_range(set, '\t', '\t');
        g_seq_set(g, &s, set);
        g_rule_alt(g, ind, &s);
        int32_t rep = g_rule_repeat(g, ind, 0, G_JSON_INDENT);
        g_seq_byte(g, &s, '\n');
        g_seq_ref(g, &s, rep);
        g_rule_alt(g, ws, &s);
    }
    g_seq_free(&s);
    return c->ws = ws;
}

static int32_t json_char(g_json *c)
{
    if (c->jchar >= 0) return c->jchar;
    g_range all = {0, G_MAX_CP};
    g_seq s = {0};
    g_seq_jsonclass(c->g, &s, &all, 1);
    int32_t r = g_rule_new(c->g, "json-char");
    g_rule_alt(c->g, r, &s);
    g_seq_free(&s);
    return c->jchar = r;
}

/* a JSON string with min..max characters (max < 0: any) */
int32_t g_json_quoted(g_grammar *g, int32_t r, int32_t body)
{
    g_seq s = {0};
    g_seq_byte(g, &s, '"');
    g_seq_ref(g, &s, body);
    g_seq_byte(g, &s, '"');
    g_rule_alt(g, r, &s);
    g_seq_free(&s);
    return r;
}

int32_t g_json_string(g_json *c, int32_t min, int32_t max)
{
    if (min == 0 && max < 0 && c->jstr >= 0) return c->jstr;
    g_grammar *g = c->g;
    int32_t body = g_rule_repeat(g, json_char(c), min, max);
    int32_t r = g_json_quoted(g, g_rule_new(g, "string{%d,%d}", min, max), body);
    if (min == 0 && max < 0) c->jstr = r;
    return r;
}

/* -?(0|[1-9][0-9]{0,15}) */
int32_t g_json_integer(g_json *c)
{
    if (c->integer >= 0) return c->integer;
    g_grammar *g = c->g;
    int32_t more = g_rule_repeat(g, digit_rule(g, 0, 9), 0, INT_DIGITS - 1);
    int32_t mag = g_rule_new(g, "integer-digits");
    g_seq s = {0};
    g_seq_byte(g, &s, '0');
    g_rule_alt(g, mag, &s);
    seq_digits(g, &s, 1, 9);
    g_seq_ref(g, &s, more);
    g_rule_alt(g, mag, &s);
    int32_t r = g_rule_new(g, "integer");
    g_seq_ref(g, &s, mag);
    g_rule_alt(g, r, &s);
    g_seq_byte(g, &s, '-');
    g_seq_ref(g, &s, mag);
    g_rule_alt(g, r, &s);
    g_seq_free(&s);
    return c->integer = r;
}

/* integer ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})? */
int32_t g_json_number(g_json *c)
{
    if (c->num >= 0) return c->num;
    g_grammar *g = c->g;
    int32_t d = digit_rule(g, 0, 9);
    g_seq s = {0};
    int32_t frac = g_rule_new(g, "fraction");
    g_seq_byte(g, &s, '.');
    g_seq_ref(g, &s, g_rule_repeat(g, d, 1, FRAC_DIGITS));
    g_rule_alt(g, frac, &s);
    g_rule_alt(g, frac, &s);
    int32_t exp = g_rule_new(g, "exponent");
    uint8_t e[32] = {0}, sign[32] = {0};
    set_range(e, 'e', 'e');
    set_range(e, 'E', 'E');
    set_range(sign, '-', '-');
    set_range(sign, '+', '+');
    int32_t sg = g_rule_new(g, "exponent-sign");
    g_seq_set(g, &s, sign);
    g_rule_alt(g, sg, &s);
    g_rule_alt(g, sg, &s);
    g_seq_set(g, &s, e);
    g_seq_ref(g, &s, sg);
    g_seq_ref(g, &s, g_rule_repeat(g, d, 1, EXP_DIGITS));
    g_rule_alt(g, exp, &s);
    g_rule_alt(g, exp, &s);
    int32_t r = g_rule_new(g, "number");
    g_seq_ref(g, &s, g_json_integer(c));
    g_seq_ref(g, &s, frac);
    g_seq_ref(g, &s, exp);
    g_rule_alt(g, r, &s);
    g_seq_free(&s);
    return c->num = r;
}

int32_t g_json_lit(g_json *c, const char *name, const char *text)
{
    return g_rule_lit(c->g, name, text, strlen(text));
}

int32_t g_json_member(g_grammar *g, g_seq *s, int32_t r, int32_t key, int32_t ws, int32_t val)
{
    g_seq_ref(g, s, key);
    g_seq_ref(g, s, ws);
    g_seq_byte(g, s, ':');
    g_seq_ref(g, s, ws);
    g_seq_ref(g, s, val);
    g_seq_ref(g, s, ws);
    g_rule_alt(g, r, s);
    return r;
}

int32_t g_json_items(g_grammar *g, g_seq *s, int32_t item, int32_t ws, int32_t more, int32_t list)
{
    g_seq_byte(g, s, ',');
    g_seq_ref(g, s, ws);
    g_seq_ref(g, s, item);
    g_rule_alt(g, more, s);
    g_seq_ref(g, s, item);
    g_seq_ref(g, s, g_rule_repeat(g, more, 0, -1));
    g_rule_alt(g, list, s);
    g_rule_alt(g, list, s);
    return list;
}

/* name ::= open ws items close, items ::= item more-items* | (empty),
 * more-items ::= "," ws item: the one shape an object and an array share.
 * Rules are made in the order more-ITEMS, ITEMS, NAME. s is empty on entry
 * and on return (g_rule_alt takes its contents). */
static int32_t g_json_bracket(g_grammar *g, g_seq *s, int32_t item, int32_t ws, uint8_t open, uint8_t close,
                              const char *items, const char *name)
{
    int32_t more = g_rule_new(g, "more-%s", items);
    int32_t list = g_json_items(g, s, item, ws, more, g_rule_new(g, "%s", items));
    int32_t r = g_rule_new(g, "%s", name);
    g_seq_byte(g, s, open);
    g_seq_ref(g, s, ws);
    g_seq_ref(g, s, list);
    g_seq_byte(g, s, close);
    g_rule_alt(g, r, s);
    return r;
}

/* any JSON value; object and array of any values (recursive) */
int32_t g_json_value(g_json *c)
{
    if (c->value >= 0) return c->value;
    g_grammar *g = c->g;
    int32_t v = c->value = g_rule_new(g, "value");
    int32_t ws = g_json_ws(c), str = g_json_string(c, 0, -1);
    g_seq s = {0};
    /* member ::= string ws ":" ws value ws */
    int32_t mem = g_json_member(g, &s, g_rule_new(g, "member"), str, ws, v);
    int32_t obj = c->object = g_json_bracket(g, &s, mem, ws, '{', '}', "members", "object");
    /* element ::= value ws */
    int32_t el = g_rule_new(g, "element");
    g_seq_ref(g, &s, v);
    g_seq_ref(g, &s, ws);
    g_rule_alt(g, el, &s);
    int32_t arr = c->array = g_json_bracket(g, &s, el, ws, '[', ']', "elements", "array");
    int32_t alts[] = {obj, arr, str, g_json_number(c), g_json_lit(c, "true", "true"),
                      g_json_lit(c, "false", "false"), g_json_lit(c, "null", "null")};
    for (size_t i = 0; i < sizeof alts / sizeof alts[0]; i++) {
        g_seq_ref(g, &s, alts[i]);
        g_rule_alt(g, v, &s);
    }
    g_seq_free(&s);
    return v;
}

/* ------------------------------------------------------------ integer ranges */

/* Digit strings x..y of the same length n (x <= y) as a rule. */
static int32_t same_len(g_grammar *g, const char *x, const char *y, int n)
{
    int32_t r = g_rule_new(g, "digits-%.*s-%.*s", n, x, n, y);
    g_seq s = {0};
    if (n == 1) {
        seq_digits(g, &s, x[0] - '0', y[0] - '0');
        g_rule_alt(g, r, &s);
    } else if (x[0] == y[0]) {
        g_seq_byte(g, &s, (uint8_t)x[0]);
        g_seq_ref(g, &s, same_len(g, x + 1, y + 1, n - 1));
        g_rule_alt(g, r, &s);
    } else {
        char nines[24], zeros[24];
        memset(nines, '9', sizeof nines);
        memset(zeros, '0', sizeof zeros);
        g_seq_byte(g, &s, (uint8_t)x[0]);
        g_seq_ref(g, &s, same_len(g, x + 1, nines, n - 1));
        g_rule_alt(g, r, &s);
        if (x[0] + 1 <= y[0] - 1) {
            seq_digits(g, &s, x[0] + 1 - '0', y[0] - 1 - '0');
            for (int k = 1; k < n; k++) seq_digits(g, &s, 0, 9);
            g_rule_alt(g, r, &s);
        }
        g_seq_byte(g, &s, (uint8_t)y[0]);
        g_seq_ref(g, &s, same_len(g, zeros, y + 1, n - 1));
        g_rule_alt(g, r, &s);
    }
    g_seq_free(&s);
    return r;
}

/* Alternatives of rule r for the non-negative integers a..b written without
 * leading zeros (b < 0: unbounded, up to INT_DIGITS digits or a's length). */
static void nonneg_range(g_grammar *g, int32_t r, uint64_t a, int64_t b)
{
    g_seq s = {0};
    char xs[24], ys[24];
    int la = snprintf(xs, sizeof xs, "%" PRIu64, a);
    for (int len = la; len <= 19 && !g->failed; len++) {
        uint64_t lo = len == la ? a : 1;
        for (int k = 1; k < len && len != la; k++) lo *= 10; /* 10^(len-1) */
        uint64_t top = 9;
        for (int k = 1; k < len; k++) top = top * 10 + 9; /* 99..9 */
        if (b >= 0 && lo > (uint64_t)b) break;
        if (b < 0 && len > la && len > INT_DIGITS) break;
        if (b < 0 && len > la) {
            /* the open side: every number of this length, as [1-9][0-9]{len-1} */
            seq_digits(g, &s, 1, 9);
            for (int k = 1; k < len; k++) seq_digits(g, &s, 0, 9);
            g_rule_alt(g, r, &s);
            continue;
        }
        uint64_t hi = b >= 0 && (uint64_t)b < top ? (uint64_t)b : top;
        snprintf(xs, sizeof xs, "%0*" PRIu64, len, lo);
        snprintf(ys, sizeof ys, "%0*" PRIu64, len, hi);
        g_seq_ref(g, &s, same_len(g, xs, ys, len));
        g_rule_alt(g, r, &s);
        if (b >= 0 && hi == (uint64_t)b) break;
    }
    g_seq_free(&s);
}

/* Adds to rule r the integers in [lo, hi] (has_lo/has_hi false: open). */
static void int_range_alts(g_grammar *g, int32_t r, bool has_lo, int64_t lo, bool has_hi, int64_t hi)
{
    g_seq s = {0};
    /* negative part: "-" then magnitudes max(1, -hi) .. -lo */
    if (!has_lo || lo < 0) {
        int64_t mlo = has_hi && hi < 0 ? -hi : 1;
        int64_t mhi = has_lo ? -lo : -1;
        if (mhi < 0 || mlo <= mhi) {
            int32_t m = g_rule_new(g, "negative-magnitude");
            nonneg_range(g, m, (uint64_t)mlo, mhi);
            g_seq_byte(g, &s, '-');
            g_seq_ref(g, &s, m);
            g_rule_alt(g, r, &s);
        }
    }
    if (!has_hi || hi >= 0) {
        int64_t a = has_lo && lo > 0 ? lo : 0;
        int32_t m = g_rule_new(g, "magnitude");
        nonneg_range(g, m, (uint64_t)a, has_hi ? hi : -1);
        g_seq_ref(g, &s, m);
        g_rule_alt(g, r, &s);
    }
    g_seq_free(&s);
}

int32_t g_json_integer_range(g_json *c, const g_bounds *b, const char *path)
{
    g_grammar *g = c->g;
    int64_t lo = b->lo + (b->lo_excl ? 1 : 0), hi = b->hi - (b->hi_excl ? 1 : 0);
    int32_t r = g_rule_new(g, "%s/integer-range", path);
    if (b->has_lo && b->has_hi && lo > hi) return r; /* empty: g_finish names it */
    int_range_alts(g, r, b->has_lo, lo, b->has_hi, hi);
    return r;
}

/* A number in the bounds (integers). Written as k, k.f or -k, -k.f with
 * f a non-zero fraction without trailing zeros, so that k.f lies strictly
 * between k and k + 1 (or -k - 1 and -k) whatever f is, and each form's
 * range of k follows from the bounds. No exponent. */
int32_t g_json_number_range(g_json *c, const g_bounds *b, const char *path)
{
    g_grammar *g = c->g;
    int32_t r = g_rule_new(g, "%s/number-range", path);
    /* the fraction: "." [0-9]{0,14} [1-9] */
    int32_t frac = g_rule_new(g, "nonzero-fraction");
    g_seq s = {0};
    g_seq_byte(g, &s, '.');
    g_seq_ref(g, &s, g_rule_repeat(g, digit_rule(g, 0, 9), 0, FRAC_DIGITS - 1));
    seq_digits(g, &s, 1, 9);
    g_rule_alt(g, frac, &s);
    bool has_lo = b->has_lo, has_hi = b->has_hi;
    int64_t L = b->lo, U = b->hi;
    /* integers: the integer range with the exclusive ends moved in */
    int32_t ints = g_rule_new(g, "%s/number-integers", path);
    int64_t il = L + (b->lo_excl ? 1 : 0), ih = U - (b->hi_excl ? 1 : 0);
    if (!(has_lo && has_hi && il > ih)) int_range_alts(g, ints, has_lo, il, has_hi, ih);
    g_seq_ref(g, &s, ints);
    g_rule_alt(g, r, &s);
    /* k.f with k >= 0: k in [max(L, 0), U - 1] */
    int64_t klo = has_lo && L > 0 ? L : 0;
    if (!has_hi || klo <= U - 1) {
        int32_t m = g_rule_new(g, "magnitude");
        nonneg_range(g, m, (uint64_t)klo, has_hi ? U - 1 : -1);
        g_seq_ref(g, &s, m);
        g_seq_ref(g, &s, frac);
        g_rule_alt(g, r, &s);
    }
    /* -k.f with k >= 1: value in (-k-1, -k): k in [max(1, -U), -L - 1] */
    int64_t nlo = has_hi && -U > 1 ? -U : 1;
    if (!has_lo || nlo <= -L - 1) {
        int32_t m = g_rule_new(g, "negative-magnitude");
        nonneg_range(g, m, (uint64_t)nlo, has_lo ? -L - 1 : -1);
        g_seq_byte(g, &s, '-');
        g_seq_ref(g, &s, m);
        g_seq_ref(g, &s, frac);
        g_rule_alt(g, r, &s);
    }
    /* -0.f, in (-1, 0) */
    if ((!has_lo || L <= -1) && (!has_hi || U >= 0)) {
        g_seq_lit(g, &s, "-0", 2);
        g_seq_ref(g, &s, frac);
        g_rule_alt(g, r, &s);
    }
    g_seq_free(&s);
    return r;
}

int32_t g_json_object_rule(g_grammar *g)
{
    g_json j;
    g_json_init(&j, g);
    g_json_value(&j);
    return g->failed ? -1 : j.object;
}
