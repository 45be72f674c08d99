/*
 * tier.c: the prefix cache's disk tier (tier.h): the index, the writer
 * thread and the block file format.
 * Not for: which blocks go there or come back (prefix.c).
 */
#define _GNU_SOURCE
#include "tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "pagoda/types.h"

#define TIER_MAGIC "PGKVTIER"
#define TIER_VERSION 1u

/* One block file's header; the tokens and the KV bytes follow. */
typedef struct tier_header {
    char magic[8];
    uint32_t version;
    uint32_t block_size;
    uint64_t fp_hash;
    uint64_t key, parent;
    uint64_t payload;             /* KV bytes */
    uint64_t checksum;            /* XXH3 of this header (checksum 0), tokens, payload */
} tier_header;

/* A block being written: on the queue until the writer has it on disk. */
typedef struct tier_item {
    struct tier_item *next;
    uint64_t key, parent;
    int32_t *tokens;
    void *kv;
} tier_item;

/* Read-ahead state of a stored block (kv_tier_prefetch). */
enum { PF_NONE, PF_PENDING, PF_READING, PF_STAGED };

/* An index entry: a stored (or queued) block, in the LRU list by recency. */
typedef struct tier_entry {
    uint64_t key;
    int32_t hnext;                /* next entry in the bucket, -1 */
    int32_t prev, next;           /* LRU: head = least recently used */
    bool queued;                  /* not on disk yet */
    bool used;
    /* read ahead: wanted by a waiting request; in the pf list when not NONE */
    uint8_t pf;                   /* PF_* */
    uint32_t pf_gen;              /* the kv_tier_prefetch call that last wanted it */
    int32_t pf_prev, pf_next;     /* the pf list, in the order they were asked for */
    tier_item *pf_item;           /* PF_STAGED: the block read back, checked */
    /* the host-RAM level: the block held in memory (not queued, not on disk) */
    tier_item *ram;
    int32_t ram_prev, ram_next;   /* the RAM level's LRU list */
} tier_entry;

struct kv_tier {
    const pagoda_host *host;
    char dir[900];                /* tier_dir */
    char path[1024];              /* dir/<fingerprint hash>, once bound */
    int lock_fd;                  /* dir/LOCK, held (flock) while open */
    uint64_t fp_hash;
    size_t block_bytes;
    int32_t block_size;
    size_t file_bytes;
    int64_t max_bytes, queue_bytes;

    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_idle;
    pthread_t writer;
    bool writer_on, stopping, writing;
    tier_item *q_head, *q_tail;
    int64_t q_bytes;

    tier_entry *e;
    int32_t n_e, cap_e, free_e;   /* free_e: a free list through hnext */
    int32_t *buckets;
    uint64_t bucket_mask;
    int32_t lru_head, lru_tail;
    kv_tier_stats st;
    int64_t warned_write;

    /* read ahead (kv_tier_prefetch): entries PENDING, READING or STAGED,
     * bounded by pf_budget bytes of block files (0: off) */
    int64_t pf_budget, pf_bytes;
    uint32_t pf_gen;
    int32_t pf_head, pf_tail;
    int32_t pf_inflight;          /* PENDING or READING */

    /* the host-RAM level (kv_tier_set_ram): blocks held in memory, in front
     * of the disk; ram_max 0: none. disk false: no directory (RAM only) */
    bool disk;
    int64_t ram_max;
    int32_t ram_head, ram_tail;   /* head = least recently used */
};

static void free_item(tier_item *it)
{
    if (!it) return;
    free(it->tokens);
    free(it->kv);
    free(it);
}

/* ---------------------------------------------------------------- index */

static int32_t idx_find(const kv_tier *t, uint64_t key)
{
    for (int32_t i = t->buckets[key & t->bucket_mask]; i >= 0; i = t->e[i].hnext)
        if (t->e[i].key == key) return i;
    return -1;
}

static void lru_unlink(kv_tier *t, int32_t i)
{
    tier_entry *x = &t->e[i];
    if (x->prev >= 0) t->e[x->prev].next = x->next;
    else t->lru_head = x->next;
    if (x->next >= 0) t->e[x->next].prev = x->prev;
    else t->lru_tail = x->prev;
    x->prev = x->next = -1;
}

static void lru_push(kv_tier *t, int32_t i)
{
    t->e[i].prev = t->lru_tail;
    t->e[i].next = -1;
    if (t->lru_tail >= 0) t->e[t->lru_tail].next = i;
    else t->lru_head = i;
    t->lru_tail = i;
}

