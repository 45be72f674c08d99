/*
 * integ_util.c: the shared part of the C integration tests (see
 * integ_util.h): run set-up and end, the real server's start and stop,
 * buffers, one libcurl request, JSON paths, Prometheus samples.
 * Not for: a test of its own (tests/CMakeLists.txt leaves it out of the
 * programs it globs and links it into each).
 */
#define _GNU_SOURCE
#include "integ_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *g_bin, *g_src;
char g_tmp[256];
atomic_int g_fail, g_checks;

static const char *g_name = "integration";

#define MAX_SERVERS 8
static volatile pid_t g_pids[MAX_SERVERS];

static void kill_all(void)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (g_pids[i] > 0) { kill(g_pids[i], SIGKILL); g_pids[i] = 0; }
}

static void on_fatal(int sig)
{
    kill_all();
    static const char msg[] = "integration test: fatal signal or watchdog; servers killed\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(128 + sig);
}

int integ_init(const char *name, unsigned watchdog_s)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_name = name;
    g_bin = getenv("PAGODA_BIN");
    g_src = getenv("PAGODA_SOURCE_DIR");
    if (!g_bin || !g_src) {
        fprintf(stderr, "%s: set PAGODA_BIN and PAGODA_SOURCE_DIR (ctest does)\n", name);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_fatal;
    sigaction(SIGALRM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGABRT, &sa, NULL);
    atexit(kill_all);
    alarm(watchdog_s);
    snprintf(g_tmp, sizeof g_tmp, "/tmp/pagoda-%s-XXXXXX", name);
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return 0;
}

int integ_finish(void)
{
    curl_global_cleanup();
    int fails = atomic_load(&g_fail);
    if (!fails) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd)) {}
    } else {
        fprintf(stderr, "logs kept in %s\n", g_tmp);
    }
    printf("%s: %d checks, %d failed\n", g_name, atomic_load(&g_checks), fails);
    return fails ? 1 : 0;
}

void msleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void buf_put(buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 4096;
        while (c < b->len + n + 1) c *= 2;
        char *np = realloc(b->p, c);
        if (!np) abort(); /* a test without memory has nothing left to check */
        b->p = np;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

/* ------------------------------------------------------------ servers */

void print_log_tail(const server *s)
{
    FILE *f = fopen(s->log, "r");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, n > 4000 ? n - 4000 : 0, SEEK_SET);
    fprintf(stderr, "---- %s server log (tail) ----\n", s->name);
    char b[512];
    size_t r;
    while ((r = fread(b, 1, sizeof b, f)) > 0) fwrite(b, 1, r, stderr);
    fprintf(stderr, "---- end of %s log ----\n", s->name);
    fclose(f);
}

static void forget_pid(pid_t pid)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (g_pids[i] == pid) g_pids[i] = 0;
}

