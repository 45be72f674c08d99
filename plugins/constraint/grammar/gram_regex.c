/*
 * gram_regex.c: a regular expression as a grammar rule. The syntax is the
 * common core of ECMAScript / Python / PCRE (docs/structured-output.md):
 * literals, escapes (\d \w \s \D \W \S, \n \t \r \f \v \0, \xHH, \uHHHH,
 * escaped punctuation), classes [a-z] [^...], ".", groups (...) (?:...)
 * (?<name>...), alternation, and the quantifiers * + ? {n} {n,} {n,m}
 * (lazy forms read as greedy: generation has no notion of match order).
 * Refused with a message: backreferences, lookaround, \b \B, anchors
 * other than a leading ^ and a trailing $, possessive quantifiers.
 *
 * Matching is by the automaton, never by backtracking, so a pattern such
 * as (a+)+$ costs what any other does; a counted repetition that would
 * make the grammar too large is refused by the element limit.
 *
 * Two modes: the whole output (G_RE_WHOLE), or the content of a JSON
 * string (G_RE_JSON_STRING, a schema's "pattern"): each character class is
 * written the way JSON writes it (g_seq_jsonclass), and the pattern is a
 * search, so a side without its anchor may have any characters around it.
 * Not for: the grammar builder (gram_ir.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

#define RX_MAX_REPEAT 100000

typedef struct rx {
    g_grammar *g;
    const char *s;
    size_t n, i;
    int mode;
    int depth;
    const char *where;
} rx;

static int rx_fail(rx *r, const char *what)
{
    if (!*r->where) return g_fail(r->g, "%s at offset %zu", what, r->i);
    return g_fail(r->g, "%s: %s at offset %zu of the regex", r->where, what, r->i);
}

/* one UTF-8 code point of the pattern (a bad byte reads as itself) */
static uint32_t next_cp(rx *r)
{
    const unsigned char *p = (const unsigned char *)r->s + r->i;
    size_t left = r->n - r->i;
    uint32_t c = p[0];
    int len = 1;
    if (c >= 0xF0 && left >= 4) { c = ((c & 7u) << 18) | ((p[1] & 63u) << 12) | ((p[2] & 63u) << 6) | (p[3] & 63u); len = 4; }
    else if (c >= 0xE0 && left >= 3) { c = ((c & 15u) << 12) | ((p[1] & 63u) << 6) | (p[2] & 63u); len = 3; }
    else if (c >= 0xC0 && left >= 2) { c = ((c & 31u) << 6) | (p[1] & 63u); len = 2; }
    r->i += (size_t)len;
    return c;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A class being collected. */
typedef struct cls {
    g_range *r;
    int32_t n, cap;
    bool oom;
} cls;

static void cls_add(cls *c, uint32_t lo, uint32_t hi)
{
    if (c->n == c->cap) {
        int32_t nc = c->cap ? c->cap * 2 : 16;
        g_range *nr = realloc(c->r, sizeof *nr * (size_t)nc);
        if (!nr) {
            c->oom = true;
            return;
        }
        c->r = nr;
        c->cap = nc;
    }
    c->r[c->n++] = (g_range){lo, hi};
}

/* \d \w \s and their negations */
static bool cls_shorthand(cls *c, char e)
{
    cls tmp = {0};
    cls *dst = (e >= 'A' && e <= 'Z') ? &tmp : c;
    switch (e | 0x20) {
    case 'd': cls_add(dst, '0', '9'); break;
    case 'w': cls_add(dst, '0', '9'); cls_add(dst, 'A', 'Z'); cls_add(dst, '_', '_'); cls_add(dst, 'a', 'z'); break;
    case 's': cls_add(dst, '\t', '\r'); cls_add(dst, ' ', ' '); break;
    default: return false;
    }
    if (dst == &tmp) {
        g_range *w = malloc(sizeof *w * (size_t)(2 * tmp.n + 2));
        g_range *comp = malloc(sizeof *comp * (size_t)(2 * tmp.n + 2));
        if (!w || !comp || tmp.oom) {
            c->oom = true;
        } else {
            memcpy(w, tmp.r, sizeof *w * (size_t)tmp.n);
            int32_t k = g_ranges_norm(w, tmp.n);
            int32_t m = k < 0 ? 0 : g_ranges_complement(w, k, comp);
            if (k < 0) c->oom = true;
            for (int32_t i = 0; i < m; i++) cls_add(c, comp[i].lo, comp[i].hi);
        }
        free(w);
        free(comp);
        free(tmp.r);
    }
    return true;
}

/* The code point of an escape after '\' (not a shorthand class); -1 after
 * a refusal. in_class: inside [...] (\b is a backspace there). */
static int64_t escape_cp(rx *r, bool in_class)
{
    if (r->i >= r->n) return rx_fail(r, "a trailing backslash");
    char e = r->s[r->i];
    switch (e) {
    case 'n': r->i++; return '\n';
    case 't': r->i++; return '\t';
    case 'r': r->i++; return '\r';
    case 'f': r->i++; return '\f';
    case 'v': r->i++; return '\v';
    case '0': r->i++; return 0;
    case 'b':
        if (in_class) { r->i++; return '\b'; }
        return rx_fail(r, "word boundaries (\\b) are not supported");
    case 'B': return rx_fail(r, "\\B is not supported");
    case 'x': {
        int a = r->i + 1 < r->n ? hexval(r->s[r->i + 1]) : -1, b = r->i + 2 < r->n ? hexval(r->s[r->i + 2]) : -1;
        if (a < 0 || b < 0) return rx_fail(r, "\\x needs two hex digits");
        r->i += 3;
        return a * 16 + b;
    }
    case 'u': {
        uint32_t v = 0;
        if (r->i + 1 < r->n && r->s[r->i + 1] == '{') {
            size_t j = r->i + 2;
            int nd = 0;
            while (j < r->n && r->s[j] != '}' && nd < 7) {
                int h = hexval(r->s[j]);
                if (h < 0) return rx_fail(r, "\\u{...} needs hex digits");
                v = v * 16 + (uint32_t)h;
                j++;
                nd++;
            }
            if (j >= r->n || r->s[j] != '}' || nd == 0 || v > G_MAX_CP)
                return rx_fail(r, "\\u{...} needs 1 to 6 hex digits of a code point");
            r->i = j + 1;
            return v;
        }
        for (int k = 1; k <= 4; k++) {
            int h = r->i + (size_t)k < r->n ? hexval(r->s[r->i + (size_t)k]) : -1;
            if (h < 0) return rx_fail(r, "\\u needs four hex digits");
            v = v * 16 + (uint32_t)h;
        }
        r->i += 5;
        return v;
    }
    default:
        if (e >= '1' && e <= '9') return rx_fail(r, "backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
            char msg[64];
            snprintf(msg, sizeof msg, "the escape \\%c is not supported", e);
            return rx_fail(r, msg);
        }
        return (int64_t)next_cp(r); /* escaped punctuation (or any other character) */
    }
}

/* Emits a class (code points) in the pattern's mode. */
static void emit_class(rx *r, g_seq *s, const g_range *rg, int32_t n)
{
    if (r->mode == G_RE_JSON_STRING) g_seq_jsonclass(r->g, s, rg, n);
    else g_seq_cpclass(r->g, s, rg, n);
}

static void emit_cp(rx *r, g_seq *s, uint32_t cp)
{
    g_range one = {cp, cp};
    if (r->mode == G_RE_WHOLE) {
        char b[4];
        int l = g_utf8_put(cp, b);
        g_seq_lit(r->g, s, b, (size_t)l);
    } else {
        emit_class(r, s, &one, 1);
    }
}

static int parse_class(rx *r, g_seq *s)
{
    cls c = {0};
    bool neg = false;
    r->i++; /* [ */
    if (r->i < r->n && r->s[r->i] == '^') {
        neg = true;
        r->i++;
    }
    bool first = true;
    for (;;) {
        if (r->i >= r->n) {
            free(c.r);
            return rx_fail(r, "an unterminated character class");
        }
        char ch = r->s[r->i];
        if (ch == ']' && !first) {
            r->i++;
            break;
        }
        first = false;
        int64_t lo;
        if (ch == '\\') {
            r->i++;
            if (r->i < r->n && cls_shorthand(&c, r->s[r->i])) {
                r->i++;
                continue;
            }
            lo = escape_cp(r, true);
            if (lo < 0) {
                free(c.r);
                return -1;
            }
        } else {
            lo = next_cp(r);
        }
        int64_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                hi = escape_cp(r, true);
                if (hi < 0) {
                    free(c.r);
                    return -1;
                }
            } else {
                hi = next_cp(r);
            }
            if (hi < lo) {
                free(c.r);
                return rx_fail(r, "a class range out of order");
            }
        }
        cls_add(&c, (uint32_t)lo, (uint32_t)hi);
    }
    if (c.oom) {
        free(c.r);
        return g_fail(r->g, "out of memory");
    }
    g_range *w = malloc(sizeof *w * (size_t)(2 * c.n + 2));
    if (!w) {
        free(c.r);
        return g_fail(r->g, "out of memory");
    }
    int32_t n = c.n;
    if (n) memcpy(w, c.r, sizeof *w * (size_t)n);
    n = g_ranges_norm(w, n);
    if (neg && n >= 0) {
        g_range *comp = malloc(sizeof *comp * (size_t)(n + 2));
        if (comp) {
            n = g_ranges_complement(w, n, comp);
            free(w);
            w = comp;
        } else {
            n = -1;
        }
    }
    if (n < 0) {
        free(w);
        free(c.r);
        return g_fail(r->g, "out of memory");
    }
    emit_class(r, s, w, n);
    free(w);
    free(c.r);
    return 0;
}