static void ram_unlink(kv_tier *t, int32_t i)
{
    tier_entry *x = &t->e[i];
    if (x->ram_prev >= 0) t->e[x->ram_prev].ram_next = x->ram_next;
    else t->ram_head = x->ram_next;
    if (x->ram_next >= 0) t->e[x->ram_next].ram_prev = x->ram_prev;
    else t->ram_tail = x->ram_prev;
    x->ram_prev = x->ram_next = -1;
}

static void ram_push(kv_tier *t, int32_t i)
{
    t->e[i].ram_prev = t->ram_tail;
    t->e[i].ram_next = -1;
    if (t->ram_tail >= 0) t->e[t->ram_tail].ram_next = i;
    else t->ram_head = i;
    t->ram_tail = i;
}

static void pf_append(kv_tier *t, int32_t i, uint8_t state)
{
    tier_entry *x = &t->e[i];
    x->pf = state;
    x->pf_prev = t->pf_tail;
    x->pf_next = -1;
    if (t->pf_tail >= 0) t->e[t->pf_tail].pf_next = i;
    else t->pf_head = i;
    t->pf_tail = i;
    t->pf_bytes += (int64_t)t->file_bytes;
    if (state == PF_PENDING) t->pf_inflight++;
}

/* Out of the read-ahead list, its staged bytes freed. A block being read
 * (READING) is let go: the I/O thread finds it no longer wanted. [mu held] */
static void pf_drop(kv_tier *t, int32_t i)
{
    tier_entry *x = &t->e[i];
    if (x->pf == PF_NONE) return;
    if (x->pf_prev >= 0) t->e[x->pf_prev].pf_next = x->pf_next;
    else t->pf_head = x->pf_next;
    if (x->pf_next >= 0) t->e[x->pf_next].pf_prev = x->pf_prev;
    else t->pf_tail = x->pf_prev;
    if (x->pf == PF_PENDING || x->pf == PF_READING) t->pf_inflight--;
    if (x->pf == PF_STAGED) t->st.staged_blocks--;
    free_item(x->pf_item);
    x->pf_item = NULL;
    x->pf = PF_NONE;
    x->pf_prev = x->pf_next = -1;
    t->pf_bytes -= (int64_t)t->file_bytes;
}

static int rehash(kv_tier *t, uint64_t nb)
{
    int32_t *b = malloc(nb * sizeof(int32_t));
    if (!b) return PAGODA_ERR_NOMEM;
    for (uint64_t i = 0; i < nb; i++) b[i] = -1;
    free(t->buckets);
    t->buckets = b;
    t->bucket_mask = nb - 1;
    for (int32_t i = 0; i < t->n_e; i++) {
        if (!t->e[i].used) continue;
        int32_t *head = &t->buckets[t->e[i].key & t->bucket_mask];
        t->e[i].hnext = *head;
        *head = i;
    }
    return PAGODA_OK;
}

/* A new entry at the most recent end; -1 when out of memory. */
static int32_t idx_add(kv_tier *t, uint64_t key, bool queued)
{
    int32_t i;
    if (t->free_e >= 0) {
        i = t->free_e;
        t->free_e = t->e[i].hnext;
    } else {
        if (t->n_e == t->cap_e) {
            int32_t cap = t->cap_e ? t->cap_e * 2 : 256;
            tier_entry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
            if (!ne) return -1;
            t->e = ne;
            t->cap_e = cap;
        }
        i = t->n_e++;
        if ((uint64_t)t->n_e * 2 > t->bucket_mask + 1 && rehash(t, (t->bucket_mask + 1) * 2)) {
            t->n_e--;
            return -1;
        }
    }
    t->e[i] = (tier_entry){.key = key, .queued = queued, .used = true, .prev = -1, .next = -1,
                           .pf_prev = -1, .pf_next = -1, .ram_prev = -1, .ram_next = -1};
    int32_t *head = &t->buckets[key & t->bucket_mask];
    t->e[i].hnext = *head;
    *head = i;
    lru_push(t, i);
    t->st.blocks++;
    return i;
}

static void idx_remove(kv_tier *t, int32_t i)
{
    int32_t *link = &t->buckets[t->e[i].key & t->bucket_mask];
    while (*link >= 0 && *link != i) link = &t->e[*link].hnext;
    if (*link == i) *link = t->e[i].hnext;
    lru_unlink(t, i);
    pf_drop(t, i);
    if (t->e[i].ram) {
        ram_unlink(t, i);
        free_item(t->e[i].ram);
        t->e[i].ram = NULL;
        t->st.ram_blocks--;
        t->st.ram_bytes -= (int64_t)t->block_bytes;
    } else if (!t->e[i].queued) {
        t->st.bytes -= (int64_t)t->file_bytes;
    }
    t->st.blocks--;
    t->e[i].used = false;
    t->e[i].hnext = t->free_e;
    t->free_e = i;
}

