/*
 * engine_realign.c: a prompt's tokens realigned to the model's own
 * tokens of a recent sequence where both spell the same bytes, so that a
 * conversation re-sent with the model's last reply reuses that reply's KV.
 *
 * The model writes a reply token by token (under a constraint it may
 * pick `g` `et` where the tokenizer, given the text, gives `get`); the
 * next turn's prompt holds the same text, tokenized again, and its tokens
 * part from the cached ones at the first such place, so the prefix cache
 * misses from there on. Here, at submit, the prompt's tokens are compared
 * with the recent sequences' (prompt and generated, the last
 * ENGINE_RECENT_SEQS finished ones, same cache_salt): from the first
 * token where they part, the two are read on as bytes until both reach a
 * token boundary at the same byte; when the bytes agree all the way, the
 * prompt takes the recent sequence's tokens for that stretch, and the
 * comparison goes on after it. Safe by construction: the prompt's text is
 * unchanged (the same bytes), and the prefix cache still reuses only
 * blocks whose token ids equal the prompt's own; only plain tokens (no
 * control, user-defined or unknown ones) are ever exchanged, a stretch is
 * at most ENGINE_REALIGN_SPAN tokens of either side and must reach into
 * the recent sequence's generated tokens, or be its prompt's last token
 * alone with the prompt going on as the reply did (the generation
 * prompt's last token, merged in the next prompt's text with the reply's
 * first bytes); a prompt's own text elsewhere keeps its tokenizer's tokens, a request that gives token ids, or scores its
 * prompt, is left as it came, and a prompt never grows past what the
 * request's limits take (the context less max_tokens).
 * Not for: the KV itself (the KV policy matches blocks), rendering the
 * same text again (the HTTP frontend's call memo).
 */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "tokenizer.h"

#define REALIGN_MAX_BYTES 2048  /* bytes compared for one stretch, each side */