static int32_t parse_alt(rx *r);

/* Reads a quantifier if one is next: 1 with *min, *max (-1 unbounded); 0 none. */
static int parse_quant(rx *r, int32_t *min, int32_t *max)
{
    if (r->i >= r->n) return 0;
    char c = r->s[r->i];
    if (c == '*') { *min = 0; *max = -1; r->i++; }
    else if (c == '+') { *min = 1; *max = -1; r->i++; }
    else if (c == '?') { *min = 0; *max = 1; r->i++; }
    else if (c == '{') {
        size_t j = r->i + 1;
        int64_t a = 0, b;
        int nd = 0;
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && a <= RX_MAX_REPEAT) { a = a * 10 + (r->s[j++] - '0'); nd++; }
        if (!nd) return 0; /* a literal '{' */
        b = a;
        if (j < r->n && r->s[j] == ',') {
            j++;
            b = -1;
            int nb = 0;
            int64_t v = 0;
            while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && v <= RX_MAX_REPEAT) { v = v * 10 + (r->s[j++] - '0'); nb++; }
            if (nb) b = v;
        }
        if (j >= r->n || r->s[j] != '}') return 0; /* a literal '{' */
        if (a > RX_MAX_REPEAT || b > RX_MAX_REPEAT) return rx_fail(r, "a repetition count above 100000");
        if (b >= 0 && b < a) return rx_fail(r, "a repetition {n,m} with m below n");
        *min = (int32_t)a;
        *max = (int32_t)b;
        r->i = j + 1;
    } else {
        return 0;
    }
    if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: same language */
    else if (r->i < r->n && r->s[r->i] == '+') return rx_fail(r, "possessive quantifiers are not supported");
    return 1;
}