static void file_name(const kv_tier *t, uint64_t key, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%016llx.kvb", t->path, (unsigned long long)key);
}

/* Delete least recently used stored files until under the bound. [mu held] */
static void evict_over(kv_tier *t)
{
    int32_t i = t->lru_head;
    while (t->st.bytes > t->max_bytes && i >= 0) {
        int32_t next = t->e[i].next;
        if (!t->e[i].queued && !t->e[i].ram) {
            char fn[1100];
            file_name(t, t->e[i].key, fn, sizeof fn);
            (void)unlink(fn);
            idx_remove(t, i);
            t->st.evicted_blocks++;
        }
        i = next;
    }
}

/* ------------------------------------------------------ the RAM level */

/* Append an item to the write queue. [mu held] */
static void enqueue(kv_tier *t, tier_item *it)
{
    it->next = NULL;
    if (t->q_tail) t->q_tail->next = it;
    else t->q_head = it;
    t->q_tail = it;
    t->q_bytes += (int64_t)t->file_bytes;
    pthread_cond_signal(&t->cv_work);
}

/* The RAM level's block i leaves it: to the disk's write queue when there
 * is a disk and room in the queue (always, when closing), else dropped.
 * [mu held] */
static void ram_demote(kv_tier *t, int32_t i, bool closing)
{
    tier_entry *x = &t->e[i];
    t->st.ram_evicted_blocks++;
    if (t->disk && t->writer_on &&
        (closing || t->q_bytes + (int64_t)t->file_bytes <= t->queue_bytes)) {
        tier_item *it = x->ram;
        ram_unlink(t, i);
        x->ram = NULL;
        t->st.ram_blocks--;
        t->st.ram_bytes -= (int64_t)t->block_bytes;
        x->queued = true;
        enqueue(t, it);
        return;
    }
    if (t->disk) t->st.dropped_blocks++;
    idx_remove(t, i);
}

/* ---------------------------------------------------------- file format */

static uint64_t checksum(const tier_header *h, const int32_t *tokens, size_t n_tok, const void *kv,
                         size_t kv_bytes)
{
    tier_header z = *h;
    z.checksum = 0;
    XXH3_state_t *s = XXH3_createState();
    if (!s) return 0;
    XXH3_64bits_reset(s);
    XXH3_64bits_update(s, &z, sizeof z);
    XXH3_64bits_update(s, tokens, n_tok * sizeof(int32_t));
    XXH3_64bits_update(s, kv, kv_bytes);
    uint64_t r = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return r;
}

static bool write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

/* Write one item to <key>.kvb through a temporary name; errno on failure. */
static bool write_item(kv_tier *t, const tier_item *it)
{
    tier_header h = {.version = TIER_VERSION, .block_size = (uint32_t)t->block_size,
                     .fp_hash = t->fp_hash, .key = it->key, .parent = it->parent,
                     .payload = t->block_bytes};
    memcpy(h.magic, TIER_MAGIC, 8);
    h.checksum = checksum(&h, it->tokens, (size_t)t->block_size, it->kv, t->block_bytes);
    char fn[1100], tmp[1200];
    file_name(t, it->key, fn, sizeof fn);
    snprintf(tmp, sizeof tmp, "%s.tmp", fn);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    bool ok = write_all(fd, &h, sizeof h) &&
              write_all(fd, it->tokens, (size_t)t->block_size * sizeof(int32_t)) &&
              write_all(fd, it->kv, t->block_bytes);
    int saved = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (ok && rename(tmp, fn) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok) (void)unlink(tmp);
    errno = saved;
    return ok;
}

enum { READ_OK, READ_MISSING, READ_BAD };
static int read_block_file(kv_tier *t, uint64_t key, tier_header *h, int32_t *tok, void *kv);
static void forget(kv_tier *t, uint64_t key, bool bad);

/* One block read ahead, by the I/O thread: the first PENDING entry, read
 * and checked with mu released, then staged if it is still wanted. [mu
 * held; returns with it held] */
