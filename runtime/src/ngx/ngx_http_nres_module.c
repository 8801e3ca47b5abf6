/* SPDX-License-Identifier: MIT */
/* ngx_http_nres_module.c - the gateway's balancer mode without a Lua phase
 * per request: nginx's proxy moves the bytes, libnres decides
 * (nres/gateway.h), in C.
 *
 *   load_module .../ngx_http_lua_module.so;
 *   load_module .../ngx_http_nres_module.so;
 *   init_by_lua_block {                         # declarations stay in Lua
 *     gw.scope("upstreams", { policy = "gateway" })
 *     gw.upstream("backend", { scope = "upstreams", peers = { ... } })
 *   }
 *   upstream backend { server 0.0.0.1; nres_balancer; keepalive 32; }
 *                      # (a placeholder server: the peers are gw.upstream's)
 *   location / {
 *     nres_admit backend;                        # preaccess: 504/503 refusals
 *     # or: nres_admit backend limiter=clients key=$binary_remote_addr;  (+429)
 *     nres_admit_log_level warn;   # a line per refusal (default info)
 *     # nres_admit_dry_run on;   # refusals counted (would_refuse), let through
 *     proxy_set_header X-Deadline-Ms $nres_deadline_ms;
 *     proxy_next_upstream error timeout http_500 http_502 http_503 http_504;
 *     proxy_next_upstream_tries 0;
 *     proxy_pass http://backend;
 *   }
 *   log_format ... '$status $nres_reason';       # why nres_admit refused
 *   log_format ... '$nres_tries $nres_retry';     # tries begun, why no more
 *
 * nres_balancer must be the upstream's balancing method: least_conn, hash,
 * ip_hash or random after it fail nginx -t (keepalive may follow). The
 * refusals' statuses and reasons are nres_gw_refusal's table, the Lua
 * balancer's too.
 *
 * The upstream's state is what gw.upstream made in init_by_lua (shared
 * regions, found by name in libnres's registry in this module's
 * postconfiguration, which runs after the Lua module's: nginx orders the
 * Lua module, a filter, before plain modules such as this one, whatever
 * the load_module order; checked). The peers' addresses are parsed then,
 * once. nginx -t and nginx -s run no init_by_lua, so the names are checked
 * at start and reload only. Per request: the
 * admission (preaccess) keeps the request's state in its pool; each try
 * (peer get) picks a peer and sets the try's timeouts from the time left;
 * a try that fails (a failing status, seen by a wrapper of the upstream's
 * header parser; or no connection, a timeout, a broken answer, seen at
 * the try's free) is granted one more try (pc->tries) if the policy, the
 * time and the retry budget allow, so a healthy request never writes the
 * budget every worker shares; a retry's request is made again when it carries
 * $nres_deadline_ms (the retry's own time left); each try's end (peer
 * free) is recorded into its peer; the call's end (the pool's cleanup,
 * after the log phase, so an error_page redirect cannot lose it) tells
 * the upstream's breaker and budget and counts the call; an internal
 * redirect, which clears module ctxs, finds the admission again through
 * that cleanup. No heap allocation: the state is in the request's pool,
 * with the call's end (one allocation); a try's timeouts come with an
 * upstream conf of the timeouts wanted (ngx_http_nres_try_conf), made
 * once per location and worker for the usual try (the policy's attempt
 * timeout), or once per request when the time left is shorter.
 */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <dlfcn.h>
#include <link.h>
#include <math.h>
#include <stdlib.h>

#include "nres.h"
#include "nres/gateway.h"
#include "nres/version.h"

// clang-format off
/* nginx's layout of structs, names in one column */

/* A name to find in the registry after init_by_lua, and where it is kept:
 * an upstream (gw.upstream with peers) or a client limiter (gw.limiter). */
typedef struct {
    ngx_str_t                      name;
    void                         **target;
    ngx_uint_t                     limiter;
    ngx_str_t                      file;
    ngx_uint_t                     line;
    ngx_str_t                      directive;   /* its directive's name */
} ngx_http_nres_ref_t;


typedef struct {
    ngx_array_t                    refs;        /* ngx_http_nres_ref_t */
    ngx_array_t                    balancers;   /* ngx_http_nres_srv_conf_t * */
} ngx_http_nres_main_conf_t;


/* A location's upstream conf and this worker's copy of it with the
 * policy's attempt timeout as its connect, send and read timeouts. */
typedef struct {
    ngx_http_upstream_conf_t      *conf;
    ngx_http_upstream_conf_t      *timed;
} ngx_http_nres_timed_t;


#define NGX_HTTP_NRES_TIMED_MAX  8   /* locations per upstream with a copy */


typedef struct {
    ngx_str_t                      name;        /* gw.upstream's name */
    nres_gw_upstream_t            *gw;
    ngx_http_upstream_srv_conf_t  *us;
    ngx_str_t                      file;        /* where nres_balancer is */
    ngx_uint_t                     line;
    /* its init_upstream ran: no other balancing method replaced it */
    ngx_uint_t                     initialized;
    /* the policy's attempt timeout, ms */
    ngx_msec_t                     attempt_ms;
    ngx_uint_t                     ntimed;
    ngx_http_nres_timed_t          timed[NGX_HTTP_NRES_TIMED_MAX];
} ngx_http_nres_srv_conf_t;


typedef struct {
    /* nres_admit's upstream (found after init_by_lua; inherited), or NULL */
    nres_gw_upstream_t           **gw;
    nres_gw_limiter_t            **limiter;     /* its client limiter */
    ngx_http_complex_value_t      *key;         /* the client's key for it */
    ngx_uint_t                     log_level;   /* nres_admit_log_level */
    /* nres_admit_dry_run: refusals counted (would_refuse), requests let
     * through */
    ngx_flag_t                     dry_run;
} ngx_http_nres_loc_conf_t;


/* One request's state (its pool), its call's end in the pool's cleanup
 * list. */
typedef struct {
    ngx_pool_cleanup_t             cln;         /* handler set once admitted */
    nres_gw_request_t              req;
    nres_gw_upstream_t            *gw;
    ngx_http_nres_srv_conf_t      *scf;         /* the balancer trying */
    ngx_http_request_t            *r;
    ngx_http_upstream_conf_t      *conf;        /* the location's upstream's */
    ngx_http_upstream_conf_t      *own;         /* the request's copy */
    int64_t                        left_ms;     /* X-Deadline-Ms, -1: none */
    int                            last;        /* the last try's peer, -1 */
    /* nres_admit's refusal (nres_stop_t), 0: none ($nres_reason) */
    int                            stop;
    /* why the last failed try got no retry (nres_stop_t), 0: none or a
     * retry was granted ($nres_retry) */
    int                            retry_stop;
    ngx_uint_t                     session_tries;   /* this session's */
    /* this try's failure was asked about a retry already */
    ngx_uint_t                     granted;
    ngx_int_t                    (*process_header)(ngx_http_request_t *r);
    ngx_int_t                    (*reinit_request)(ngx_http_request_t *r);
    /* $nres_deadline_ms formatted (the last deadline_len bytes), 0: not
     * yet */
    size_t                         deadline_len;
    /* the current try's peer (copied: its entry in the upstream's view
     * may go to a peer added later, once this try ended) */
    ngx_str_t                      peer_name;
    u_char                         peer_text[NRES_GW_NAME_MAX + 1];
    socklen_t                      socklen;
    union {
        struct sockaddr            sa;
        u_char                     bytes[NRES_GW_SOCKADDR_MAX];
    }                              sockaddr;
    u_char                         deadline[NGX_INT64_LEN];
} ngx_http_nres_ctx_t;

