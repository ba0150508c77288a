/* include/ferry/mitm.h: Ferry embedded as an intercepting proxy. */
#include <errno.h>
#include <ferry/mitm.h>
#include <ferry/webtransport.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "handler/mitm.h"
#include "server.h"

struct ferry {
    fy_config_t *cfg; /* owned */
    fy_server_t *srv; /* owned */
    bool started;
};

ferry_t *ferry_new(const char *yaml, char *err, size_t errlen)
{
    char *buf = NULL;
    size_t blen = 0;
    FILE *ef = open_memstream(&buf, &blen);
    fy_config_t *cfg = fy_config_load_text("<embedded>", yaml, strlen(yaml), ef);
    if (ef) fclose(ef);
    if (!cfg) {
        snprintf(err, errlen, "%s", buf ? buf : "invalid configuration");
        free(buf);
        return NULL;
    }
    free(buf);
    fy_server_t *srv = fy_server_new(cfg);
    if (!srv) {
        snprintf(err, errlen, "server setup failed (see the error log)");
        fy_config_free(cfg);
        return NULL;
    }
    ferry_t *f = calloc(1, sizeof *f);
    if (!f) {
        fy_server_free(srv);
        fy_config_free(cfg);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    f->cfg = cfg;
    f->srv = srv;
    return f;
}

int ferry_set_hooks(ferry_t *f, const ferry_hooks_t *hooks)
{
    fy_handler_t *m = fy_server_mitm(f->srv);
    if (!m || f->started) return -EINVAL;
    fy_mitm_set_hooks(m, hooks);
    return 0;
}

int ferry_set_webtransport(ferry_t *f, const ferry_wt_ops_t *ops)
{
    if (f->started) return -EINVAL;
    return fy_server_set_wt_app(f->srv, ops) > 0 ? 0 : -EINVAL;
}

int ferry_start(ferry_t *f)
{
    if (f->started) return -EALREADY;
    signal(SIGPIPE, SIG_IGN);
    int r = fy_server_start(f->srv);
    if (r == 0) f->started = true;
    return r;
}

void ferry_stop(ferry_t *f)
{
    if (!f->started) return;
    fy_server_stop(f->srv, 10000);
    f->started = false;
}

void ferry_free(ferry_t *f)
{
    if (!f) return;
    ferry_stop(f);
    fy_server_free(f->srv);
    fy_config_free(f->cfg);
    free(f);
}