static void read_ahead(kv_tier *t, int32_t i)
{
    uint64_t key = t->e[i].key;
    t->e[i].pf = PF_READING;
    pthread_mutex_unlock(&t->mu);
    tier_item *it = calloc(1, sizeof *it);
    if (it) {
        it->tokens = malloc((size_t)t->block_size * sizeof(int32_t));
        it->kv = malloc(t->block_bytes);
    }
    int r = READ_BAD;
    tier_header h;
    if (it && it->tokens && it->kv) r = read_block_file(t, key, &h, it->tokens, it->kv);
    else r = -1; /* out of memory: not the file's fault */
    if (r == READ_OK) {
        it->key = key;
        it->parent = h.parent;
    } else {
        free_item(it);
        it = NULL;
        if (r == READ_MISSING || r == READ_BAD) forget(t, key, r == READ_BAD);
    }
    pthread_mutex_lock(&t->mu);
    int32_t j = idx_find(t, key);
    if (j >= 0 && t->e[j].pf == PF_READING) {
        if (it) {
            t->pf_inflight--;
            t->e[j].pf = PF_STAGED;
            t->e[j].pf_item = it;
            t->st.prefetched_blocks++;
            t->st.staged_blocks++;
            it = NULL;
        } else {
            pf_drop(t, j);
        }
    }
    free_item(it); /* no longer wanted, or gone from the index meanwhile */
}

static int32_t first_pending(const kv_tier *t)
{
    if (!t->pf_inflight) return -1;
    for (int32_t i = t->pf_head; i >= 0; i = t->e[i].pf_next)
        if (t->e[i].pf == PF_PENDING) return i;
    return -1;
}

/* The I/O thread: reads ahead first (a waiting request wants them), then
 * writes the queue. */
static void *writer_main(void *arg)
{
    kv_tier *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        int32_t pend;
        while ((pend = first_pending(t)) < 0 && !t->q_head && !t->stopping)
            pthread_cond_wait(&t->cv_work, &t->mu);
        if (pend >= 0 && !t->stopping) {
            read_ahead(t, pend);
            pthread_cond_broadcast(&t->cv_idle);
            continue;
        }
        if (!t->q_head) break;
        tier_item *it = t->q_head;
        t->writing = true;
        pthread_mutex_unlock(&t->mu);
        bool ok = write_item(t, it);
        int err = errno;
        pthread_mutex_lock(&t->mu);
        /* off the queue only now: a get meanwhile read it from memory */
        t->q_head = it->next;
        if (!t->q_head) t->q_tail = NULL;
        t->q_bytes -= (int64_t)t->file_bytes;
        t->writing = false;
        int32_t i = idx_find(t, it->key);
        if (ok && i >= 0) {
            t->e[i].queued = false;
            t->st.bytes += (int64_t)t->file_bytes;
            t->st.written_blocks++;
            evict_over(t);
        } else {
            if (i >= 0) idx_remove(t, i);
            t->st.dropped_blocks++;
            if (!ok && t->warned_write++ % 1000 == 0)
                t->host->log(t->host, PAGODA_LOG_WARN,
                             "disk tier: writing a block to %s failed (%s); blocks that "
                             "cannot be written are dropped (%lld so far), requests go on",
                             t->path, strerror(err), (long long)t->st.dropped_blocks);
        }
        free_item(it);
        pthread_cond_broadcast(&t->cv_idle);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ------------------------------------------------------------- open/scan */

int kv_tier_check_dir(const char *dir, char *err, size_t err_len)
{
    if (!dir || !*dir) {
        snprintf(err, err_len, "tier_dir is empty");
        return PAGODA_ERR_INVALID;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "tier_dir %s cannot be made: %s", dir, strerror(errno));
        return PAGODA_ERR_IO;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, err_len, "tier_dir %s is not a directory", dir);
        return PAGODA_ERR_IO;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(err, err_len, "tier_dir %s is not writable: %s", dir, strerror(errno));
        return PAGODA_ERR_IO;
    }
    return PAGODA_OK;
}

typedef struct scan_file {
    uint64_t key;
    int64_t mtime_ns;
} scan_file;

static int by_mtime(const void *a, const void *b)
{
    int64_t x = ((const scan_file *)a)->mtime_ns, y = ((const scan_file *)b)->mtime_ns;
    return x < y ? -1 : x > y;
}

/* A file's header and size agree with this store; false: delete it. */
static bool header_ok(const kv_tier *t, int fd, uint64_t key, bool *other_version)
{
    tier_header h;
    struct stat sb;
    *other_version = false;
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size != t->file_bytes) return false;
    if (!read_all(fd, &h, sizeof h) || memcmp(h.magic, TIER_MAGIC, 8)) return false;
    if (h.version != TIER_VERSION) {
        *other_version = true;
        return false;
    }
    return h.block_size == (uint32_t)t->block_size && h.fp_hash == t->fp_hash && h.key == key &&
           h.payload == t->block_bytes;
}

