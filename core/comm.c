/*
 * comm.c: see comm.h. Each call is wrapped so a failure marks the group
 * broken (a collective that failed on one rank leaves the others in an
 * unknown state: the job must end) and so its time and bytes are counted.
 * Not for: the wire format of a step (tp.c).
 */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host.h"
#include "log.h"
#include "plugin_loader.h"

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int pagoda_comm_open(const pagoda_config *cfg, const char *name, pagoda_comm **out, char *err,
                     size_t err_len)
{
    *out = NULL;
    pagoda_config *own = NULL;
    if (!cfg) cfg = own = pagoda_config_new_empty();
    pagoda_comm *c = calloc(1, sizeof *c);
    int st = PAGODA_ERR_NOMEM;
    if (!c || !cfg) {
        ERR("out of memory");
        goto fail;
    }
    c->own_cfg = own;   /* the host table reads it until close */
    if ((st = pagoda_plugin_load(cfg, PAGODA_KIND_COMM, name, &c->p, err, err_len))) goto fail;
    c->h = pagoda_host_new(cfg, PAGODA_KIND_COMM, name);
    if (!c->h) {
        ERR("out of memory");
        st = PAGODA_ERR_NOMEM;
        goto fail;
    }
    if ((st = pagoda_plugin_create(c->p, c->h, &c->ctx, err, err_len))) goto fail;
    c->ops = c->p->ops.comm;
    c->name = c->p->desc.name;
    c->info.struct_size = sizeof c->info;
    if ((st = c->ops.info(c->ctx, &c->info))) {
        ERR("comm.%s: info failed (%s)", name, pagoda_status_str(st));
        goto fail;
    }
    if (c->info.size < 1 || c->info.rank < 0 || c->info.rank >= c->info.size) {
        ERR("comm.%s: info says rank %d of %d, which is not a rank of a group", name, c->info.rank,
            c->info.size);
        st = PAGODA_ERR_INTERNAL;
        goto fail;
    }
    *out = c;
    return PAGODA_OK;
fail:
    pagoda_comm_close(c);
    if (!c) pagoda_config_free(own);
    return st;
}

void pagoda_comm_close(pagoda_comm *c)
{
    if (!c) return;
    if (c->ctx) pagoda_plugin_destroy(c->p, c->ctx);
    pagoda_host_free(c->h);
    pagoda_plugin_free(c->p);
    pagoda_config_free(c->own_cfg);
    free(c);
}

static int usable(pagoda_comm *c, const char *what, char *err, size_t err_len)
{
    if (!c->broken) return PAGODA_OK;
    ERR("comm.%s: %s refused: an earlier collective failed, the group is broken", c->name, what);
    return PAGODA_ERR_STATE;
}

static int done(pagoda_comm *c, int st, double t0, size_t bytes, int64_t *calls, int64_t *nbytes,
                double *secs)
{
    double dt = now_s() - t0;
    c->st.calls++;
    c->st.bytes += (int64_t)bytes;
    c->st.seconds += dt;
    if (calls) {
        (*calls)++;
        *nbytes += (int64_t)bytes;
        *secs += dt;
    }
    if (st) c->broken = true;
    return st;
}

int pagoda_comm_all_reduce_f32(pagoda_comm *c, float *buf, size_t count, char *err, size_t err_len)
{
    int st = usable(c, "all_reduce", err, err_len);
    if (st) return st;
    double t0 = now_s();
    st = c->ops.all_reduce(c->ctx, buf, count, PAGODA_DTYPE_F32, PAGODA_COMM_SUM, err, err_len);
    return done(c, st, t0, count * sizeof(float), &c->st.all_reduce_calls, &c->st.all_reduce_bytes,
                &c->st.all_reduce_seconds);
}

int pagoda_comm_broadcast(pagoda_comm *c, void *buf, size_t bytes, int32_t root, char *err,
                          size_t err_len)
{
    int st = usable(c, "broadcast", err, err_len);
    if (st) return st;
    double t0 = now_s();
    st = c->ops.broadcast(c->ctx, buf, bytes, root, err, err_len);
    return done(c, st, t0, bytes, &c->st.broadcast_calls, &c->st.broadcast_bytes,
                &c->st.broadcast_seconds);
}

int pagoda_comm_all_gather(pagoda_comm *c, const void *send, size_t bytes, void *recv, char *err,
                           size_t err_len)
{
    int st = usable(c, "all_gather", err, err_len);
    if (st) return st;
    double t0 = now_s();
    st = c->ops.all_gather(c->ctx, send, bytes, recv, err, err_len);
    return done(c, st, t0, bytes, NULL, NULL, NULL);
}

int pagoda_comm_barrier(pagoda_comm *c, char *err, size_t err_len)
{
    int st = usable(c, "barrier", err, err_len);
    if (st) return st;
    double t0 = now_s();
    st = c->ops.barrier(c->ctx, err, err_len);
    return done(c, st, t0, 0, NULL, NULL, NULL);
}

void pagoda_comm_interrupt(pagoda_comm *c)
{
    if (c && c->ctx && c->ops.interrupt) c->ops.interrupt(c->ctx);
}