/* One atom into a (a fresh sequence); 0, 1 when nothing is there (| ) or
 * the end), -1 on error. */
static int parse_atom(rx *r, g_seq *a)
{
    if (r->i >= r->n) return 1;
    char c = r->s[r->i];
    switch (c) {
    case '|':
    case ')':
        return 1;
    case '(': {
        if (++r->depth > r->g->lim.max_depth) return rx_fail(r, "groups nested too deeply");
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            const char *p = r->s + r->i;
            size_t left = r->n - r->i;
            if (left >= 2 && p[1] == ':') r->i += 2;
            else if (left >= 2 && (p[1] == '=' || p[1] == '!')) return rx_fail(r, "lookahead is not supported");
            else if (left >= 3 && p[1] == '<' && (p[2] == '=' || p[2] == '!')) return rx_fail(r, "lookbehind is not supported");
            else if (left >= 2 && (p[1] == '<' || (p[1] == 'P' && left >= 3 && p[2] == '<'))) {
                size_t j = r->i;
                while (j < r->n && r->s[j] != '>') j++;
                if (j >= r->n) return rx_fail(r, "an unterminated group name");
                r->i = j + 1;
            } else {
                return rx_fail(r, "this group syntax (?...) is not supported");
            }
        }
        int32_t inner = parse_alt(r);
        if (inner < 0) return -1;
        if (r->i >= r->n || r->s[r->i] != ')') return rx_fail(r, "a '(' without its ')'");
        r->i++;
        r->depth--;
        g_seq_ref(r->g, a, inner);
        return 0;
    }
    case '[':
        return parse_class(r, a);
    case '.': {
        r->i++;
        g_range dot[2] = {{0, '\n' - 1}, {'\n' + 1, G_MAX_CP}};
        emit_class(r, a, dot, 2);
        return 0;
    }
    case '\\': {
        r->i++;
        cls c2 = {0};
        if (r->i < r->n && cls_shorthand(&c2, r->s[r->i])) {
            r->i++;
            if (c2.oom) {
                free(c2.r);
                return g_fail(r->g, "out of memory");
            }
            emit_class(r, a, c2.r, c2.n);
            free(c2.r);
            return 0;
        }
        free(c2.r);
        int64_t cp = escape_cp(r, false);
        if (cp < 0) return -1;
        emit_cp(r, a, (uint32_t)cp);
        return 0;
    }
    case '^':
        /* the whole output matches anyway: an anchor at the start of a
         * top-level alternative says nothing more */
        if (r->mode == G_RE_WHOLE && r->depth == 0 && (r->i == 0 || r->s[r->i - 1] == '|')) {
            r->i++;
            return parse_atom(r, a);
        }
        return rx_fail(r, "'^' is only supported at the start of the pattern");
    case '$':
        if (r->mode == G_RE_WHOLE && r->depth == 0 && (r->i + 1 == r->n || r->s[r->i + 1] == '|')) {
            r->i++;
            return 1;
        }
        return rx_fail(r, "'$' is only supported at the end of the pattern");
    case '*':
    case '+':
    case '?':
        return rx_fail(r, "a quantifier with nothing to repeat");
    default:
        emit_cp(r, a, next_cp(r));
        return 0;
    }
}