/* Read <key>.kvb whole into h, tok and kv and check all of it: its
 * header against this store, its size, its checksum. READ_MISSING when
 * there is no such file (deleted under us: a person, or the bound). */
static int read_block_file(kv_tier *t, uint64_t key, tier_header *h, int32_t *tok, void *kv)
{
    char fn[1100];
    file_name(t, key, fn, sizeof fn);
    int fd = open(fn, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return READ_MISSING;
    size_t tok_bytes = (size_t)t->block_size * sizeof(int32_t);
    bool ov, ok = header_ok(t, fd, key, &ov) && lseek(fd, 0, SEEK_SET) == 0 &&
                  read_all(fd, h, sizeof *h) && read_all(fd, tok, tok_bytes) &&
                  read_all(fd, kv, t->block_bytes);
    close(fd);
    if (ok) ok = h->checksum == checksum(h, tok, (size_t)t->block_size, kv, t->block_bytes);
    return ok ? READ_OK : READ_BAD;
}

static int scan(kv_tier *t)
{
    DIR *d = opendir(t->path);
    if (!d) return PAGODA_ERR_IO;
    scan_file *files = NULL;
    size_t n = 0, cap = 0;
    int64_t other_version = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        size_t len = strlen(nm);
        char fn[1400];
        snprintf(fn, sizeof fn, "%s/%s", t->path, nm);
        if (len > 4 && !strcmp(nm + len - 4, ".tmp")) { /* a write cut short */
            (void)unlink(fn);
            continue;
        }
        if (len != 20 || strcmp(nm + 16, ".kvb")) continue;
        char *end;
        uint64_t key = strtoull(nm, &end, 16);
        if (end != nm + 16) continue;
        int fd = open(fn, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        bool ov;
        bool ok = header_ok(t, fd, key, &ov);
        struct stat sb;
        int64_t mt = fstat(fd, &sb) == 0 ? (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec : 0;
        close(fd);
        if (!ok) {
            (void)unlink(fn);
            if (ov) other_version++;
            else t->st.bad_blocks++;
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            scan_file *nf = realloc(files, cap * sizeof *nf);
            if (!nf) {
                free(files);
                closedir(d);
                return PAGODA_ERR_NOMEM;
            }
            files = nf;
        }
        files[n++] = (scan_file){.key = key, .mtime_ns = mt};
    }
    closedir(d);
    if (n) qsort(files, n, sizeof *files, by_mtime);
    for (size_t i = 0; i < n; i++) {
        if (idx_find(t, files[i].key) >= 0) continue;
        if (idx_add(t, files[i].key, false) < 0) {
            free(files);
            return PAGODA_ERR_NOMEM;
        }
        t->st.bytes += (int64_t)t->file_bytes;
    }
    free(files);
    evict_over(t);
    if (other_version)
        t->host->log(t->host, PAGODA_LOG_INFO,
                     "disk tier: %lld block files of another pagoda tier version "
                     "deleted from %s", (long long)other_version, t->path);
    return PAGODA_OK;
}

/* Other fingerprints' subdirectories beside ours: named in one line. */
static void note_others(const kv_tier *t, const char *dir, const char *mine)
{
    DIR *d = opendir(dir);
    if (!d) return;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && strlen(de->d_name) == 16 && strcmp(de->d_name, mine)) n++;
    closedir(d);
    if (n)
        t->host->log(t->host, PAGODA_LOG_INFO,
                     "disk tier: %d stores of other models or KV layouts in %s are "
                     "left alone (another fingerprint)", n, dir);
}

int kv_tier_open(kv_tier **out, const pagoda_host *host, const char *dir, int64_t max_bytes,
                 int64_t queue_bytes, char *err, size_t err_len)
{
    *out = NULL;
    bool disk = dir && *dir;
    int st = disk ? kv_tier_check_dir(dir, err, err_len) : PAGODA_OK;
    if (st) return st;
    kv_tier *t = calloc(1, sizeof *t);
    if (!t) return PAGODA_ERR_NOMEM;
    t->host = host;
    t->lock_fd = -1;
    t->free_e = t->lru_head = t->lru_tail = t->pf_head = t->pf_tail = -1;
    t->ram_head = t->ram_tail = -1;
    t->disk = disk;
    t->max_bytes = max_bytes;
    t->queue_bytes = queue_bytes;
    snprintf(t->dir, sizeof t->dir, "%s", disk ? dir : "");
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv_work, NULL);
    pthread_cond_init(&t->cv_idle, NULL);
    if (rehash(t, 1024)) {
        kv_tier_close(t);
        return PAGODA_ERR_NOMEM;
    }
    if (!disk) {
        *out = t;
        return PAGODA_OK;
    }
    char fn[1100];
    snprintf(fn, sizeof fn, "%s/LOCK", dir);
    t->lock_fd = open(fn, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (t->lock_fd < 0 || flock(t->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, err_len, "tier_dir %s is in use by another pagoda process (its LOCK is "
                 "held): one server per store directory", dir);
        kv_tier_close(t);
        return PAGODA_ERR_STATE;
    }
    *out = t;
    return PAGODA_OK;
}

int kv_tier_bind(kv_tier *t, const char *fingerprint, size_t block_bytes, int32_t block_size,
                 char *err, size_t err_len)
{
    if (t->writer_on) return PAGODA_ERR_STATE;
    t->block_bytes = block_bytes;
    t->block_size = block_size;
    t->file_bytes = sizeof(tier_header) + (size_t)block_size * sizeof(int32_t) + block_bytes;
    t->fp_hash = XXH3_64bits(fingerprint, strlen(fingerprint));
    if (!t->disk) { /* host RAM only: nothing outlives the process */
        snprintf(t->path, sizeof t->path, "host RAM");
        return PAGODA_OK;
    }
    char sub[17];
    snprintf(sub, sizeof sub, "%016llx", (unsigned long long)t->fp_hash);
    snprintf(t->path, sizeof t->path, "%s/%s", t->dir, sub);
    if (mkdir(t->path, 0700) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "tier %s cannot be made: %s", t->path, strerror(errno));
        return PAGODA_ERR_IO;
    }
    /* what the subdirectory's name stands for, for a person looking */
    char fn[1200];
    snprintf(fn, sizeof fn, "%s/FINGERPRINT", t->path);
    FILE *fp = fopen(fn, "w");
    if (fp) {
        fprintf(fp, "%s\n", fingerprint);
        fclose(fp);
    }
    int st = scan(t);
    if (st) {
        snprintf(err, err_len, "tier %s cannot be read: %s", t->path, pagoda_status_str(st));
        return st;
    }
    note_others(t, t->dir, sub);
    if (pthread_create(&t->writer, NULL, writer_main, t) != 0) {
        snprintf(err, err_len, "tier: cannot start its writer thread");
        return PAGODA_ERR_NOMEM;
    }
    t->writer_on = true;
    return PAGODA_OK;
}

