/*
 * verified.c: the parser of backends/cuda/verified.txt and the cut it
 * makes to what the CUDA backend advertises (verified.h says the format).
 * Plain C over libc and pagoda/types.h; the unit test links this file.
 * Not for: writing the list (gpu-check.sh does).
 */
#include "verified.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pagoda/types.h"

static const char *const op_names[PCU_OP_COUNT_] = {
    "geglu", "scale", "attention_ext", "matmul_multi", "matmul_experts", "moe_combine",
    "swiglu_oai", "attention_sinks", "kv_latent",
};

const char *pcu_op_name(int op) { return op >= 0 && op < PCU_OP_COUNT_ ? op_names[op] : NULL; }

static int dtype_by_name(const char *s)
{
    for (int d = 0; d < PAGODA_DTYPE_COUNT_; d++) {
        int e = 0;
        if (!pagoda_dtype_block(d, &e, NULL)) continue;
        const char *n = pagoda_dtype_name(d);
        if (n && strcasecmp(n, s) == 0) return d;
    }
    return -1;
}

static bool date_ok(const char *s)
{
    if (strlen(s) != 10 || s[4] != '-' || s[7] != '-') return false;
    for (int i = 0; i < 10; i++)
        if (i != 4 && i != 7 && !isdigit((unsigned char)s[i])) return false;
    return true;
}

static bool commit_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 7 || n > 40) return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return true;
}

int pcu_verified_parse(const char *text, const char *name, pcu_verified *v, char *err,
                       size_t err_len)
{
    memset(v, 0, sizeof *v);
    int lineno = 0;
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        lineno++;
        char line[512];
        if (len >= sizeof line) {
            snprintf(err, err_len, "%s:%d: line longer than %zu characters", name, lineno,
                     sizeof line - 1);
            return PAGODA_ERR_INVALID;
        }
        memcpy(line, p, len);
        line[len] = '\0';
        p = eol ? eol + 1 : p + len;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *f[6];
        int nf = 0;
        for (char *tok = strtok(line, " \t\r"); tok; tok = strtok(NULL, " \t\r")) {
            if (nf == 6) break;
            f[nf++] = tok;
        }
        if (nf == 0) continue;
        if (nf != 5) {
            snprintf(err, err_len, "%s:%d: %d fields, expected 5: kind name gpu date commit",
                     name, lineno, nf == 6 ? 6 : nf);
            return PAGODA_ERR_INVALID;
        }
        if (!date_ok(f[3])) {
            snprintf(err, err_len, "%s:%d: date '%s' is not YYYY-MM-DD", name, lineno, f[3]);
            return PAGODA_ERR_INVALID;
        }
        if (!commit_ok(f[4])) {
            snprintf(err, err_len, "%s:%d: commit '%s' is not 7 to 40 hex digits", name, lineno,
                     f[4]);
            return PAGODA_ERR_INVALID;
        }
        if (strcmp(f[0], "weight") == 0 || strcmp(f[0], "kv") == 0) {
            int d = dtype_by_name(f[1]);
            if (d < 0) {
                snprintf(err, err_len, "%s:%d: '%s' is not a dtype name (F16, Q4_K, ...)", name,
                         lineno, f[1]);
                return PAGODA_ERR_INVALID;
            }
            if (f[0][0] == 'w')
                v->weights |= 1ull << d;
            else
                v->kv |= 1ull << d;
        } else if (strcmp(f[0], "op") == 0) {
            int op = -1;
            for (int i = 0; i < PCU_OP_COUNT_; i++)
                if (strcmp(op_names[i], f[1]) == 0) op = i;
            if (op < 0) {
                snprintf(err, err_len, "%s:%d: '%s' is not an optional op (geglu, scale, "
                         "attention_ext, matmul_multi, matmul_experts, moe_combine, swiglu_oai, "
                         "attention_sinks, kv_latent)",
                         name, lineno, f[1]);
                return PAGODA_ERR_INVALID;
            }
            v->ops |= 1u << op;
        } else {
            snprintf(err, err_len, "%s:%d: kind '%s' is not weight, kv or op", name, lineno, f[0]);
            return PAGODA_ERR_INVALID;
        }
        snprintf(v->gpu, sizeof v->gpu, "%s", f[2]);
        v->n_entries++;
    }
    return PAGODA_OK;
}

int pcu_verified_load(const char *path, pcu_verified *v, bool *missing, char *err,
                      size_t err_len)
{
    memset(v, 0, sizeof *v);
    *missing = false;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) {
            *missing = true;
            return PAGODA_OK;
        }
        snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return PAGODA_ERR_IO;
    }
    enum { MAX_BYTES = 1 << 20 };
    char *buf = malloc(MAX_BYTES + 1);
    int st = PAGODA_OK;
    if (!buf) {
        snprintf(err, err_len, "%s: out of memory", path);
        st = PAGODA_ERR_NOMEM;
        goto out;
    }
    size_t n = fread(buf, 1, MAX_BYTES + 1, f);
    if (ferror(f)) {
        snprintf(err, err_len, "%s: read error", path);
        st = PAGODA_ERR_IO;
        goto out;
    }
    if (n > MAX_BYTES) {
        snprintf(err, err_len, "%s: larger than %d bytes", path, MAX_BYTES);
        st = PAGODA_ERR_INVALID;
        goto out;
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n)) {
        snprintf(err, err_len, "%s: holds a NUL byte: not a text list", path);
        st = PAGODA_ERR_INVALID;
        goto out;
    }
    st = pcu_verified_parse(buf, path, v, err, err_len);
out:
    free(buf);
    fclose(f);
    return st;
}

static size_t put_types(char *s, size_t len, size_t at, const char *label, uint64_t mask)
{
    if (!mask) return at;
    if (at < len) at += (size_t)snprintf(s + at, len - at, "%s%s", at ? "; " : "", label);
    for (int d = 0; d < 64; d++)
        if (((mask >> d) & 1) && at < len)
            at += (size_t)snprintf(s + at, len - at, " %s", pagoda_dtype_name(d));
    return at;
}

void pcu_verified_apply(const pcu_verified *v, bool allow_unverified, uint64_t have_weights,
                        uint64_t have_kv, uint64_t *weights, uint64_t *kv, char *refused,
                        size_t refused_len)
{
    uint64_t w = allow_unverified ? have_weights : have_weights & v->weights;
    uint64_t k = allow_unverified ? have_kv : have_kv & v->kv;
    *weights = w;
    *kv = k;
    if (!refused || !refused_len) return;
    refused[0] = '\0';
    size_t at = put_types(refused, refused_len, 0, "weights", have_weights & ~w);
    put_types(refused, refused_len, at, "kv", have_kv & ~k);
}
