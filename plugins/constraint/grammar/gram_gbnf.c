/*
 * gram_gbnf.c: the grammar text syntax, GBNF as llama.cpp users know it
 * (docs/structured-output.md has the reference):
 *
 *   root   ::= "Answer: " answer "\n"
 *   answer ::= [0-9]+ ("." [0-9]+)? | "none"   # a comment
 *   item   ::= %json {"type": "object", "properties": {...}}
 *
 * Rules are name ::= alternatives; a rule's body runs until the next
 * "name ::=" or the end, so it may span lines. Elements: "literal" (escapes
 * \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), [class] with ranges, ^
 * negation and the same escapes, a rule name, ( group ), ".", and
 * pagoda's extension %json followed by a JSON Schema (the text of any
 * JSON value valid against it), and <name> (the text up to the first '>'):
 * the vocabulary's control token of exactly that text, as that one token
 * and never its spelling in plain pieces (llama.cpp's special-token
 * references; <[NAME]> for markup written [NAME]); a vocabulary without
 * such a control token reads it as the literal text. Postfix * + ? {n} {n,} {n,m}. The start
 * rule is "root". Classes, "." and \u escapes are Unicode code points
 * (UTF-8 in the output).
 * Not for: the grammar builder (gram_ir.c).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

typedef struct gp {
    g_grammar *g;
    const char *s;
    size_t n, i;
    int depth;
    bool strict;
    int n_json;
} gp;

static void line_col(const gp *p, size_t at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static int pfail(gp *p, const char *what)
{
    int line, col;
    line_col(p, p->i, &line, &col);
    return g_fail(p->g, "line %d, column %d: %s", line, col, what);
}

static bool name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '-'; }

static void skip_space(gp *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->i++;
        } else {
            break;
        }
    }
}

/* Is a rule definition ("name ::=") at i? Sets *name_end. */
static bool at_definition(const gp *p, size_t i, size_t *name_end)
{
    size_t j = i;
    while (j < p->n && name_char(p->s[j])) j++;
    if (j == i) return false;
    *name_end = j;
    while (j < p->n && (p->s[j] == ' ' || p->s[j] == '\t')) j++;
    return p->n - j >= 3 && memcmp(p->s + j, "::=", 3) == 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static uint32_t utf8_cp(gp *p)
{
    const unsigned char *u = (const unsigned char *)p->s + p->i;
    size_t left = p->n - p->i;
    uint32_t c = u[0];
    int len = 1;
    if (c >= 0xF0 && left >= 4) { c = ((c & 7u) << 18) | ((u[1] & 63u) << 12) | ((u[2] & 63u) << 6) | (u[3] & 63u); len = 4; }
    else if (c >= 0xE0 && left >= 3) { c = ((c & 15u) << 12) | ((u[1] & 63u) << 6) | (u[2] & 63u); len = 3; }
    else if (c >= 0xC0 && left >= 2) { c = ((c & 31u) << 6) | (u[1] & 63u); len = 2; }
    p->i += (size_t)len;
    return c;
}

/* A character of a literal or class: an escape or a UTF-8 code point.
 * -1 after a refusal. */
static int64_t read_char(gp *p)
{
    if (p->s[p->i] != '\\') return utf8_cp(p);
    p->i++;
    if (p->i >= p->n) return pfail(p, "a backslash at the end");
    char e = p->s[p->i++];
    int digits = 0;
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': return '\\';
    case '"': return '"';
    case '\'': return '\'';
    case '[': return '[';
    case ']': return ']';
    case '-': return '-';
    case '^': return '^';
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: {
        char msg[64];
        snprintf(msg, sizeof msg, "unknown escape \\%c", e);
        p->i--;
        return pfail(p, msg);
    }
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
        if (h < 0) return pfail(p, "an escape needs hex digits");
        v = v * 16 + (uint32_t)h;
        p->i++;
    }
    if (v > G_MAX_CP) return pfail(p, "an escape beyond U+10FFFF");
    return v;
}

static int parse_alts(gp *p, int32_t rule);

static int parse_literal(gp *p, g_seq *s)
{
    p->i++; /* " */
    while (p->i < p->n && p->s[p->i] != '"') {
        if (p->s[p->i] == '\n') return pfail(p, "a literal runs past the end of its line");
        bool esc = p->s[p->i] == '\\';
        size_t at = p->i;
        int64_t c = read_char(p);
        if (c < 0) return -1;
        if (esc) {
            char b[4];
            int l = g_utf8_put((uint32_t)c, b);
            g_seq_lit(p->g, s, b, (size_t)l);
        } else {
            g_seq_lit(p->g, s, p->s + at, p->i - at); /* the text's own bytes */
        }
    }
    if (p->i >= p->n) return pfail(p, "an unterminated literal");
    p->i++;
    return 0;
}

/* <name>: a control token (G_CTL_MARK text G_CTL_MARK) or, when the
 * vocabulary has none of that text, the text itself. <[NAME]> names the
 * markup that is not in angle brackets, [NAME] (Mistral's [TOOL_CALLS]);
 * llama.cpp's token ids, <[123]>, are refused, not read as text. */