void kv_tier_close(kv_tier *t)
{
    if (!t) return;
    if (t->writer_on) {
        pthread_mutex_lock(&t->mu);
        /* the RAM level's blocks go to the disk too, so a restart finds them */
        while (t->ram_head >= 0) ram_demote(t, t->ram_head, true);
        t->stopping = true;
        pthread_cond_broadcast(&t->cv_work);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->writer, NULL);
    }
    while (t->q_head) {
        tier_item *it = t->q_head;
        t->q_head = it->next;
        free_item(it);
    }
    for (int32_t i = t->pf_head; i >= 0; i = t->e[i].pf_next) free_item(t->e[i].pf_item);
    for (int32_t i = t->ram_head; i >= 0; i = t->e[i].ram_next) free_item(t->e[i].ram);
    if (t->lock_fd >= 0) close(t->lock_fd); /* releases the flock */
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv_work);
    pthread_cond_destroy(&t->cv_idle);
    free(t->e);
    free(t->buckets);
    free(t);
}

/* ------------------------------------------------------------ the uses */

bool kv_tier_has(kv_tier *t, uint64_t key)
{
    pthread_mutex_lock(&t->mu);
    bool r = idx_find(t, key) >= 0;
    pthread_mutex_unlock(&t->mu);
    return r;
}