/* A concatenation into s until '|', ')' or the end. */
static int parse_concat(rx *r, g_seq *s)
{
    for (;;) {
        g_seq a = {0};
        int st = parse_atom(r, &a);
        if (st) {
            g_seq_free(&a);
            return st < 0 ? -1 : 0;
        }
        int32_t min = 0, max = 0;
        int q = parse_quant(r, &min, &max);
        if (q < 0) {
            g_seq_free(&a);
            return -1;
        }
        if (q) {
            int32_t item = g_rule_new(r->g, "%s-item-%d", "regex", r->g->anon++);
            g_rule_alt(r->g, item, &a);
            int32_t rep = g_rule_repeat(r->g, item, min, max);
            if (rep < 0) {
                g_seq_free(&a);
                return -1;
            }
            g_seq_ref(r->g, s, rep);
            if (parse_quant(r, &min, &max) > 0) {
                g_seq_free(&a);
                return rx_fail(r, "a quantifier on a quantifier");
            }
        } else {
            g_seq_append(r->g, s, &a);
        }
        g_seq_free(&a);
        if (r->g->failed) return -1;
    }
}

static int32_t parse_alt(rx *r)
{
    int32_t rule = g_rule_new(r->g, "regex-%d", r->g->anon++);
    if (rule < 0) return -1;
    g_seq s = {0};
    for (;;) {
        if (parse_concat(r, &s) < 0) {
            g_seq_free(&s);
            return -1;
        }
        g_rule_alt(r->g, rule, &s);
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            continue;
        }
        break;
    }
    g_seq_free(&s);
    return r->g->failed ? -1 : rule;
}

int32_t g_regex_rule(g_grammar *g, const char *re, size_t len, int mode, const char *where)
{
    if (g->failed) return -1;
    rx r = {.g = g, .s = re, .n = len, .mode = mode, .where = where};
    bool head = false, tail = false;
    if (r.n && r.s[0] == '^') {
        head = true;
        r.i = 1;
    }
    if (r.n > r.i && r.s[r.n - 1] == '$') {
        /* an escaped '$' (odd run of backslashes before it) is a literal */
        size_t k = 0;
        while (r.n - 1 > k + r.i && r.s[r.n - 2 - k] == '\\') k++;
        if (k % 2 == 0) {
            tail = true;
            r.n--;
        }
    }
    int32_t body = parse_alt(&r);
    if (body < 0) return -1;
    if (r.i < r.n) {
        rx_fail(&r, "an unmatched ')'");
        return -1;
    }
    if (mode != G_RE_JSON_STRING || (head && tail)) return body;
    /* a search: any characters before and after the match */
    g_range all = {0, G_MAX_CP};
    g_seq s = {0};
    g_seq_jsonclass(g, &s, &all, 1);
    int32_t ch = g_rule_new(g, "%s-any", where);
    g_rule_alt(g, ch, &s);
    int32_t any = g_rule_repeat(g, ch, 0, -1);
    int32_t rule = g_rule_new(g, "%s", where);
    if (!head) g_seq_ref(g, &s, any);
    g_seq_ref(g, &s, body);
    if (!tail) g_seq_ref(g, &s, any);
    g_rule_alt(g, rule, &s);
    g_seq_free(&s);
    return g->failed ? -1 : rule;
}