// clang-format on

static ngx_int_t ngx_http_nres_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_nres_postconfiguration(ngx_conf_t *cf);
static void *ngx_http_nres_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_nres_create_srv_conf(ngx_conf_t *cf);
static void *ngx_http_nres_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_nres_merge_loc_conf(ngx_conf_t *cf, void *parent,
                                          void *child);
static char *ngx_http_nres_balancer(ngx_conf_t *cf, ngx_command_t *cmd,
                                    void *conf);
static char *ngx_http_nres_admit(ngx_conf_t *cf, ngx_command_t *cmd,
                                 void *conf);
static ngx_int_t ngx_http_nres_init_process(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_nres_deadline_variable(ngx_http_request_t *r,
                                                 ngx_http_variable_value_t *v,
                                                 uintptr_t data);
static ngx_int_t ngx_http_nres_reason_variable(ngx_http_request_t *r,
                                               ngx_http_variable_value_t *v,
                                               uintptr_t data);
static ngx_int_t ngx_http_nres_tries_variable(ngx_http_request_t *r,
                                              ngx_http_variable_value_t *v,
                                              uintptr_t data);

// clang-format off
/* nginx's own layout of a module's tables, a slot a line */

/* nres_admit_log_level: the level of the line each refusal logs (as
 * limit_req_log_level); info by default, which nginx's default error_log
 * level (error) leaves out: a refusal is an expected outcome, counted in
 * /nres/status, and an outage refuses every request. */
static ngx_conf_enum_t  ngx_http_nres_log_levels[] = {
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_nres_commands[] = {

    { ngx_string("nres_balancer"),
      NGX_HTTP_UPS_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
      ngx_http_nres_balancer,
      NGX_HTTP_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("nres_admit"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE123,
      ngx_http_nres_admit,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("nres_admit_log_level"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_nres_loc_conf_t, log_level),
      &ngx_http_nres_log_levels },

    { ngx_string("nres_admit_dry_run"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_nres_loc_conf_t, dry_run),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_nres_module_ctx = {
    ngx_http_nres_add_variables,           /* preconfiguration */
    ngx_http_nres_postconfiguration,       /* postconfiguration */

    ngx_http_nres_create_main_conf,        /* create main configuration */
    NULL,                                  /* init main configuration */

    ngx_http_nres_create_srv_conf,         /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_nres_create_loc_conf,         /* create location configuration */
    ngx_http_nres_merge_loc_conf           /* merge location configuration */
};


ngx_module_t  ngx_http_nres_module = {
    NGX_MODULE_V1,
    &ngx_http_nres_module_ctx,             /* module context */
    ngx_http_nres_commands,                /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_nres_init_process,            /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* The variables, registered in a loop (ngx_http_nres_add_variables).
 * $nres_deadline_ms is changeable: the Lua balancer's `set_by_lua
 * $nres_deadline_ms` may sit in the same nginx (its value, once set, is
 * what that location reads). */
static ngx_http_variable_t  ngx_http_nres_vars[] = {

    { ngx_string("nres_deadline_ms"), NULL, ngx_http_nres_deadline_variable,
      0, NGX_HTTP_VAR_NOCACHEABLE|NGX_HTTP_VAR_CHANGEABLE, 0 },

    { ngx_string("nres_reason"), NULL, ngx_http_nres_reason_variable,
      0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("nres_tries"), NULL, ngx_http_nres_tries_variable,
      0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("nres_retry"), NULL, ngx_http_nres_reason_variable,
      1, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};

// clang-format on

/* ------------------------------------------------------------ conf */

static void *
ngx_http_nres_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_nres_main_conf_t  *mcf;

    mcf = ngx_pcalloc(cf->pool, sizeof *mcf);
    if (mcf == NULL) {
        return NULL;
    }
    if (ngx_array_init(&mcf->refs, cf->pool, 4, sizeof(ngx_http_nres_ref_t))
            != NGX_OK
        || ngx_array_init(&mcf->balancers, cf->pool, 4,
                          sizeof(ngx_http_nres_srv_conf_t *))
               != NGX_OK)
    {
        return NULL;
    }
    /* A configuration starts: its init_by_lua registers its upstreams anew;
     * an older one's registrations are not this one's. */
    nres_gw_registry_clear();
    return mcf;
}

static void *
ngx_http_nres_create_srv_conf(ngx_conf_t *cf)
{
    return ngx_pcalloc(cf->pool, sizeof(ngx_http_nres_srv_conf_t));
}

static void *
ngx_http_nres_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_nres_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_nres_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }
    conf->log_level = NGX_CONF_UNSET_UINT;
    conf->dry_run = NGX_CONF_UNSET;
    return conf;
}

static char *
ngx_http_nres_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_nres_loc_conf_t  *prev = parent;
    ngx_http_nres_loc_conf_t  *conf = child;

    if (conf->gw == NULL) {
        conf->gw = prev->gw;
        conf->limiter = prev->limiter;
        conf->key = prev->key;
    }
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_INFO);
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    return NGX_CONF_OK;
}

/* Remember `name` to be found after init_by_lua ran, into *target. */
static char *
ngx_http_nres_ref(ngx_conf_t *cf, ngx_str_t name, void **target,
                  ngx_uint_t limiter, ngx_str_t *directive)
{
    ngx_http_nres_ref_t        *ref;
    ngx_http_nres_main_conf_t  *mcf;

    if (name.len == 0 || name.len > NRES_GW_NAME_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V: %s name: expected 1..%d bytes, got \"%V\"",
                           directive, limiter ? "limiter" : "upstream",
                           NRES_GW_NAME_MAX, &name);
        return NGX_CONF_ERROR;
    }
    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_nres_module);
    ref = ngx_array_push(&mcf->refs);
    if (ref == NULL) {
        return NGX_CONF_ERROR;
    }
    ref->name = name;
    ref->target = target;
    ref->limiter = limiter;
    ref->file = cf->conf_file->file.name;
    ref->line = cf->conf_file->line;
    ref->directive = *directive;
    return NGX_CONF_OK;
}

static ngx_int_t ngx_http_nres_init_upstream(ngx_conf_t *cf,
                                             ngx_http_upstream_srv_conf_t *us);

static char *
ngx_http_nres_balancer(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_nres_srv_conf_t  *scf = conf;

    ngx_str_t                      *value;
    ngx_http_nres_srv_conf_t      **slot;
    ngx_http_nres_main_conf_t      *mcf;
    ngx_http_upstream_srv_conf_t   *us;

    us = ngx_http_conf_get_module_srv_conf(cf, ngx_http_upstream_module);
    value = cf->args->elts;
    if (scf->us != NULL) {
        return "is duplicate";
    }
    if (us->peer.init_upstream != NULL) {
        ngx_conf_log_error(
            NGX_LOG_EMERG, cf, 0,
            "%V: expected the first balancing directive of upstream "
            "\"%V\" (keepalive and the like come after it), got another before "
            "it",
            &cmd->name, &us->host);
        return NGX_CONF_ERROR;
    }
    scf->us = us;
    scf->name = cf->args->nelts > 1 ? value[1] : us->host;
    scf->file = cf->conf_file->file.name;
    scf->line = cf->conf_file->line;
    us->peer.init_upstream = ngx_http_nres_init_upstream;
    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_nres_module);
    slot = ngx_array_push(&mcf->balancers);
    if (slot == NULL) {
        return NGX_CONF_ERROR;
    }
    *slot = scf;
    return ngx_http_nres_ref(cf, scf->name, (void **) &scf->gw, 0, &cmd->name);
}

/* nres_admit UPSTREAM [limiter=NAME key=VALUE]: admission; with a client
 * limiter (gw.limiter's NAME) asked first for the key's value (e.g.
 * $binary_remote_addr): 429 with Retry-After over its rate. */
static char *
ngx_http_nres_admit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_nres_loc_conf_t  *lcf = conf;

    ngx_str_t                          *value, lname, key;
    ngx_uint_t                          i;
    ngx_http_compile_complex_value_t    ccv;

    value = cf->args->elts;
    if (lcf->gw != NULL) {
        return "is duplicate";
    }
    ngx_str_null(&lname);
    ngx_str_null(&key);
    for (i = 2; i < cf->args->nelts; i++) {
        if (ngx_strncmp(value[i].data, "limiter=", 8) == 0) {
            lname.data = value[i].data + 8;
            lname.len = value[i].len - 8;
        } else if (ngx_strncmp(value[i].data, "key=", 4) == 0) {
            key.data = value[i].data + 4;
            key.len = value[i].len - 4;
        } else {
            ngx_conf_log_error(
                NGX_LOG_EMERG, cf, 0,
                "%V: expected limiter=NAME or key=VALUE, got \"%V\"",
                &cmd->name, &value[i]);
            return NGX_CONF_ERROR;
        }
    }
    if ((lname.data == NULL) != (key.data == NULL)
        || (key.data != NULL && key.len == 0))
    {
        ngx_conf_log_error(
            NGX_LOG_EMERG, cf, 0,
            "%V: expected limiter=NAME and key=VALUE together (the "
            "client's key, e.g. key=$binary_remote_addr), got %s",
            &cmd->name,
            lname.data == NULL ? "a key without a limiter"
            : key.data == NULL ? "a limiter without a key"
                               : "an empty key");
        return NGX_CONF_ERROR;
    }
    lcf->gw = ngx_pcalloc(cf->pool, sizeof *lcf->gw);
    if (lcf->gw == NULL) {
        return NGX_CONF_ERROR;
    }
    if (lname.data != NULL) {
        lcf->limiter = ngx_pcalloc(cf->pool, sizeof *lcf->limiter);
        lcf->key = ngx_pcalloc(cf->pool, sizeof *lcf->key);
        if (lcf->limiter == NULL || lcf->key == NULL) {
            return NGX_CONF_ERROR;
        }
        ngx_memzero(&ccv, sizeof ccv);
        ccv.cf = cf;
        ccv.value = &key;
        ccv.complex_value = lcf->key;
        if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
        if (ngx_http_nres_ref(cf, lname, (void **) lcf->limiter, 1, &cmd->name)
            != NGX_CONF_OK)
        {
            return NGX_CONF_ERROR;
        }
    }
    return ngx_http_nres_ref(cf, value[1], (void **) lcf->gw, 0, &cmd->name);
}

/* ------------------------------------------------- after init_by_lua */

static ngx_int_t
ngx_http_nres_lua_before_us(ngx_conf_t *cf)
{
    ngx_int_t   lua;
    ngx_uint_t  i;

    lua = -1;
    for (i = 0; cf->cycle->modules[i] != NULL; i++) {
        if (ngx_strcmp(cf->cycle->modules[i]->name, "ngx_http_lua_module") == 0)
        {
            lua = (ngx_int_t) i;
        }
    }
    if (lua < 0) {
        ngx_conf_log_error(
            NGX_LOG_EMERG, cf, 0,
            "nres: expected ngx_http_lua_module (its init_by_lua declares the "
            "upstreams with gw.upstream), got no such module loaded");
        return NGX_ERROR;
    }
    if ((ngx_uint_t) lua > ngx_http_nres_module.index) {
        ngx_conf_log_error(
            NGX_LOG_EMERG, cf, 0,
            "nres: expected load_module ngx_http_nres_module.so after "
            "ngx_http_lua_module.so (init_by_lua must run first), got it "
            "before");
        return NGX_ERROR;
    }
    return NGX_OK;
}

/* The peers' addresses: libnres parsed each IP literal (into the
 * upstream's view and its shared membership: a peer added at run time has
 * its own); a host name is resolved now, into both. */
static ngx_int_t
ngx_http_nres_parse_peers(ngx_conf_t *cf, ngx_http_nres_srv_conf_t *scf)
{
    nres_gw_upstream_t *gw = scf->gw;
    for (uint32_t i = 0; i < gw->n; i++) {
        ngx_url_t url;
        if (gw->peer[i].socklen > 0 || gw->peer[i].name[0] == '\0') {
            continue;
        }
        ngx_memzero(&url, sizeof url);
        url.url.data = (u_char *) gw->peer[i].name;
        url.url.len = ngx_strlen(gw->peer[i].name);
        url.no_resolve = 0;
        if (ngx_parse_url(cf->pool, &url) != NGX_OK || url.naddrs == 0
            || url.no_port) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "nres_balancer \"%V\": peers[%uD]: expected "
                               "\"host:port\", got \"%s\"%s%s",
                               &scf->name, i + 1, gw->peer[i].name,
                               url.err ? " - " : "", url.err ? url.err : "");
            return NGX_ERROR;
        }
        if (url.addrs[0].socklen > NRES_GW_SOCKADDR_MAX) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "nres_balancer \"%V\": peers[%uD]: expected "
                               "an IPv4 or IPv6 address, got \"%s\"",
                               &scf->name, i + 1, gw->peer[i].name);
            return NGX_ERROR;
        }
        ngx_memcpy(gw->peer[i].sockaddr.bytes, url.addrs[0].sockaddr,
                   url.addrs[0].socklen);
        gw->peer[i].socklen = url.addrs[0].socklen;
        nres_gw_member_t *m = nres_gw_member(gw->members, gw->peer[i].slot);
        if (m != NULL && m->socklen == 0) {
            ngx_memcpy(m->sockaddr.bytes, url.addrs[0].sockaddr,
                       url.addrs[0].socklen);
            m->socklen = url.addrs[0].socklen;
        }
    }
    return NGX_OK;
}

/* A hint for a name not found: init_by_lua declared it in another copy of
 * libnres. The module uses the file it was linked with; the Lua side loads
 * NRES_LIB's (or the default name's). Two files, two registries: the
 * module sees none of the Lua side's names. Writes ", ..." naming both
 * into `hint` when another libnres.so is loaded, "" otherwise. */
typedef struct {
    const char                    *own;
    const char                    *other;
} ngx_http_nres_libs_t;

static int
ngx_http_nres_lib_visit(struct dl_phdr_info *info, size_t size, void *data)
{
    ngx_http_nres_libs_t  *libs = data;

    const char  *name, *base;

    (void) size;
    name = info->dlpi_name;
    if (name == NULL || name[0] == '\0') {
        return 0;
    }
    base = strrchr(name, '/');
    base = base != NULL ? base + 1 : name;
    if (ngx_strncmp(base, "libnres.so", 10) != 0
        || ngx_strcmp(name, libs->own) == 0)
    {
        return 0;
    }
    libs->other = name;
    return 1;
}

static void
ngx_http_nres_other_lib_hint(u_char *hint, size_t cap)
{
    Dl_info               self;
    ngx_http_nres_libs_t  libs = {"", NULL};

    hint[0] = '\0';
    if (dladdr((void *) nres_gw_find, &self) == 0 || self.dli_fname == NULL) {
        return;
    }
    libs.own = self.dli_fname;
    dl_iterate_phdr(ngx_http_nres_lib_visit, &libs);
    if (libs.other != NULL) {
        *ngx_snprintf(
            hint, cap - 1,
            " (this module uses %s, and another libnres is loaded, %s: "
            "NRES_LIB must name the module's)",
            libs.own, libs.other)
            = '\0';
    }
}

static ngx_int_t ngx_http_nres_preaccess(ngx_http_request_t *r);

static ngx_int_t
ngx_http_nres_postconfiguration(ngx_conf_t *cf)
{
    u_char                      hint[NGX_MAX_PATH * 2 + 128];
    void                       *found;
    const char                 *name;
    ngx_uint_t                  i;
    ngx_http_handler_pt        *h;
    ngx_http_nres_ref_t        *ref;
    ngx_http_nres_srv_conf_t  **bal, **scf;
    ngx_http_nres_main_conf_t  *mcf;
    ngx_http_core_main_conf_t  *cmcf;

    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_nres_module);
    if (mcf->refs.nelts == 0) {
        return NGX_OK;
    }
    /* The module reads libnres's structs (an upstream's peers) by the
     * headers it was built with: a library of another layout would be read
     * with the wrong stride. */
    if (nres_abi_version() != NRES_ABI_VERSION) {
        ngx_log_error(
            NGX_LOG_EMERG, cf->log, 0,
            "nres: this module was built for libnres ABI %d, the libnres "
            "loaded has ABI %ud: build the module against that library",
            NRES_ABI_VERSION, nres_abi_version());
        return NGX_ERROR;
    }
    if (ngx_http_nres_lua_before_us(cf) != NGX_OK) {
        return NGX_ERROR;
    }
    /* least_conn, hash, ip_hash or random after nres_balancer replace it
     * (nginx only warns "load balancing method redefined"), and every
     * request would go to the placeholder server. keepalive wraps it. */
    bal = mcf->balancers.elts;
    for (i = 0; i < mcf->balancers.nelts; i++) {
        if (!bal[i]->initialized) {
            ngx_log_error(
                NGX_LOG_EMERG, cf->log, 0,
                "nres_balancer \"%V\": expected no other balancing method in "
                "upstream \"%V\" (keepalive may follow it), got one after it "
                "(least_conn, hash, ip_hash or random) replacing nres_balancer "
                "in %V:%ui",
                &bal[i]->name, &bal[i]->us->host, &bal[i]->file, bal[i]->line);
            return NGX_ERROR;
        }
    }
    /* Neither nginx -t nor the signaller of nginx -s reload|reopen|quit|stop
     * (systemd's reload runs it) runs init_by_lua, though both parse the
     * whole configuration: the names are checked where it ran, when the
     * master starts or reloads, where an unknown one fails the start, or
     * the reload (the running configuration stays). */
    if (ngx_test_config || ngx_process == NGX_PROCESS_SIGNALLER) {
        return NGX_OK;
    }
    ref = mcf->refs.elts;
    for (i = 0; i < mcf->refs.nelts; i++) {
        name = (const char *) ref[i].name.data;
        found = ref[i].limiter
                    ? (void *) nres_gw_limiter_find(name, ref[i].name.len)
                    : (void *) nres_gw_find(name, ref[i].name.len);
        if (found == NULL) {
            ngx_http_nres_other_lib_hint(hint, sizeof hint);
        }
        if (found == NULL && ref[i].limiter) {
            ngx_log_error(
                NGX_LOG_EMERG, cf->log, 0,
                "%V limiter=%V: expected a limiter declared in init_by_lua "
                "(gw.limiter(\"%V\", { rate = ... })), got none of that name "
                "in %V:%ui%s",
                &ref[i].directive, &ref[i].name, &ref[i].name, &ref[i].file,
                ref[i].line, hint);
            return NGX_ERROR;
        }
        if (found == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "%V \"%V\": expected an upstream declared with peers "
                          "in init_by_lua "
                          "(gw.upstream(\"%V\", { peers = ... })), got none of "
                          "that name in %V:%ui%s",
                          &ref[i].directive, &ref[i].name, &ref[i].name,
                          &ref[i].file, ref[i].line, hint);
            return NGX_ERROR;
        }
        *ref[i].target = found;
    }
    scf = mcf->balancers.elts;
    for (i = 0; i < mcf->balancers.nelts; i++) {
        if (ngx_http_nres_parse_peers(cf, scf[i]) != NGX_OK) {
            return NGX_ERROR;
        }
        /* what nres_gw_try_begin gives a try with more time left than that */
        scf[i]->attempt_ms
            = (ngx_msec_t) (scf[i]->gw->attempt_timeout / 1000000u);
    }
    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    *h = ngx_http_nres_preaccess;
    return NGX_OK;
}

/* Each worker's random choices and break jitter of its own, and its own
 * shard of the shared words every request writes (its number among the
 * workers: up to 8 workers never write one line, whatever their pids;
 * workers n and n + 8 share one, and so do an old and a new worker of one
 * number while a reload drains). Only workers: the cache manager and
 * loader run init_process too, with ngx_worker 0. */
static ngx_int_t
ngx_http_nres_init_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                  i;
    ngx_http_nres_ref_t        *ref;
    ngx_http_nres_main_conf_t  *mcf;

    mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_nres_module);
    if (mcf == NULL) {
        return NGX_OK;
    }
    if (mcf->refs.nelts > 0
        && (ngx_process == NGX_PROCESS_WORKER
            || ngx_process == NGX_PROCESS_SINGLE))
    {
        nres_shard_set((unsigned) ngx_worker);
    }
    ref = mcf->refs.elts;
    for (i = 0; i < mcf->refs.nelts; i++) {
        if (!ref[i].limiter && *ref[i].target != NULL) {
            nres_gw_seed(*ref[i].target, (uint64_t) ngx_pid * 2654435761u
                                             + nres_clock_now() + i);
        }
    }
    return NGX_OK;
}

/* ------------------------------------------------------ per request */

/* The call's end (its time: a breaker window keeps a sample only while
 * its slice is current, so not the last try's end, which a slow client's
 * download can leave seconds behind). */
static void
ngx_http_nres_end(void *data)
{
    ngx_http_nres_ctx_t  *ctx = data;

    nres_gw_request_end(ctx->gw, &ctx->req, nres_clock_now(),
                        (int) ctx->r->headers_out.status);
}

/* A request's state, its call's end registered with its pool (as
 * ngx_pool_cleanup_add does, in the same allocation). */
static ngx_http_nres_ctx_t *
ngx_http_nres_new_ctx(ngx_http_request_t *r, nres_gw_upstream_t *gw)
{
    ngx_http_nres_ctx_t  *ctx;

    ctx = ngx_palloc(r->pool, sizeof *ctx);
    if (ctx == NULL) {
        return NULL;
    }
    ctx->cln.handler = NULL; /* armed once admitted */
    ctx->cln.data = ctx;
    ctx->cln.next = r->pool->cleanup;
    r->pool->cleanup = &ctx->cln;
    ctx->gw = gw;
    ctx->r = r;
    ctx->scf = NULL;
    ctx->conf = NULL;
    ctx->own = NULL;
    ctx->left_ms = -1;
    ctx->last = -1;
    ctx->stop = 0;
    ctx->retry_stop = 0;
    ctx->session_tries = 0;
    ctx->granted = 0;
    ctx->process_header = NULL;
    ctx->reinit_request = NULL;
    ctx->deadline_len = 0;
    ngx_http_set_ctx(r, ctx, ngx_http_nres_module);
    return ctx;
}

/* The request's state: its module ctx, or, after an internal redirect
 * (which clears the ctx), the admission its pool's cleanup still holds:
 * a redirected request goes on under its first admission. NULL if none. */
static ngx_http_nres_ctx_t *
ngx_http_nres_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t   *c;
    ngx_http_nres_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_nres_module);
    if (ctx != NULL) {
        return ctx;
    }
    for (c = r->pool->cleanup; c != NULL; c = c->next) {
        if (c->handler == ngx_http_nres_end
            && ((ngx_http_nres_ctx_t *) c->data)->r == r)
        {
            ctx = c->data;
            ngx_http_set_ctx(r, ctx, ngx_http_nres_module);
            return ctx;
        }
    }
    return NULL;
}

/* The request's first header of this lowercase name, or NULL. */
static ngx_table_elt_t *
ngx_http_nres_header(ngx_http_request_t *r, const char *name, size_t len)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &r->headers_in.headers.part;
    h = part->elts;
    for (i = 0; /* void */; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }
            part = part->next;
            h = part->elts;
            i = 0;
            if (part->nelts == 0) {
                continue;
            }
        }
        if (h[i].key.len == len
            && ngx_strncmp(h[i].lowcase_key, name, len) == 0) {
            return &h[i];
        }
    }
}

/* The client's X-Deadline-Ms (the first one), a number of ms; NaN if
 * absent or not a number (nres_gw_deadline_ms, the Lua side's parser). */
static double
ngx_http_nres_inbound_ms(ngx_http_request_t *r)
{
    ngx_table_elt_t  *h;

    h = ngx_http_nres_header(r, "x-deadline-ms", 13);
    return h == NULL ? NAN
                     : nres_gw_deadline_ms((const char *) h->value.data,
                                           h->value.len);
}

/* The request's criticality from X-Criticality (nres_gw_class; default
 * without the header). */
static int
ngx_http_nres_class(ngx_http_request_t *r)
{
    ngx_table_elt_t  *h;

    h = ngx_http_nres_header(r, "x-criticality", 13);
    return h == NULL
               ? nres_gw_class(NULL, 0)
               : nres_gw_class((const char *) h->value.data, h->value.len);
}

/* nres_admit's refusal of the request (ctx: its state, no call to end)
 * for stop (nres_stop_t; NRES_STOP_LIMITED: its client limiter's, which
 * says how long to wait): the status and reason of nres_gw_refusal's
 * table, the reason in X-Nres-Reason, as the body and in $nres_reason, one
 * line at nres_admit_log_level; the client's connection kept. */
static ngx_int_t
ngx_http_nres_refuse(ngx_http_request_t *r, ngx_http_nres_ctx_t *ctx,
                     ngx_http_nres_loc_conf_t *lcf, int stop, nres_time_t wait)
{
    static ngx_str_t  type = ngx_string("text/plain");

    int                        client;
    u_char                    *p, *body;
    uint64_t                   secs;
    ngx_int_t                  rc;
    ngx_str_t                  reason;
    ngx_uint_t                 status;
    const char                *text;
    ngx_table_elt_t           *h;
    ngx_http_complex_value_t   cv;

    client = stop == NRES_STOP_LIMITED;
    status = (ngx_uint_t) nres_gw_refusal(stop, client, &text);
    reason.len = ngx_strlen(text);
    reason.data = (u_char *) text;
    ctx->gw = NULL;
    ctx->stop = stop;
    ngx_log_error(lcf->log_level, r->connection->log, 0,
                  "nres_admit: refused, %V, upstream \"%s\"%s%s%s", &reason,
                  (*lcf->gw)->name, client ? " by limiter \"" : "",
                  client ? (*lcf->limiter)->name : "", client ? "\"" : "");
    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    h->hash = 1;
    ngx_str_set(&h->key, "X-Nres-Reason");
    h->value = reason;
    /* Retry-After: whole seconds, at least 1 */
    if (status == NGX_HTTP_TOO_MANY_REQUESTS) {
        h = ngx_list_push(&r->headers_out.headers);
        p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
        if (h == NULL || p == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        secs = (wait + 999999999u) / 1000000000u;
        h->hash = 1;
        ngx_str_set(&h->key, "Retry-After");
        h->value.data = p;
        h->value.len = ngx_sprintf(p, "%uL", secs > 0 ? secs : 1) - p;
    }
    body = ngx_pnalloc(r->pool, reason.len + 1);
    if (body == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    ngx_memcpy(body, reason.data, reason.len);
    body[reason.len] = '\n';
    ngx_memzero(&cv, sizeof cv);
    cv.value.data = body;
    cv.value.len = reason.len + 1;
    rc = ngx_http_send_response(r, status, &type, &cv);
    ngx_http_finalize_request(r, rc);
    return NGX_DONE;
}

/* nres_admit: admission, before access (as limit_req). */
static ngx_int_t
ngx_http_nres_preaccess(ngx_http_request_t *r)
{
    int                        rc;
    char                       hashed[NRES_GW_KEY_HASHED]; /* a long key's
                                                              MD5, as in Lua */
    size_t                     klen;
    ngx_str_t                  key;
    const char                *k;
    nres_time_t                now, wait;
    nres_gw_upstream_t        *gw;
    ngx_http_nres_ctx_t       *ctx;
    ngx_http_nres_loc_conf_t  *lcf;

    lcf = ngx_http_get_module_loc_conf(r, ngx_http_nres_module);
    if (lcf->gw == NULL || ngx_http_nres_get_ctx(r) != NULL) {
        return NGX_DECLINED;
    }
    gw = *lcf->gw;
    ctx = ngx_http_nres_new_ctx(r, gw);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    now = nres_clock_now();
    if (lcf->limiter != NULL) {
        if (ngx_http_complex_value(r, lcf->key, &key) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        klen = nres_gw_key((const char *) key.data, key.len, hashed, &k);
        wait = 0;
        if (nres_gw_limit(*lcf->limiter, k, klen, now, &wait) != 0) {
            if (!lcf->dry_run) {
                return ngx_http_nres_refuse(r, ctx, lcf, NRES_STOP_LIMITED,
                                            wait);
            }
            /* counted, let through (limit_req_dry_run's idiom) */
            nres_gw_control_count((*lcf->limiter)->control, NRES_GW_WOULD_RATE);
        }
    }
    rc = nres_gw_admit(gw, &ctx->req, now, ngx_http_nres_inbound_ms(r));
    if (rc == NRES_GW_CIRCUIT && lcf->dry_run) {
        /* let through, unadmitted: no retries */
        nres_gw_control_count(gw->control, NRES_GW_WOULD_CIRCUIT);
        nres_gw_unadmitted(gw, &ctx->req, now);
        rc = NRES_GW_ADMITTED;
    }
    if (rc != NRES_GW_ADMITTED) {
        return ngx_http_nres_refuse(r, ctx, lcf, rc, 0);
    }
    ctx->left_ms = nres_gw_left_ms(&ctx->req, now);
    ctx->cln.handler = ngx_http_nres_end; /* the call's end armed */
    return NGX_DECLINED;
}

/* A variable's value: len bytes at data, found. */
static ngx_int_t
ngx_http_nres_value(ngx_http_variable_value_t *v, u_char *data, size_t len)
{
    v->len = len;
    v->data = data;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    return NGX_OK;
}

/* $nres_deadline_ms: the time left at admission (ms), or at a retry's
 * start (ngx_http_nres_recreate_request); empty without one. Formatted
 * once into the request's state. Not cached by nginx: a subrequest
 * shares its parent's variables (an auth_request's proxy would cache its
 * own value, or none, for the parent), and an internal redirect may move
 * the request to another upstream's admission. */
static ngx_int_t
ngx_http_nres_deadline_variable(ngx_http_request_t *r,
                                ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char               *p;
    uint64_t              ms;
    ngx_http_nres_ctx_t  *ctx;

    (void) data;
    ctx = ngx_http_nres_get_ctx(r);
    if (ctx == NULL || ctx->left_ms < 0) {
        v->not_found = 1;
        return NGX_OK;
    }
    /* formatted once: decimal, as ngx_sprintf's %L, from the end */
    if (ctx->deadline_len == 0) {
        p = ctx->deadline + sizeof ctx->deadline;
        ms = (uint64_t) ctx->left_ms;
        do {
            *--p = (u_char) ('0' + ms % 10);
            ms /= 10;
        } while (ms != 0);
        ctx->deadline_len = (size_t) (ctx->deadline + sizeof ctx->deadline - p);
    }
    return ngx_http_nres_value(
        v, ctx->deadline + sizeof ctx->deadline - ctx->deadline_len,
        ctx->deadline_len);
}

/* $nres_reason (data 0): why nres_admit refused the request ("circuit
 * open", "rate limited", "deadline exceeded": nres_stop_name's), for
 * log_format; empty for a request it admitted or never saw.
 * $nres_retry (data 1): why the last try, which failed, got no retry
 * ("budget exhausted", "attempts exhausted", "deadline exceeded",
 * "circuit open" for the breaker's probe, "permanent" for a failure
 * proxy_next_upstream does not retry); empty when the last try succeeded
 * or nres never saw the request. */
static ngx_int_t
ngx_http_nres_reason_variable(ngx_http_request_t *r,
                              ngx_http_variable_value_t *v, uintptr_t data)
{
    int                   stop;
    const char           *text;
    ngx_http_nres_ctx_t  *ctx;

    ctx = ngx_http_nres_get_ctx(r);
    stop = ctx == NULL ? 0 : data ? ctx->retry_stop : ctx->stop;
    if (stop == 0) {
        v->not_found = 1;
        return NGX_OK;
    }
    text = nres_stop_name(stop);
    return ngx_http_nres_value(v, (u_char *) text, ngx_strlen(text));
}

/* $nres_tries: the tries nres began for the request (0: nres_admit
 * refused it); empty when nres never saw it. Formatted at log time, in the
 * request's pool past 9. */
static ngx_int_t
ngx_http_nres_tries_variable(ngx_http_request_t *r,
                             ngx_http_variable_value_t *v, uintptr_t data)
{
    static u_char  digits[] = "0123456789";

    u_char               *p;
    uint32_t              n;
    ngx_http_nres_ctx_t  *ctx;

    (void) data;
    ctx = ngx_http_nres_get_ctx(r);
    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }
    n = ctx->stop != 0 ? 0 : ctx->req.tries;
    if (n < 10) {
        return ngx_http_nres_value(v, &digits[n], 1);
    }
    p = ngx_pnalloc(r->pool, NGX_INT32_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }
    return ngx_http_nres_value(v, p, ngx_sprintf(p, "%uD", n) - p);
}

static ngx_int_t
ngx_http_nres_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_nres_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }
        var->get_handler = v->get_handler;
        var->data = v->data;
    }
    return NGX_OK;
}

/* The upstream conf of a try whose timeouts are t ms (nginx reads them
 * from the conf; lua-nginx-module's set_timeouts copies it for each
 * try): the location's own when its timeouts are t; this worker's copy
 * of it with the attempt timeout when t is that (a try with more time
 * left than an attempt timeout: the usual one), made at the location's
 * first such try; else the request's own copy. Each conf is read-only to
 * nginx, so a copy can serve every request of its location. */
static ngx_http_upstream_conf_t *
ngx_http_nres_try_conf(ngx_http_nres_ctx_t *ctx, ngx_msec_t t)
{
    ngx_uint_t                 i;
    ngx_http_nres_srv_conf_t  *scf;
    ngx_http_upstream_conf_t  *conf, *copy;

    conf = ctx->conf;
    if (conf->connect_timeout == t && conf->send_timeout == t
        && conf->read_timeout == t)
    {
        return conf;
    }
    scf = ctx->scf;
    copy = NULL;
    if (t == scf->attempt_ms) {
        for (i = 0; i < scf->ntimed; i++) {
            if (scf->timed[i].conf == conf) {
                return scf->timed[i].timed;
            }
        }
        if (scf->ntimed < NGX_HTTP_NRES_TIMED_MAX) {
            copy = ngx_palloc(ngx_cycle->pool, sizeof *copy);
            if (copy == NULL) {
                return NULL;
            }
            scf->timed[scf->ntimed].conf = conf;
            scf->timed[scf->ntimed].timed = copy;
            scf->ntimed++;
        }
    }
    if (copy == NULL) {
        if (ctx->own == NULL
            && (ctx->own = ngx_palloc(ctx->r->pool, sizeof *copy)) == NULL)
        {
            return NULL;
        }
        copy = ctx->own;
    }
    ngx_memcpy(copy, conf, sizeof *copy);
    copy->connect_timeout = t;
    copy->send_timeout = t;
    copy->read_timeout = t;
    return copy;
}

/* A retry's request made again when $nres_deadline_ms went into it, so
 * the peer sees this try's time left: nginx builds the request once per
 * upstream session and sends the same bytes to every try. As
 * lua-nginx-module's balancer.recreate_request (documented for this use:
 * a header from a variable, new on a retry): the request's body chain as
 * ngx_http_upstream_init_request gave it to create_request, and
 * create_request again, in the request's pool (a retry's allocation).
 * Not with proxy_request_buffering off (the body is streamed by the
 * proxy's own state): there every try carries the first try's value. */
static void
ngx_http_nres_recreate_request(ngx_http_nres_ctx_t *ctx, nres_time_t now)
{
    int64_t               left, was;
    ngx_chain_t          *built;
    ngx_http_request_t   *r;
    ngx_http_upstream_t  *u;

    r = ctx->r;
    u = r->upstream;
    if (ctx->deadline_len == 0 || u->create_request == NULL
        || r->request_body_no_buffering)
    {
        return;
    }
    left = nres_gw_left_ms(&ctx->req, now);
    was = ctx->left_ms;
    if (left == was) {
        return;
    }
    built = u->request_bufs;
    ctx->left_ms = left;
    ctx->deadline_len = 0; /* formatted again by create_request */
    u->request_bufs = r->request_body != NULL ? r->request_body->bufs : NULL;
    if (u->create_request(r) != NGX_OK) {
        /* no memory for it: the retry goes with the first try's bytes */
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "nres: a retry's request could not be made again; "
                      "it carries the first try's X-Deadline-Ms");
        u->request_bufs = built;
        ctx->left_ms = was;
        ctx->deadline_len = 0;
    }
}

/* Why nres_gw_grant refused a retry (nres_stop_t), read from what it
 * reads, for $nres_retry. */
static int
ngx_http_nres_why_not(ngx_http_nres_ctx_t *ctx)
{
    nres_gw_request_t  *q;

    q = &ctx->req;
    if (q->budget_refused) {
        return NRES_STOP_BUDGET;
    }
    if (q->tries >= ctx->gw->attempts || q->slot == NULL) {
        return NRES_STOP_ATTEMPTS; /* without admission: one try */
    }
    if (q->has_upermit && q->upermit != 0) {
        return NRES_STOP_CIRCUIT; /* the upstream breaker's probe */
    }
    return NRES_STOP_DEADLINE; /* under 2 ms left */
}

/* One more try after this one's failure, if nginx would make it
 * (proxy_next_upstream lists the failure `ft`, and a POST, LOCK or PATCH
 * already sent is retried only with non_idempotent, as nginx tests) and
 * the policy, the time left and the retry budget allow (the budget's
 * token is taken now, given back at the call's end if nginx does not
 * retry after all). Asked only when a try has failed: a healthy request
 * never touches the budget, whose words every worker shares. */
static void
ngx_http_nres_grant(ngx_http_nres_ctx_t *ctx, ngx_peer_connection_t *pc,
                    ngx_uint_t ft)
{
    int                   more;
    nres_time_t           now;
    ngx_http_request_t   *r;
    ngx_http_upstream_t  *u;

    r = ctx->r;
    u = r->upstream;
    if (ctx->granted) {
        return;
    }
    ctx->granted = 1;
    if (u->request_sent
        && (r->method & (NGX_HTTP_POST | NGX_HTTP_LOCK | NGX_HTTP_PATCH)))
    {
        ft |= NGX_HTTP_UPSTREAM_FT_NON_IDEMPOTENT;
    }
    if (ft == 0 || (u->conf->next_upstream & ft) != ft) {
        ctx->retry_stop = NRES_STOP_PERMANENT;
        return;
    }
    now = nres_clock_now();
    more = nres_gw_grant(ctx->gw, &ctx->req, now, -1);
    if (more == NRES_GW_NEED_CLASS) {
        more = nres_gw_grant(ctx->gw, &ctx->req, now,
                             ngx_http_nres_class(ctx->r));
    }
    if (more == 1) {
        pc->tries++;
        ctx->retry_stop = 0;
        return;
    }
    ctx->retry_stop = ngx_http_nres_why_not(ctx);
}

/* Each try: a peer and its timeouts. */
static ngx_int_t
ngx_http_nres_get_peer(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_nres_ctx_t *ctx = data;
    nres_gw_upstream_t *gw = ctx->gw;
    nres_time_t now = nres_clock_now();
    if (ctx->session_tries++ > 0) {
        ngx_http_nres_recreate_request(ctx, now);
    }
    ctx->granted = 0;
    uint32_t permit;
    int has_permit;
    int i = nres_gw_pick(gw, now, ctx->last, &permit, &has_permit);
    ngx_msec_t t = (ngx_msec_t) nres_gw_try_begin(gw, &ctx->req, now, i, permit,
                                                  has_permit);
    nres_gw_peer_t *p = &gw->peer[i];
    if (p->socklen == 0) {   /* cannot be: every member has an address */
        ngx_log_error(NGX_LOG_ERR, pc->log, 0,
                      "nres_balancer: peer \"%s\" has no address", p->name);
        return NGX_ERROR;
    }
    ctx->socklen = p->socklen;
    ngx_memcpy(ctx->sockaddr.bytes, p->sockaddr.bytes, p->socklen);
    ctx->peer_name.len = ngx_strlen(p->name);
    ctx->peer_name.data = ctx->peer_text;
    ngx_memcpy(ctx->peer_text, p->name, ctx->peer_name.len);
    pc->cached = 0; /* keepalive's get sets it when it has a connection */
    pc->connection = NULL;
    pc->sockaddr = &ctx->sockaddr.sa;
    pc->socklen = ctx->socklen;
    pc->name = &ctx->peer_name;
    ngx_http_upstream_conf_t *conf = ngx_http_nres_try_conf(ctx, t);
    if (conf == NULL) {
        return NGX_ERROR;
    }
    ctx->r->upstream->conf = conf;
    return NGX_OK;
}

/* The upstream's header parser, wrapped: a failing status asks for one
 * more try before nginx reads pc->tries to decide whether to try again
 * (ngx_http_upstream_test_next runs right after the header is parsed,
 * before the try's free). The proxy module replaces its parser once the
 * status line is read, and again on each retry's reinit: the wrapper puts
 * itself back after both. */
static ngx_int_t ngx_http_nres_process_header(ngx_http_request_t *r);

/* The wrapper in place again if the upstream's module put a parser of its
 * own there (kept, to be called by the wrapper). */
static void
ngx_http_nres_rewrap(ngx_http_nres_ctx_t *ctx, ngx_http_upstream_t *u)
{
    if (u->process_header != ngx_http_nres_process_header) {
        ctx->process_header = u->process_header;
        u->process_header = ngx_http_nres_process_header;
    }
}

static ngx_int_t
ngx_http_nres_process_header(ngx_http_request_t *r)
{
    ngx_int_t             rc;
    ngx_uint_t            ft;
    ngx_http_nres_ctx_t  *ctx;
    ngx_http_upstream_t  *u;

    ctx = ngx_http_nres_get_ctx(r);
    u = r->upstream;
    rc = ctx->process_header(r);
    ngx_http_nres_rewrap(ctx, u);
    if (rc == NGX_OK && ctx->req.peer >= 0) {
        /* the statuses nres counts as failed */
        switch (u->headers_in.status_n) {
        case NGX_HTTP_INTERNAL_SERVER_ERROR:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_500;
            break;
        case NGX_HTTP_BAD_GATEWAY:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_502;
            break;
        case NGX_HTTP_SERVICE_UNAVAILABLE:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_503;
            break;
        case NGX_HTTP_GATEWAY_TIME_OUT:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_504;
            break;
        case NGX_HTTP_TOO_MANY_REQUESTS:
            ft = NGX_HTTP_UPSTREAM_FT_HTTP_429;
            break;
        default:
            ft = 0;
        }
        if (ft != 0) {
            ngx_http_nres_grant(ctx, &u->peer, ft);
        }
    }
    return rc;
}

static ngx_int_t
ngx_http_nres_reinit_request(ngx_http_request_t *r)
{
    ngx_int_t             rc;
    ngx_http_nres_ctx_t  *ctx;
    ngx_http_upstream_t  *u;

    ctx = ngx_http_nres_get_ctx(r);
    u = r->upstream;
    rc = ctx->reinit_request(r);
    ngx_http_nres_rewrap(ctx, u);
    return rc;
}

/* Each try's end: recorded into its peer; a failure nginx saw itself (no
 * connection, a timeout, a broken answer) asks for one more try here,
 * before nginx reads pc->tries. */
static void
ngx_http_nres_free_peer(ngx_peer_connection_t *pc, void *data, ngx_uint_t state)
{
    ngx_http_nres_ctx_t  *ctx = data;

    int                   failed, timed_out;
    ngx_http_upstream_t  *u;

    if (pc->tries) {
        pc->tries--;
    }
    if (ctx->req.peer < 0) {
        return;
    }
    u = ctx->r->upstream;
    if (ctx->r->connection->error && !(state & NGX_PEER_FAILED)
        && (u->state == NULL || u->state->status == 0))
    {
        /* the client left before this try was answered (nginx ends the
         * request with 499): no outcome to record; nres_gw_request_end
         * judges the call neither way */
        nres_gw_try_abandon(ctx->gw, &ctx->req);
        return;
    }
    /* A failure: nginx's own (no connection, a timeout, a broken answer), a
     * 5xx, or an answer with no status line, which nginx's proxy passes on
     * as HTTP/0.9 (u->state->status 200, no status_n): garbage is no
     * success. */
    failed = (state & NGX_PEER_FAILED)
             || (u->state != NULL
                 && (u->state->status >= 500
                     || (u->state->status != 0
                         && u->headers_in.status_n == 0)));
    timed_out = pc->connection != NULL
                && (pc->connection->read->timedout
                    || pc->connection->write->timedout);
    if (!(state & NGX_PEER_FAILED) && u->state != NULL
        && u->state->status == 504) {
        timed_out = 1;
    }
    ctx->last = nres_gw_try_end(ctx->gw, &ctx->req, nres_clock_now(), failed,
                                timed_out);
    /* A kept-alive connection that the upstream had closed: nginx tries
     * again by itself (pc->tries++ in ngx_http_upstream_next), no token. */
    if ((state & NGX_PEER_FAILED) && !(pc->cached && !timed_out)) {
        ngx_http_nres_grant(ctx, pc,
                            timed_out ? NGX_HTTP_UPSTREAM_FT_TIMEOUT
                                      : NGX_HTTP_UPSTREAM_FT_ERROR);
    }
}

/* A request's upstream session: the admission's state, or a new one
 * without admission (the policy's deadline, no retries). */
static ngx_int_t
ngx_http_nres_init_peer(ngx_http_request_t *r, ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_nres_ctx_t       *ctx;
    ngx_http_upstream_t       *u;
    ngx_http_nres_srv_conf_t  *scf;

    scf = ngx_http_conf_upstream_srv_conf(us, ngx_http_nres_module);
    ctx = ngx_http_nres_get_ctx(r);
    if (ctx == NULL || ctx->gw != scf->gw) {
        ctx = ngx_http_nres_new_ctx(r, scf->gw);
        if (ctx == NULL) {
            return NGX_ERROR;
        }
        nres_gw_unadmitted(scf->gw, &ctx->req, nres_clock_now());
        ctx->cln.handler = ngx_http_nres_end;
    } else if (ctx->req.peer >= 0) {
        nres_gw_try_abandon(ctx->gw,
                            &ctx->req); /* a new session of the request */
    }
    ctx->scf = scf;
    ctx->last = -1;
    ctx->session_tries = 0;
    ctx->conf = r->upstream->conf;
    u = r->upstream;
    if (u->process_header != NULL && u->reinit_request != NULL
        && u->reinit_request != ngx_http_nres_reinit_request)
    {
        ctx->reinit_request = u->reinit_request;
        u->reinit_request = ngx_http_nres_reinit_request;
        ngx_http_nres_rewrap(ctx, u);
    }
    r->upstream->peer.get = ngx_http_nres_get_peer;
    r->upstream->peer.free = ngx_http_nres_free_peer;
    r->upstream->peer.data = ctx;
    r->upstream->peer.tries = 1;
    return NGX_OK;
}

/* The upstream block's server lines (nginx wants one) are placeholders:
 * the peers are gw.upstream's. */
static ngx_int_t
ngx_http_nres_init_upstream(ngx_conf_t *cf, ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_nres_srv_conf_t  *scf;

    (void) cf;
    scf = ngx_http_conf_upstream_srv_conf(us, ngx_http_nres_module);
    scf->initialized = 1;
    us->peer.init = ngx_http_nres_init_peer;
    return NGX_OK;
}