bool kv_tier_put(kv_tier *t, uint64_t key, uint64_t parent, const int32_t *tokens, const void *kv)
{
    pthread_mutex_lock(&t->mu);
    bool to_ram = t->ram_max > 0;
    bool full = to_ram ? false
                       : !t->writer_on || t->q_bytes + (int64_t)t->file_bytes > t->queue_bytes;
    bool have = idx_find(t, key) >= 0;
    pthread_mutex_unlock(&t->mu);
    if (have) return true;
    if (full) goto drop;
    tier_item *it = calloc(1, sizeof *it);
    if (!it) goto drop;
    it->key = key;
    it->parent = parent;
    it->tokens = malloc((size_t)t->block_size * sizeof(int32_t));
    it->kv = malloc(t->block_bytes);
    if (!it->tokens || !it->kv) {
        free_item(it);
        goto drop;
    }
    memcpy(it->tokens, tokens, (size_t)t->block_size * sizeof(int32_t));
    memcpy(it->kv, kv, t->block_bytes);
    pthread_mutex_lock(&t->mu);
    int32_t i = idx_add(t, key, !to_ram);
    if (i < 0) {
        pthread_mutex_unlock(&t->mu);
        free_item(it);
        goto drop;
    }
    if (to_ram) { /* the RAM level first; its least recently used go down */
        t->e[i].ram = it;
        ram_push(t, i);
        t->st.ram_blocks++;
        t->st.ram_bytes += (int64_t)t->block_bytes;
        while (t->st.ram_bytes > t->ram_max && t->ram_head >= 0) ram_demote(t, t->ram_head, false);
    } else {
        enqueue(t, it);
    }
    pthread_mutex_unlock(&t->mu);
    return true;
drop:
    pthread_mutex_lock(&t->mu);
    t->st.dropped_blocks++;
    pthread_mutex_unlock(&t->mu);
    return false;
}

/* A stored block failed a check (bad) or is gone: out of the index and
 * off the disk. */
static void forget(kv_tier *t, uint64_t key, bool bad)
{
    char fn[1100];
    file_name(t, key, fn, sizeof fn);
    pthread_mutex_lock(&t->mu);
    int32_t i = idx_find(t, key);
    if (i >= 0 && !t->e[i].queued) {
        idx_remove(t, i);
        (void)unlink(fn);
    }
    if (bad) t->st.bad_blocks++;
    pthread_mutex_unlock(&t->mu);
}

/* A hit: the most recently used. [mu held] */
static void touch(kv_tier *t, int32_t i)
{
    lru_unlink(t, i);
    lru_push(t, i);
    t->st.hit_blocks++;
}

bool kv_tier_get(kv_tier *t, uint64_t key, uint64_t parent, const int32_t *tokens, void *kv)
{
    return kv_tier_get_to(t, key, parent, tokens, kv, NULL, NULL);
}

/* A block found in buf: to put, when there is one. */
static bool hand(void *buf, int (*put)(void *user, const void *kv), void *user)
{
    return !put || put(user, buf) == 0;
}

bool kv_tier_get_to(kv_tier *t, uint64_t key, uint64_t parent, const int32_t *tokens, void *kv,
                    int (*put)(void *user, const void *kv), void *user)
{
    size_t tok_bytes = (size_t)t->block_size * sizeof(int32_t);
    pthread_mutex_lock(&t->mu);
    int32_t i;
    /* a block asked for ahead (its request waited): the I/O thread reads
     * them in the order asked, so wait for it rather than read it twice */
    while ((i = idx_find(t, key)) >= 0 &&
           (t->e[i].pf == PF_READING || t->e[i].pf == PF_PENDING) && t->writer_on && !t->stopping)
        pthread_cond_wait(&t->cv_idle, &t->mu);
    if (i < 0) {
        pthread_mutex_unlock(&t->mu);
        return false;
    }
    if (t->e[i].queued) { /* still in memory: the queue has it */
        bool ok = false;
        for (tier_item *it = t->q_head; it; it = it->next)
            if (it->key == key) {
                ok = it->parent == parent && !memcmp(it->tokens, tokens, tok_bytes);
                if (ok) memcpy(kv, it->kv, t->block_bytes);
                break;
            }
        if (ok) touch(t, i);
        pthread_mutex_unlock(&t->mu);
        return ok && hand(kv, put, user);
    }
    if (t->e[i].ram) { /* the RAM level */
        const tier_item *it = t->e[i].ram;
        bool ok = it->parent == parent && !memcmp(it->tokens, tokens, tok_bytes);
        if (ok) {
            memcpy(kv, it->kv, t->block_bytes);
            touch(t, i);
            ram_unlink(t, i);
            ram_push(t, i);
            t->st.ram_hit_blocks++;
        }
        pthread_mutex_unlock(&t->mu);
        return ok && hand(kv, put, user);
    }
    if (t->e[i].pf == PF_STAGED) { /* read ahead while its request waited */
        tier_item *it = t->e[i].pf_item;
        bool ok = it->parent == parent && !memcmp(it->tokens, tokens, tok_bytes);
        if (ok) {
            touch(t, i);
            t->st.prefetch_hit_blocks++;
            t->e[i].pf_item = NULL; /* ours now: handed on without the lock */
        }
        pf_drop(t, i); /* used, or another prefix's (a key collision) */
        pthread_mutex_unlock(&t->mu);
        if (!ok) return false;
        /* one copy: from what was read ahead straight to put */
        if (put) ok = put(user, it->kv) == 0;
        else memcpy(kv, it->kv, t->block_bytes);
        free_item(it);
        return ok;
    }
    pf_drop(t, i); /* nothing read ahead (the I/O thread is stopping) */
    pthread_mutex_unlock(&t->mu);

    tier_header h;
    int32_t *tok = malloc(tok_bytes);
    if (!tok) return false;
    int r = read_block_file(t, key, &h, tok, kv);
    /* a file that passed its checks but holds another prefix (a 64-bit key
     * collision) is a miss, not a bad file */
    bool same = r == READ_OK && h.parent == parent && !memcmp(tok, tokens, tok_bytes);
    free(tok);
    if (r != READ_OK) {
        forget(t, key, r == READ_BAD);
        return false;
    }
    if (!same) return false;
    pthread_mutex_lock(&t->mu);
    i = idx_find(t, key);
    if (i >= 0) touch(t, i);
    else t->st.hit_blocks++;
    pthread_mutex_unlock(&t->mu);
    return hand(kv, put, user);
}