int server_start(server *s, const char *name, const char *const *sets)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->log, sizeof s->log, "%s/%s.log", g_tmp, name);
    char portfile[512], cfg[512], pf_set[600];
    snprintf(portfile, sizeof portfile, "%s/%s.port", g_tmp, name);
    snprintf(cfg, sizeof cfg, "%s/configs/cpu-ci.ini", g_src);
    snprintf(pf_set, sizeof pf_set, "frontend.http.port_file=%s", portfile);
    unlink(portfile);

    const char *argv[64];
    int n = 0;
    argv[n++] = g_bin;
    argv[n++] = "--config";
    argv[n++] = cfg;
    argv[n++] = "--set";
    argv[n++] = "backend.cpu.threads=1";
    argv[n++] = "--set";
    argv[n++] = "frontend.http.port=0";
    argv[n++] = "--set";
    argv[n++] = pf_set;
    for (int i = 0; sets && sets[i] && n < 60; i++) {
        argv[n++] = "--set";
        argv[n++] = sets[i];
    }
    argv[n] = NULL;

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
        execv(g_bin, (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    for (int i = 0; i < MAX_SERVERS; i++)
        if (g_pids[i] == 0) { g_pids[i] = pid; break; }
    for (int i = 0; i < 600; i++) { /* up to ~60 s, for a loaded CI machine */
        int wst;
        if (waitpid(pid, &wst, WNOHANG) == pid) {
            fprintf(stderr, "%s: server exited before listening\n", name);
            forget_pid(pid);
            s->pid = 0;
            print_log_tail(s);
            return -1;
        }
        FILE *f = fopen(portfile, "r");
        if (f) {
            int port = 0;
            int ok = fscanf(f, "%d", &port) == 1 && port > 0;
            fclose(f);
            if (ok) {
                /* the port opens before the weights are in (/health answers
                 * 503 while they load): the server is started when /health
                 * says 200, within a deadline for a loaded host */
                s->port = port;
                for (int64_t until = now_ms() + 300000; now_ms() < until;) {
                    resp r;
                    int rc = http(s, "GET", "/health", NULL, 0, NULL, &r);
                    long status = r.status;
                    resp_free(&r);
                    if (rc == 0 && status == 200) return 0;
                    if (waitpid(pid, &wst, WNOHANG) == pid) break;
                    msleep(50);
                }
                fprintf(stderr, "%s: /health did not answer 200 within 300 s\n", name);
                print_log_tail(s);
                return -1;
            }
        }
        msleep(100);
    }
    fprintf(stderr, "%s: no port file after 60 s\n", name);
    print_log_tail(s);
    return -1;
}

int server_stop(server *s, int sig)
{
    if (s->pid <= 0) return -1;
    if (sig) kill(s->pid, sig);
    int wst = -1;
    pid_t r = 0;
    for (int i = 0; i < 300 && (r = waitpid(s->pid, &wst, WNOHANG)) == 0; i++) msleep(100);
    if (r != s->pid) {
        fprintf(stderr, "%s: still running 30 s after signal %d; killing\n", s->name, sig);
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &wst, 0);
        wst = -1;
    }
    forget_pid(s->pid);
    s->pid = 0;
    return wst;
}

/* ------------------------------------------------------------ HTTP */

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
    buf_put(ud, p, sz * nm);
    return sz * nm;
}

void resp_free(resp *r)
{
    free(r->body.p);
    free(r->hdrs.p);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

CURL *easy_for(const server *s, const char *method, const char *path, const char *body, long body_len,
               const char *key, struct curl_slist **hl)
{
    CURL *c = curl_easy_init();
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    *hl = curl_slist_append(NULL, "Content-Type: application/json");
    *hl = curl_slist_append(*hl, "Expect:"); /* no 100-continue round trip */
    if (key) {
        char h[256];
        snprintf(h, sizeof h, "Authorization: Bearer %s", key);
        *hl = curl_slist_append(*hl, h);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hl);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, body_len >= 0 ? body_len : (long)strlen(body));
    }
    if (strcmp(method, "HEAD") == 0) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (!(body && strcmp(method, "POST") == 0) && strcmp(method, "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    return c;
}

int http(const server *s, const char *method, const char *path, const char *body, long body_len,
         const char *key, resp *r)
{
    memset(r, 0, sizeof *r);
    struct curl_slist *hl = NULL;
    CURL *c = easy_for(s, method, path, body, body_len, key, &hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r->hdrs);
    int64_t t0 = now_ms();
    CURLcode cc = curl_easy_perform(c);
    r->secs = (double)(now_ms() - t0) / 1000;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hl);
    if (r->body.p) r->json = json_loadb(r->body.p, r->body.len, 0, NULL);
    if (cc != CURLE_OK) {
        fprintf(stderr, "%s %s: curl: %s\n", method, path, curl_easy_strerror(cc));
        return -1;
    }
    return 0;
}

json_t *jget(json_t *j, const char *path)
{
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *save = NULL, *k = strtok_r(tmp, ".", &save); k && j; k = strtok_r(NULL, ".", &save))
        j = json_is_array(j) ? json_array_get(j, (size_t)atoi(k)) : json_object_get(j, k);
    return j;
}

const char *jget_str(json_t *j, const char *path)
{
    json_t *v = jget(j, path);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

long long jget_int(json_t *j, const char *path)
{
    json_t *v = jget(j, path);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

double metric(const char *text, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, name, nl) == 0 && p[nl] == ' ') return strtod(p + nl + 1, NULL);
        p = strchr(p, '\n');
        if (p) p++;
    }
    return NAN;
}
