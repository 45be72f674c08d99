/*
 * inspect.c: the inspection JSON (docs/http-api.md, GET /v1/inspect). An
 * engine snapshot, taken by the engine thread between two steps, becomes
 * one JSON object here, on the thread that asked: the KV pool block by
 * block (state, references, the sequences whose tables list it), the live
 * sequences, the recent steps, the counters, and memory: the plan's lines,
 * what the KV pool holds now, the device and the process's resident size.
 * Written by hand into one growing buffer rather than through jansson: a
 * pool of thousands of blocks would be tens of thousands of small
 * allocations per snapshot, several times a second.
 * Not for: taking the snapshot (core/engine/engine_inspect.c) or serving
 * it (the frontend, through the host's inspect_json).
 */
#define _GNU_SOURCE
#include "inspect.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "unicode.h"

/* ---------------------------------------------------------------- writer */

typedef struct jbuf {
    char *p;
    size_t len, cap;
    bool oom;
} jbuf;

static bool jb_reserve(jbuf *b, size_t n)
{
    if (b->oom) return false;
    if (b->len + n + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

static void jb_raw(jbuf *b, const char *s, size_t n)
{
    if (!jb_reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void jb_cat(jbuf *b, const char *s) { jb_raw(b, s, strlen(s)); }

static void jb_fmt(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jb_fmt(jbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        jb_raw(b, tmp, (size_t)n);
        return;
    }
    if (!jb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* A JSON string: quotes, backslashes and control characters escaped, bytes
 * that are not UTF-8 as U+FFFD (names come from files and frontends). */
static void jb_str(jbuf *b, const char *s)
{
    size_t n = strlen(s);
    jb_raw(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            jb_raw(b, e, 2);
            i++;
        } else if (c < 0x20) {
            jb_fmt(b, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            jb_raw(b, s + i, 1);
            i++;
        } else {
            size_t l = pagoda_utf8_seq_len(c);
            if (l > 1 && i + l <= n && pagoda_utf8_valid(s + i, l)) {
                jb_raw(b, s + i, l);
                i += l;
            } else {
                jb_cat(b, "\\ufffd");
                i++;
            }
        }
    }
    jb_raw(b, "\"", 1);
}

/* ---------------------------------------------------------------- parts */

static const char *state_name(int32_t st)
{
    switch (st) {
    case PAGODA_KV_BLOCK_USED: return "used";
    case PAGODA_KV_BLOCK_CACHED: return "cached";
    default: return "free";
    }
}

/* Each block's sequences from the tables (CSR: off[b] .. off[b + 1] in
 * ids); a used block no table lists gets the owner its policy named. */
static int block_seqs(const pagoda_engine_snapshot *s, int32_t **off_out, uint64_t **ids_out)
{
    int32_t nb = s->n_blocks;
    int32_t *off = calloc((size_t)nb + 1, sizeof *off);
    if (!off) return -1;
    for (int32_t i = 0; i < s->n_seqs; i++)
        for (int32_t j = 0; j < s->seqs[i].n_blocks; j++) {
            int32_t b = s->table[s->seqs[i].first_block + j];
            if (b >= 0 && b < nb) off[b + 1]++;
        }
    for (int32_t b = 0; b < nb; b++)
        if (!off[b + 1] && s->blocks[b].state == PAGODA_KV_BLOCK_USED && s->blocks[b].owner) off[b + 1] = 1;
    for (int32_t b = 0; b < nb; b++) off[b + 1] += off[b];
    uint64_t *ids = malloc(sizeof *ids * (size_t)(off[nb] > 0 ? off[nb] : 1));
    int32_t *fill = calloc((size_t)nb, sizeof *fill);
    if (!ids || !fill) {
        free(off);
        free(ids);
        free(fill);
        return -1;
    }
    for (int32_t i = 0; i < s->n_seqs; i++)
        for (int32_t j = 0; j < s->seqs[i].n_blocks; j++) {
            int32_t b = s->table[s->seqs[i].first_block + j];
            if (b >= 0 && b < nb) ids[off[b] + fill[b]++] = s->seqs[i].id;
        }
    for (int32_t b = 0; b < nb; b++)
        if (!fill[b] && off[b + 1] > off[b]) ids[off[b]] = s->blocks[b].owner;
    free(fill);
    *off_out = off;
    *ids_out = ids;
    return 0;
}

static void kv_part(jbuf *b, const pagoda_engine_snapshot *s, const int32_t *off, const uint64_t *ids)
{
    int64_t shared = 0, tokens = 0;
    for (int32_t i = 0; i < s->n_blocks; i++) shared += s->blocks[i].refs > 1;
    for (int32_t i = 0; i < s->n_seqs; i++)
        if (s->seqs[i].state == PAGODA_SEQ_RUNNING) tokens += s->seqs[i].n_computed;
    const pagoda_kv_stats *k = &s->kv;
    jb_fmt(b, "\"kv\":{\"block_size\":%d,\"n_blocks\":%d,\"block_bytes\":%" PRIu64,
           s->block_size, s->n_blocks, s->kv_block_bytes);
    jb_fmt(b, ",\"free\":%lld,\"used\":%lld,\"cached\":%lld,\"reserved\":%lld,\"shared\":%lld",
           (long long)k->free_blocks, (long long)k->used_blocks, (long long)k->cached_blocks,
           (long long)k->reserved_blocks, (long long)shared);
    jb_fmt(b, ",\"tokens\":%lld,\"query_tokens\":%lld,\"hit_tokens\":%lld,\"evicted_blocks\":%lld",
           (long long)tokens, (long long)k->query_tokens, (long long)k->hit_tokens,
           (long long)k->evicted_blocks);
    jb_fmt(b, ",\"tier\":{\"on\":%s,\"hit_tokens\":%lld,\"blocks\":%lld,\"bytes\":%lld,"
           "\"written_blocks\":%lld,\"dropped_blocks\":%lld,\"bad_blocks\":%lld,"
           "\"evicted_blocks\":%lld,\"prefetched_blocks\":%lld,\"prefetch_hit_blocks\":%lld,"
           "\"ram_blocks\":%lld,\"ram_bytes\":%lld,\"ram_hit_blocks\":%lld,\"restore_us\":%lld}",
           k->tier_on ? "true" : "false", (long long)k->tier_hit_tokens, (long long)k->tier_blocks,
           (long long)k->tier_bytes, (long long)k->tier_written_blocks,
           (long long)k->tier_dropped_blocks, (long long)k->tier_bad_blocks,
           (long long)k->tier_evicted_blocks, (long long)k->tier_prefetched_blocks,
           (long long)k->tier_prefetch_hit_blocks, (long long)k->tier_ram_blocks,
           (long long)k->tier_ram_bytes, (long long)k->tier_ram_hit_blocks,
           (long long)k->tier_restore_us);
    jb_fmt(b, ",\"source\":\"%s\",\"blocks\":[", s->blocks_from_policy ? "policy" : "block_tables");
    for (int32_t i = 0; i < s->n_blocks; i++) {
        const pagoda_kv_block_info *bi = &s->blocks[i];
        jb_fmt(b, "%s{\"id\":%d,\"state\":\"%s\",\"refs\":%d,\"seqs\":[", i ? "," : "", i,
               state_name(bi->state), bi->refs);
        for (int32_t j = off[i]; j < off[i + 1]; j++)
            jb_fmt(b, "%s%" PRIu64, j > off[i] ? "," : "", ids[j]);
        jb_cat(b, "]");
        if (bi->flags & PAGODA_KV_BLOCK_RESERVED) jb_cat(b, ",\"reserved\":true");
        if (bi->flags & PAGODA_KV_BLOCK_HASHED) jb_cat(b, ",\"hashed\":true");
        jb_cat(b, "}");
    }
    jb_cat(b, "]}");
}

static void seqs_part(jbuf *b, const pagoda_engine_snapshot *s)
{
    jb_cat(b, "\"seqs\":[");
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const pagoda_snapshot_seq *q = &s->seqs[i];
        jb_fmt(b, "%s{\"id\":%" PRIu64 ",\"request_id\":", i ? "," : "", q->id);
        if (q->request_id[0]) jb_str(b, q->request_id);
        else jb_cat(b, "null");
        jb_fmt(b, ",\"state\":\"%s\",\"n_prompt\":%d,\"n_tokens\":%d,\"n_computed\":%d,"
               "\"n_cached\":%d,\"max_total\":%d,\"preemptions\":%d,\"blocks\":[",
               q->state == PAGODA_SEQ_RUNNING ? "running" : "waiting", q->n_prompt, q->n_tokens,
               q->n_computed, q->n_cached, q->max_total, q->n_preemptions);
        for (int32_t j = 0; j < q->n_blocks; j++)
            jb_fmt(b, "%s%d", j ? "," : "", s->table[q->first_block + j]);
        jb_cat(b, "]}");
    }
    jb_cat(b, "]");
}

static void steps_part(jbuf *b, const pagoda_engine_snapshot *s)
{
    jb_cat(b, "\"steps\":[");
    for (int32_t i = 0; i < s->n_steps; i++) {
        const pagoda_step_record *r = &s->steps[i];
        jb_fmt(b, "%s{\"step\":%" PRIu64 ",\"n_seqs\":%d,\"prefill_tokens\":%d,\"decode_tokens\":%d,"
               "\"draft_tokens\":%d,\"accepted_tokens\":%d,\"ms\":%.3f}", i ? "," : "", r->step,
               r->n_seqs, r->prefill_tokens, r->decode_tokens, r->draft_tokens, r->accepted_tokens,
               (double)r->ms);
    }
    jb_cat(b, "]");
}

/* Resident bytes of this process (Linux), 0 when unknown. */
static uint64_t process_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, rss = 0;
    if (!f) return 0;
    int n = fscanf(f, "%llu %llu", &size, &rss);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (uint64_t)rss * (uint64_t)page : 0;
}

static void memory_part(jbuf *b, const pagoda_engine_snapshot *s, const pagoda_runtime *rt)
{
    uint64_t bb = s->kv_block_bytes;
    uint64_t used = (uint64_t)s->kv.used_blocks * bb, cached = (uint64_t)s->kv.cached_blocks * bb,
             free_ = (uint64_t)s->kv.free_blocks * bb;
    uint64_t weights = 0, act = 0, ws = 0, over = 0, budget = 0;
    jb_cat(b, "\"memory\":{");
    if (rt) {
        const pagoda_memplan *p = &rt->plan;
        weights = p->weight_bytes;
        act = p->act_bytes;
        ws = p->workspace_bytes;
        over = p->overhead_bytes;
        budget = p->budget_bytes;
        pagoda_backend_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        const pagoda_backend *be = &rt->backend;
        if (be->ops.info && be->ops.info(be->ctx, &info) == PAGODA_OK) {
            info.name[sizeof info.name - 1] = 0;
            jb_cat(b, "\"device\":{\"name\":");
            jb_str(b, info.name);
            jb_fmt(b, ",\"total_bytes\":%" PRIu64 ",\"free_bytes\":%" PRIu64 ",\"host_memory\":%s},",
                   info.mem_total, info.mem_free, info.host_memory ? "true" : "false");
        }
        jb_fmt(b, "\"budget_bytes\":%" PRIu64 ",", budget);
    }
    /* the plan's lines, then the same split by what is in use now */
    jb_fmt(b, "\"plan\":[{\"name\":\"weights\",\"bytes\":%" PRIu64 "},{\"name\":\"kv_pool\",\"bytes\":%"
           PRIu64 "},{\"name\":\"activations\",\"bytes\":%" PRIu64 "},{\"name\":\"workspace\",\"bytes\":%"
           PRIu64 "},{\"name\":\"overhead\",\"bytes\":%" PRIu64 "}],",
           weights, (uint64_t)s->n_blocks * bb, act, ws, over);
    jb_fmt(b, "\"now\":{\"weights\":%" PRIu64 ",\"kv_used\":%" PRIu64 ",\"kv_cached\":%" PRIu64
           ",\"kv_free\":%" PRIu64 ",\"activations\":%" PRIu64 ",\"workspace\":%" PRIu64
           ",\"overhead\":%" PRIu64 "},", weights, used, cached, free_, act, ws, over);
    jb_fmt(b, "\"process_rss_bytes\":%" PRIu64 "}", process_rss());
}

/* ------------------------------------------------------------- the whole */

char *pagoda_inspect_format(const pagoda_engine_snapshot *s, const pagoda_runtime *rt)
{
    jbuf b = {0};
    int32_t *off = NULL;
    uint64_t *ids = NULL;
    if (block_seqs(s, &off, &ids) < 0) return NULL;
    /* when it was taken, on the wall clock */
    struct timespec mono, real;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_REALTIME, &real);
    double age = (double)mono.tv_sec + (double)mono.tv_nsec * 1e-9 - s->t_s;
    double when_ms = ((double)real.tv_sec + (double)real.tv_nsec * 1e-9 - age) * 1e3;

    /* version first: a reader that only wants to know whether anything
     * changed finds it at the start */
    jb_fmt(&b, "{\"version\":%" PRIu64 ",\"object\":\"pagoda.inspect\",\"time_ms\":%.0f,\"step\":%" PRIu64,
           s->version, when_ms, s->step);
    if (rt) {
        jb_cat(&b, ",\"model\":");
        jb_str(&b, rt->model ? rt->model->name : "");
        jb_cat(&b, ",\"scheduler\":");
        jb_str(&b, rt->sched.name ? rt->sched.name : "");
        jb_cat(&b, ",\"kvcache\":");
        jb_str(&b, rt->kv.name ? rt->kv.name : "");
    }
    jb_fmt(&b, ",\"inspect\":{\"build_us\":%.1f,\"total_ms\":%.3f,\"count\":%" PRIu64 "}", s->build_us,
           s->inspect_total_ms, s->inspect_count);
    jb_fmt(&b, ",\"counts\":{\"running\":%d,\"waiting\":%d,\"prompt_tokens_total\":%lld,"
           "\"generation_tokens_total\":%lld,\"requests_finished_total\":%lld,\"preemptions_total\":%lld},",
           s->running, s->waiting, (long long)s->prompt_tokens_total,
           (long long)s->generation_tokens_total, (long long)s->requests_finished_total,
           (long long)s->preemptions_total);
    kv_part(&b, s, off, ids);
    jb_cat(&b, ",");
    seqs_part(&b, s);
    jb_cat(&b, ",");
    steps_part(&b, s);
    jb_cat(&b, ",");
    memory_part(&b, s, rt);
    jb_cat(&b, "}");
    free(off);
    free(ids);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

char *pagoda_inspect_json(pagoda_runtime *rt)
{
    pagoda_engine *e = pagoda_runtime_engine(rt);
    if (!e) return NULL;
    pagoda_engine_snapshot *s = NULL;
    if (pagoda_engine_snapshot_take(e, &s) != PAGODA_OK) return NULL;
    char *j = pagoda_inspect_format(s, rt);
    pagoda_engine_snapshot_release(s);
    return j;
}