int32_t kv_tier_prefetch(kv_tier *t, const kv_tier_want *want, int32_t n)
{
    pthread_mutex_lock(&t->mu);
    if (t->pf_budget <= 0 || !t->writer_on) {
        pthread_mutex_unlock(&t->mu);
        return 0;
    }
    uint32_t gen = ++t->pf_gen;
    if (gen == 0) gen = ++t->pf_gen; /* 0 is "never wanted" */
    /* the part of the list the budget holds, soonest first: those stay or
     * are asked for; every other read-ahead block is let go */
    int64_t room = t->pf_budget / (int64_t)t->file_bytes;
    int32_t cut = 0, n_in = 0;
    for (; cut < n && n_in < room; cut++) {
        int32_t i = idx_find(t, want[cut].key);
        /* unknown, in memory already, or named twice (two requests alike) */
        if (i < 0 || t->e[i].queued || t->e[i].ram || t->e[i].pf_gen == gen) continue;
        t->e[i].pf_gen = gen;
        n_in++;
    }
    for (int32_t i = t->pf_head; i >= 0;) {
        int32_t next = t->e[i].pf_next;
        if (t->e[i].pf_gen != gen) pf_drop(t, i);
        i = next;
    }
    bool asked = false;
    for (int32_t k = 0; k < cut; k++) {
        int32_t i = idx_find(t, want[k].key);
        if (i < 0 || t->e[i].queued || t->e[i].ram || t->e[i].pf != PF_NONE) continue;
        pf_append(t, i, PF_PENDING);
        asked = true;
    }
    if (asked) pthread_cond_signal(&t->cv_work);
    pthread_mutex_unlock(&t->mu);
    return n_in;
}

void kv_tier_set_ram(kv_tier *t, int64_t bytes)
{
    pthread_mutex_lock(&t->mu);
    t->ram_max = bytes > 0 ? bytes : 0;
    while (t->st.ram_bytes > t->ram_max && t->ram_head >= 0) ram_demote(t, t->ram_head, false);
    pthread_mutex_unlock(&t->mu);
}

bool kv_tier_has_disk(const kv_tier *t) { return t->disk; }

void kv_tier_set_prefetch(kv_tier *t, int64_t budget_bytes)
{
    pthread_mutex_lock(&t->mu);
    t->pf_budget = budget_bytes > 0 ? budget_bytes : 0;
    pthread_mutex_unlock(&t->mu);
}

void kv_tier_prefetch_wait(kv_tier *t)
{
    pthread_mutex_lock(&t->mu);
    while (t->pf_inflight > 0 && t->writer_on) pthread_cond_wait(&t->cv_idle, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void kv_tier_get_stats(kv_tier *t, kv_tier_stats *st)
{
    pthread_mutex_lock(&t->mu);
    *st = t->st;
    pthread_mutex_unlock(&t->mu);
}

const char *kv_tier_path(const kv_tier *t) { return t->path; }

void kv_tier_flush(kv_tier *t)
{
    pthread_mutex_lock(&t->mu);
    while (t->q_head || t->writing) pthread_cond_wait(&t->cv_idle, &t->mu);
    pthread_mutex_unlock(&t->mu);
}