static int parse_token_ref(gp *p, g_seq *s)
{
    size_t j = p->i + 1;
    while (j < p->n && p->s[j] != '>' && p->s[j] != '\n' && p->s[j] != ' ') j++;
    if (j >= p->n || p->s[j] != '>') return pfail(p, "a token reference '<' without its '>' on its line");
    const char *t = p->s + p->i;
    size_t n = j + 1 - p->i;
    if (n >= 4 && t[1] == '[' && t[n - 2] == ']') {
        bool id = n > 4;
        for (size_t k = 2; k + 2 < n; k++) id &= isdigit((unsigned char)t[k]) != 0;
        if (id)
            return pfail(p, "a token id reference <[N]> (llama.cpp's): name the token by its text, "
                            "<|name|> or <[NAME]> for [NAME]");
        t++;
        n -= 2;
    }
    p->i = j + 1;
    for (int32_t k = 0; k < p->g->n_ctl; k++) {
        if (p->g->ctl_len[k] != n || memcmp(p->g->ctl_text[k], t, n)) continue;
        g_seq_byte(p->g, s, G_CTL_MARK);
        g_seq_lit(p->g, s, t, n);
        g_seq_byte(p->g, s, G_CTL_MARK);
        p->g->n_ctl_refs++;
        return 0;
    }
    g_seq_lit(p->g, s, t, n);
    return 0;
}

static int parse_class(gp *p, g_seq *s)
{
    p->i++; /* [ */
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    g_range *r = NULL;
    int32_t n = 0, cap = 0;
    while (p->i < p->n && p->s[p->i] != ']') {
        int64_t lo = read_char(p);
        if (lo < 0) goto fail;
        int64_t hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = read_char(p);
            if (hi < 0) goto fail;
            if (hi < lo) {
                pfail(p, "a class range out of order");
                goto fail;
            }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            g_range *nr = realloc(r, sizeof *r * (size_t)(2 * cap + 2));
            if (!nr) {
                g_fail(p->g, "out of memory");
                goto fail;
            }
            r = nr;
        }
        r[n++] = (g_range){(uint32_t)lo, (uint32_t)hi};
    }
    if (p->i >= p->n) {
        pfail(p, "an unterminated character class");
        goto fail;
    }
    p->i++;
    if (!r) {
        r = malloc(sizeof *r * 4);
        if (!r) {
            g_fail(p->g, "out of memory");
            goto fail;
        }
    }
    n = g_ranges_norm(r, n);
    if (n < 0) {
        g_fail(p->g, "out of memory");
        goto fail;
    }
    if (neg) {
        g_range *comp = malloc(sizeof *comp * (size_t)(n + 2));
        if (!comp) {
            g_fail(p->g, "out of memory");
            goto fail;
        }
        n = g_ranges_complement(r, n, comp);
        free(r);
        r = comp;
    }
    g_seq_cpclass(p->g, s, r, n);
    free(r);
    return 0;
fail:
    free(r);
    return -1;
}