static bool same_salt(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb, int32_t from)
{
    int32_t i = from;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* Appends token id's bytes to buf (of *len, room REALIGN_MAX_BYTES);
 * false when it is not a plain token or the room is gone. */
static bool put_plain(const pagoda_tokenizer *t, int32_t id, char *buf, size_t *len)
{
    if (!pagoda_tokenizer_is_plain(t, id)) return false;
    size_t n;
    const char *s = pagoda_token_bytes(t, id, false, &n);
    if (n == 0 || *len + n > REALIGN_MAX_BYTES) return false;
    memcpy(buf + *len, s, n);
    *len += n;
    return true;
}

/* From h[dh] and p[dp], where h and p part: the ends ih, ip of the
 * shortest stretches h[dh..ih) and p[dp..ip) that spell the same bytes;
 * false when none does within the bounds. */
static bool align_from(const pagoda_tokenizer *t, const int32_t *h, int32_t nh, const int32_t *p, int32_t np,
                       int32_t dh, int32_t dp, int32_t *ih, int32_t *ip)
{
    char bh[REALIGN_MAX_BYTES], bp[REALIGN_MAX_BYTES];
    size_t lh = 0, lp = 0;
    int32_t i = dh, k = dp, d = dh;
    for (;;) {
        if (lh == lp && lh > 0) {
            *ih = i;
            *ip = k;
            return true;
        }
        if (lh <= lp) {
            if (i >= nh || i - d >= ENGINE_REALIGN_SPAN || !put_plain(t, h[i++], bh, &lh)) return false;
        } else {
            if (k >= np || k - dp >= ENGINE_REALIGN_SPAN || !put_plain(t, p[k++], bp, &lp)) return false;
        }
        size_t m = lh < lp ? lh : lp;
        if (memcmp(bh, bp, m)) return false;
    }
}

/* The stretch c->tokens[d..ch) = p[d..cp) reaches the recent sequence's
 * reply: it ends inside the reply, or it is the prompt's last token alone
 * (the generation prompt's, which the next prompt's text merges with the
 * reply's first bytes: Llama 3's "\n\n" before a "{") with the prompt
 * going on as the reply did, token for token or by another stretch.
 * Anything else inside the recent sequence's prompt is not taken. */
static bool reaches_reply(const pagoda_tokenizer *t, const engine_recent *c, const int32_t *p, int32_t np, int32_t d,
                          int32_t ch, int32_t cp)
{
    if (ch > c->n_prompt) return true;
    if (ch < c->n_prompt || ch >= c->n || d != c->n_prompt - 1) return false;
    int32_t j = 0;
    while (ch + j < c->n && cp + j < np && c->tokens[ch + j] == p[cp + j]) j++;
    if (j) return true;
    int32_t a, b;
    return align_from(t, c->tokens, c->n, p, np, ch, cp, &a, &b);
}

int32_t *engine_realign(pagoda_engine *e, const int32_t *p, int32_t n, const char *salt, int32_t max_n,
                        int32_t *n_out, int32_t *n_swapped)
{
    const pagoda_tokenizer *t = e->model->tok;
    *n_out = n;
    *n_swapped = 0;
    if (e->opts.no_realign) return NULL;  /* engine.realign = off */
    int32_t cap = n, nw = n;
    int32_t *w = malloc(sizeof(int32_t) * (size_t)cap);
    if (!w) return NULL;
    memcpy(w, p, sizeof(int32_t) * (size_t)n);
    /* from[r]: where recent sequence r's common prefix with w is known to
     * reach; a swap at d changes w only from d on, so each pass compares
     * from min(from[r], d), not from 0 (a prompt of many stretches costs
     * its length once a candidate, not once a stretch) */
    int32_t from[ENGINE_RECENT_SEQS] = {0};
    pthread_mutex_lock(&e->recent_mu);
    /* each stretch against the recent sequence that now shares the most
     * with the prompt: a conversation's later calls are only in later
     * sequences, its earlier ones in all of them */
    for (int swaps = 0; swaps < ENGINE_REALIGN_SWAPS; swaps++) {
        /* of the sequences whose tokens realign where they part from the
         * prompt, the one that shares the longest prefix with it (the
         * longer one of a tie) */
        const engine_recent *h = NULL;
        int32_t d = 0, ih = 0, ip = 0;
        for (int r = 0; r < ENGINE_RECENT_SEQS; r++) {
            const engine_recent *c = &e->recent[r];
            if (!c->tokens || !same_salt(c->salt, salt)) continue;
            int32_t cd = common_prefix(c->tokens, c->n, w, nw, from[r]), ch, cp;
            from[r] = cd;
            if (cd >= nw || cd >= c->n || cd < d || (cd == d && h && c->n <= h->n)) continue;
            if (!align_from(t, c->tokens, c->n, w, nw, cd, cd, &ch, &cp) || !reaches_reply(t, c, w, nw, cd, ch, cp))
                continue;
            h = c;
            d = cd;
            ih = ch;
            ip = cp;
        }
        if (!h) break;
        int32_t grow = ih - ip;
        if (nw + grow > max_n && grow > 0) break; /* a prompt the request's limits refuse */
        if (nw + grow > cap) {
            int32_t *g = realloc(w, sizeof(int32_t) * (size_t)(nw + grow + ENGINE_REALIGN_SPAN));
            if (!g) break;
            w = g;
            cap = nw + grow + ENGINE_REALIGN_SPAN;
        }
        memmove(w + ih, w + ip, sizeof(int32_t) * (size_t)(nw - ip));
        memcpy(w + d, h->tokens + d, sizeof(int32_t) * (size_t)(ih - d));
        nw += grow;
        for (int r = 0; r < ENGINE_RECENT_SEQS; r++)
            if (from[r] > d) from[r] = d;
        (*n_swapped)++;
    }
    pthread_mutex_unlock(&e->recent_mu);
    if (!*n_swapped) {
        free(w);
        return NULL;
    }
    *n_out = nw;
    return w;
}

void engine_recent_note(pagoda_engine *e, const seq *q)
{
    if (q->score_only || q->prompt_logprobs >= 0 || q->s.n_tokens <= q->s.n_prompt) return;
    int32_t n = q->s.n_tokens;
    int32_t *copy = malloc(sizeof(int32_t) * (size_t)n);
    char *salt = q->cache_salt ? strdup(q->cache_salt) : NULL;
    if (!copy || (q->cache_salt && !salt)) {
        free(copy);
        free(salt);
        return;
    }
    memcpy(copy, q->tokens, sizeof(int32_t) * (size_t)n);
    pthread_mutex_lock(&e->recent_mu);
    engine_recent *h = &e->recent[e->recent_next];
    e->recent_next = (e->recent_next + 1) % ENGINE_RECENT_SEQS;
    free(h->tokens);
    free(h->salt);
    *h = (engine_recent){copy, n, q->s.n_prompt, salt};
    pthread_mutex_unlock(&e->recent_mu);
}

void engine_recent_free(pagoda_engine *e)
{
    for (int r = 0; r < ENGINE_RECENT_SEQS; r++) {
        free(e->recent[r].tokens);
        free(e->recent[r].salt);
        e->recent[r] = (engine_recent){0};
    }
}

int32_t *pagoda_engine_realign(pagoda_engine *e, const int32_t *p, int32_t n, int32_t *n_out)
{
    int32_t swapped;
    *n_out = n;
    if (!e || n <= 0) return NULL;
    return engine_realign(e, p, n, NULL, e->opts.max_seq_len - 1, n_out, &swapped);
}
