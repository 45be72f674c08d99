/*
 * core/config_value.c: the stateless text helpers the configuration checks
 * are built from (declared in config.h): parsing sizes, integers, floats
 * and booleans; checking a value against a pagoda_config_key's type,
 * bounds and choices, with a phrase saying what is allowed; and the edit
 * distance that turns a typo into a "did you mean" suggestion. host.c,
 * the plugin loader and the CLI use them too.
 * Not for: the config itself, its keys, sections or messages with
 * file:line (config.c).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_internal.h"

/* ------------------------------------------------------------ suggestions */

/* Optimal string alignment distance: Levenshtein plus adjacent
 * transpositions, since "fats" for "fast" is the typo people make. */
size_t pagoda_levenshtein(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t r0[256], r1[256], r2[256]; /* rows i-2, i-1, i */
    if (lb >= 255) return la > lb ? la : lb; /* names are short; beyond, no ranking */
    size_t *pp = r0, *p = r1, *c = r2;
    for (size_t j = 0; j <= lb; j++) p[j] = j;
    for (size_t i = 1; i <= la; i++) {
        c[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = p[j - 1] + cost;
            if (p[j] + 1 < best) best = p[j] + 1;
            if (c[j - 1] + 1 < best) best = c[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < best)
                best = pp[j - 2] + 1;
            c[j] = best;
        }
        size_t *t = pp;
        pp = p;
        p = c;
        c = t;
    }
    return p[lb];
}

/* How far word is from cand: the edit distance, or, when word looks like
 * the start of cand ("blok" for "block_size"), the distance to cand's
 * first strlen(word) characters plus one, whichever is smaller. */
static size_t suggest_score(const char *word, const char *cand)
{
    size_t d = pagoda_levenshtein(word, cand);
    size_t lw = strlen(word);
    if (lw >= 3 && strlen(cand) > lw && lw < 255) {
        char head[256];
        memcpy(head, cand, lw);
        head[lw] = '\0';
        size_t dp = pagoda_levenshtein(word, head) + 1;
        if (dp < d) d = dp;
    }
    return d;
}

const char *pagoda_closest(const char *word, const char *const *cands, size_t n)
{
    const char *best = NULL;
    size_t bd = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t d = suggest_score(word, cands[i]);
        if (d < bd) { bd = d; best = cands[i]; }
    }
    return best;
}


/* ------------------------------------------------------------ values */

int pagoda_parse_int(const char *s, int64_t *out)
{
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    if (out) *out = v;
    return 0;
}

int pagoda_parse_float(const char *s, double *out)
{
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -1;
    if (out) *out = v;
    return 0;
}

int pagoda_parse_bool(const char *s, bool *out)
{
    static const char *t[] = { "true", "1", "yes", "on" }, *f[] = { "false", "0", "no", "off" };
    if (!s) return -1;
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, t[i]) == 0) { if (out) *out = true; return 0; }
        if (strcasecmp(s, f[i]) == 0) { if (out) *out = false; return 0; }
    }
    return -1;
}

int pagoda_parse_size(const char *s, uint64_t *out)
{
    if (!s || !((*s >= '0' && *s <= '9') || *s == '.')) return -1; /* no sign, no blank */
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0) return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && *end == 'i') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end) return -1;
    double bytes = v * mul;
    if (bytes >= 1.8e19) return -1;
    /* A fraction of a byte is not a size: "1.5" is refused, "1.5K" is not. */
    if (mul == 1 && bytes != floor(bytes)) return -1;
    if (out) *out = (uint64_t)(bytes + 0.5);
    return 0;
}

static void describe_allowed(const pagoda_config_key *k, const char *choices, bool auto_ok,
                             char *why, size_t n)
{
    bool bounded = k->min < k->max;
    switch (k->type) {
    case PAGODA_KEY_INT:
        if (bounded) snprintf(why, n, "an integer from %.0f to %.0f", k->min, k->max);
        else snprintf(why, n, "an integer");
        break;
    case PAGODA_KEY_FLOAT:
        if (bounded) snprintf(why, n, "a number from %g to %g", k->min, k->max);
        else snprintf(why, n, "a number");
        break;
    case PAGODA_KEY_BOOL: snprintf(why, n, "true or false (also yes/no, on/off, 1/0)"); break;
    case PAGODA_KEY_SIZE:
        snprintf(why, n, "a size in bytes like 4096, 512M, 8G or 1.5G%s%s",
                 bounded ? " within the bounds" : "", auto_ok ? ", or auto" : "");
        break;
    default:
        if (choices) snprintf(why, n, "one of %s", choices);
        else snprintf(why, n, "a string");
        break;
    }
}

int pagoda_config_check_value_ex(const pagoda_config_key *k, const char *choices, bool auto_ok,
                                  const char *v, char *why, size_t n)
{
    bool bounded = k->min < k->max;
    bool ok = true;
    switch (k->type) {
    case PAGODA_KEY_INT: {
        int64_t x;
        ok = pagoda_parse_int(v, &x) == 0 && (!bounded || ((double)x >= k->min && (double)x <= k->max));
        break;
    }
    case PAGODA_KEY_FLOAT: {
        double x;
        ok = pagoda_parse_float(v, &x) == 0 && (!bounded || (x >= k->min && x <= k->max));
        break;
    }
    case PAGODA_KEY_BOOL: ok = pagoda_parse_bool(v, NULL) == 0; break;
    case PAGODA_KEY_SIZE: {
        uint64_t x;
        if (auto_ok && strcasecmp(v, "auto") == 0) break;
        ok = pagoda_parse_size(v, &x) == 0 && (!bounded || ((double)x >= k->min && (double)x <= k->max));
        break;
    }
    default:
        if (choices) {
            ok = false;
            size_t lv = strlen(v);
            for (const char *p = choices; *p;) {
                const char *bar = strchr(p, '|');
                size_t l = bar ? (size_t)(bar - p) : strlen(p);
                if (l == lv && strncmp(p, v, l) == 0) { ok = true; break; }
                p += l + (bar ? 1 : 0);
            }
        }
        break;
    }
    if (ok) return 0;
    describe_allowed(k, choices, auto_ok, why, n);
    if (k->type == PAGODA_KEY_SIZE && bounded) {
        size_t l = strlen(why);
        snprintf(why + l, n - l, " (from %.0f to %.0f bytes)", k->min, k->max);
    }
    return -1;
}

int pagoda_config_check_value(const pagoda_config_key *k, const char *value, char *why, size_t n)
{
    return pagoda_config_check_value_ex(k, NULL, false, value ? value : "", why, n);
}