static int parse_json(gp *p, g_seq *s)
{
    p->i += 5; /* %json */
    skip_space(p);
    json_error_t je;
    json_t *schema = json_loadb(p->s + p->i, p->n - p->i, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    if (!schema) {
        char msg[200];
        snprintf(msg, sizeof msg, "%%json: the schema is not valid JSON: %s", je.text);
        return pfail(p, msg);
    }
    int line, col;
    line_col(p, p->i, &line, &col);
    p->i += je.position;
    char where[64];
    snprintf(where, sizeof where, "%%json at line %d", line);
    int32_t r = g_schema_rule(p->g, schema, schema, p->strict, where);
    json_decref(schema);
    if (r < 0) return -1;
    g_seq_ref(p->g, s, r);
    return 0;
}

/* Reads a postfix operator: 1 with min/max (max -1 unbounded), 0 none. */
static int parse_postfix(gp *p, int32_t *min, int32_t *max)
{
    if (p->i >= p->n) return 0;
    char c = p->s[p->i];
    if (c == '*') { *min = 0; *max = -1; p->i++; return 1; }
    if (c == '+') { *min = 1; *max = -1; p->i++; return 1; }
    if (c == '?') { *min = 0; *max = 1; p->i++; return 1; }
    if (c != '{') return 0;
    size_t j = p->i + 1;
    int64_t a = 0, b;
    int nd = 0;
    while (j < p->n && isdigit((unsigned char)p->s[j]) && a <= 1000000) { a = a * 10 + (p->s[j++] - '0'); nd++; }
    while (j < p->n && p->s[j] == ' ') j++;
    if (!nd) return pfail(p, "a repetition {n,m} needs a number");
    b = a;
    if (j < p->n && p->s[j] == ',') {
        j++;
        while (j < p->n && p->s[j] == ' ') j++;
        b = -1;
        int64_t v = 0;
        int nb = 0;
        while (j < p->n && isdigit((unsigned char)p->s[j]) && v <= 1000000) { v = v * 10 + (p->s[j++] - '0'); nb++; }
        if (nb) b = v;
        while (j < p->n && p->s[j] == ' ') j++;
    }
    if (j >= p->n || p->s[j] != '}') return pfail(p, "a repetition {n,m} without its '}'");
    if (a > 1000000 || b > 1000000) return pfail(p, "a repetition count above 1000000");
    if (b >= 0 && b < a) return pfail(p, "a repetition {n,m} with m below n");
    *min = (int32_t)a;
    *max = (int32_t)b;
    p->i = j + 1;
    return 1;
}

/* One sequence into s, until '|', ')', a definition or the end. */
static int parse_seq(gp *p, g_seq *s)
{
    for (;;) {
        skip_space(p);
        if (p->i >= p->n) return 0;
        char c = p->s[p->i];
        size_t ne;
        if (c == '|' || c == ')' || at_definition(p, p->i, &ne)) return 0;
        g_seq a = {0};
        int st = 0;
        if (c == '"') {
            st = parse_literal(p, &a);
        } else if (c == '[') {
            st = parse_class(p, &a);
        } else if (c == '<') {
            st = parse_token_ref(p, &a);
        } else if (c == '.') {
            p->i++;
            g_range dot[2] = {{0, '\n' - 1}, {'\n' + 1, G_MAX_CP}};
            g_seq_cpclass(p->g, &a, dot, 2);
        } else if (c == '(') {
            if (++p->depth > p->g->lim.max_depth) {
                g_seq_free(&a);
                return pfail(p, "groups nested too deeply");
            }
            p->i++;
            int32_t grp = g_rule_new(p->g, "group-%d", p->g->anon++);
            st = parse_alts(p, grp);
            if (!st) {
                skip_space(p);
                if (p->i >= p->n || p->s[p->i] != ')') st = pfail(p, "a '(' without its ')'");
                else p->i++;
            }
            p->depth--;
            if (!st) g_seq_ref(p->g, &a, grp);
        } else if (p->n - p->i >= 5 && memcmp(p->s + p->i, "%json", 5) == 0) {
            st = parse_json(p, &a);
        } else if (name_char(c)) {
            size_t j = p->i;
            while (j < p->n && name_char(p->s[j])) j++;
            int32_t r = g_rule_named(p->g, p->s + p->i, j - p->i);
            p->i = j;
            if (r < 0) st = -1;
            else g_seq_ref(p->g, &a, r);
        } else {
            char msg[64];
            snprintf(msg, sizeof msg, "unexpected '%c'", c);
            st = pfail(p, msg);
        }
        int32_t min = 0, max = 0;
        int q = st ? 0 : parse_postfix(p, &min, &max);
        if (st || q < 0) {
            g_seq_free(&a);
            return -1;
        }
        if (q) {
            int32_t item = g_rule_new(p->g, "item-%d", p->g->anon++);
            g_rule_alt(p->g, item, &a);
            int32_t rep = g_rule_repeat(p->g, item, min, max);
            if (rep >= 0) g_seq_ref(p->g, s, rep);
        } else {
            g_seq_append(p->g, s, &a);
        }
        g_seq_free(&a);
        if (p->g->failed) return -1;
    }
}

static int parse_alts(gp *p, int32_t rule)
{
    g_seq s = {0};
    for (;;) {
        if (parse_seq(p, &s) < 0) {
            g_seq_free(&s);
            return -1;
        }
        g_rule_alt(p->g, rule, &s);
        skip_space(p);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        break;
    }
    g_seq_free(&s);
    return p->g->failed ? -1 : 0;
}

int g_parse_gbnf(g_grammar *g, const char *text, size_t len, bool strict)
{
    gp p = {.g = g, .s = text, .n = len, .strict = strict};
    skip_space(&p);
    if (p.i >= p.n) return g_fail(g, "the grammar is empty (it needs a rule 'root ::= ...')");
    while (p.i < p.n) {
        size_t ne;
        if (!at_definition(&p, p.i, &ne)) return pfail(&p, "expected a rule definition 'name ::= ...'");
        int32_t r = g_rule_named(g, p.s + p.i, ne - p.i);
        if (r < 0) return -1;
        if (g->rules[r].defined) {
            char msg[160];
            snprintf(msg, sizeof msg, "rule '%s' is defined twice", g->rules[r].name);
            return pfail(&p, msg);
        }
        g->rules[r].defined = true;
        p.i = ne;
        while (p.i < p.n && (p.s[p.i] == ' ' || p.s[p.i] == '\t')) p.i++;
        p.i += 3; /* ::= */
        if (parse_alts(&p, r) < 0) return -1;
        skip_space(&p);
        if (p.i < p.n && p.s[p.i] == ')') return pfail(&p, "a ')' without its '('");
    }
    g->root = g_rule_named(g, "root", 4);
    if (g->root >= 0 && !g->rules[g->root].defined)
        return g_fail(g, "the grammar has no rule 'root' (the rule output starts from)");
    return g->failed ? -1 : 0;
}
