/* SPDX-License-Identifier: MIT */
/* ngx_http_nres_control_module.c - the gateway's control API as a content
 * handler, for a location with no Lua in it (docs/gateway-control.md):
 *
 *   location = /nres/control {
 *       nres_control;                      # loopback clients only
 *       nres_control_allow 10.1.0.0/16;    # and these (addresses, CIDR)
 *   }
 *
 * POST one JSON object (an operation), GET the control state. The
 * operations are libnres's (nres_gw_control_apply, nres_gw_control_state:
 * runtime/src/gateway/control_api.c), the same C the Lua handler calls, so
 * both answer alike; each change is one [notice] line in error.log with
 * the client's address. Built into ngx_http_nres_module.so beside the
 * balancer (runtime/src/ngx/config). */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "nres.h"
#include "nres/gateway.h"


typedef struct {
    ngx_flag_t                     enabled;
    ngx_array_t                   *allow;        /* ngx_cidr_t, or NULL */
} ngx_http_nres_control_loc_conf_t;


static ngx_int_t ngx_http_nres_control_handler(ngx_http_request_t *r);
static void ngx_http_nres_control_body(ngx_http_request_t *r);
static void *ngx_http_nres_control_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_nres_control_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_nres_control(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_nres_control_allow(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


static ngx_command_t  ngx_http_nres_control_commands[] = {

    { ngx_string("nres_control"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_nres_control,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("nres_control_allow"),
      NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_nres_control_allow,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_nres_control_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_nres_control_create_loc_conf, /* create location configuration */
    ngx_http_nres_control_merge_loc_conf   /* merge location configuration */
};


ngx_module_t  ngx_http_nres_control_module = {
    NGX_MODULE_V1,
    &ngx_http_nres_control_module_ctx,     /* module context */
    ngx_http_nres_control_commands,        /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* Send a JSON answer (len bytes) and a newline with `status`. */
static ngx_int_t
ngx_http_nres_control_send(ngx_http_request_t *r, ngx_uint_t status,
    u_char *json, size_t len)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    b = ngx_create_temp_buf(r->pool, len + 1);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_cpymem(b->last, json, len);
    *b->last++ = '\n';
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = status;
    r->headers_out.content_length_n = len + 1;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* An error answer: {"error": text}, text from fmt with at most one %V
 * (arg; NULL for none), neither with '"' or '\'. */
static ngx_int_t
ngx_http_nres_control_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *fmt, ngx_str_t *arg)
{
    u_char  *p, buf[512];

    p = ngx_snprintf(buf, sizeof(buf) - 2, "{\"error\":\"");
    p = ngx_snprintf(p, buf + sizeof(buf) - 2 - p, fmt, arg);
    *p++ = '"';
    *p++ = '}';

    return ngx_http_nres_control_send(r, status, buf, p - buf);
}


/* Loopback, or an address nres_control_allow lists. */
static ngx_int_t
ngx_http_nres_control_allowed(ngx_http_request_t *r,
    ngx_http_nres_control_loc_conf_t *ccf)
{
    ngx_uint_t            i, n;
    ngx_cidr_t           *cidr;
    struct sockaddr_in   *sin;
#if (NGX_HAVE_INET6)
    u_char               *p;
    struct sockaddr_in6  *sin6;
#endif

    switch (r->connection->sockaddr->sa_family) {

    case AF_INET:
        sin = (struct sockaddr_in *) r->connection->sockaddr;
        if ((ntohl(sin->sin_addr.s_addr) >> 24) == 127) {
            return 1;
        }
        break;

#if (NGX_HAVE_INET6)
    case AF_INET6:
        sin6 = (struct sockaddr_in6 *) r->connection->sockaddr;
        if (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr)) {
            return 1;
        }
        break;
#endif

    default:
        return 0;
    }

    if (ccf->allow == NULL) {
        return 0;
    }

    cidr = ccf->allow->elts;

    for (i = 0; i < ccf->allow->nelts; i++) {

        if (cidr[i].family != r->connection->sockaddr->sa_family) {
            continue;
        }

        if (cidr[i].family == AF_INET) {
            sin = (struct sockaddr_in *) r->connection->sockaddr;
            if ((sin->sin_addr.s_addr & cidr[i].u.in.mask)
                == cidr[i].u.in.addr)
            {
                return 1;
            }
            continue;
        }

#if (NGX_HAVE_INET6)
        sin6 = (struct sockaddr_in6 *) r->connection->sockaddr;
        p = sin6->sin6_addr.s6_addr;

        for (n = 0; n < 16; n++) {
            if ((p[n] & cidr[i].u.in6.mask.s6_addr[n])
                != cidr[i].u.in6.addr.s6_addr[n])
            {
                break;
            }
        }

        if (n == 16) {
            return 1;
        }
#else
        (void) n;
#endif
    }

    return 0;
}


static ngx_int_t
ngx_http_nres_control_handler(ngx_http_request_t *r)
{
    size_t                             len;
    u_char                            *state;
    ngx_int_t                          rc;
    ngx_http_nres_control_loc_conf_t  *ccf;

    ccf = ngx_http_get_module_loc_conf(r, ngx_http_nres_control_module);

    if (!ngx_http_nres_control_allowed(r, ccf)) {
        ngx_http_discard_request_body(r);
        return ngx_http_nres_control_error(r, NGX_HTTP_FORBIDDEN,
                   "control: %V is not allowed (loopback, or "
                   "nres_control_allow)", &r->connection->addr_text);
    }

    if (r->method == NGX_HTTP_GET) {
        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }

        len = nres_gw_control_state(NULL, 0);
        state = ngx_pnalloc(r->pool, len + 1);
        if (state == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        nres_gw_control_state((char *) state, len + 1);

        return ngx_http_nres_control_send(r, NGX_HTTP_OK, state, len);
    }

    if (r->method != NGX_HTTP_POST) {
        ngx_http_discard_request_body(r);
        return ngx_http_nres_control_error(r, NGX_HTTP_NOT_ALLOWED,
                   "method: expected GET or POST, got %V",
                   &r->method_name);
    }

    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r, ngx_http_nres_control_body);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


/* The body read: one operation applied (or refused), answered, and a
 * change logged. */
static void
ngx_http_nres_control_body(ngx_http_request_t *r)
{
    size_t        len;
    u_char       *body, *p;
    ngx_int_t     status;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;
    char          answer[NRES_GW_CONTROL_ANSWER_MAX], what[1024];

    len = 0;

    for (cl = r->request_body ? r->request_body->bufs : NULL; cl;
         cl = cl->next)
    {
        b = cl->buf;
        if (b->in_file) {
            ngx_http_finalize_request(r, ngx_http_nres_control_error(r,
                                      NGX_HTTP_BAD_REQUEST,
                                      "body: expected a JSON object in "
                                      "memory (client_body_buffer_size), "
                                      "got one in a file",
                                      NULL));
            return;
        }
        len += b->last - b->pos;
    }

    if (len == 0) {
        ngx_http_finalize_request(r, ngx_http_nres_control_error(r,
                                  NGX_HTTP_BAD_REQUEST,
                                  "body: expected a JSON object, got none",
                                  NULL));
        return;
    }

    body = ngx_pnalloc(r->pool, len + 1);
    if (body == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    p = body;
    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        p = ngx_cpymem(p, cl->buf->pos, cl->buf->last - cl->buf->pos);
    }

    status = nres_gw_control_apply((const char *) body, len, nres_step_now(),
                                   answer, sizeof(answer), what,
                                   sizeof(what));

    if (status == NGX_HTTP_OK) {
        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                      "nres: control from %V: %s",
                      &r->connection->addr_text, what);
    }

    ngx_http_finalize_request(r, ngx_http_nres_control_send(r, status,
                              (u_char *) answer, ngx_strlen(answer)));
}


static void *
ngx_http_nres_control_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_nres_control_loc_conf_t  *ccf;

    ccf = ngx_pcalloc(cf->pool, sizeof(ngx_http_nres_control_loc_conf_t));
    if (ccf == NULL) {
        return NULL;
    }

    ccf->enabled = NGX_CONF_UNSET;
    ccf->allow = NGX_CONF_UNSET_PTR;

    return ccf;
}


static char *
ngx_http_nres_control_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_nres_control_loc_conf_t  *prev = parent;
    ngx_http_nres_control_loc_conf_t  *conf = child;

    ngx_conf_merge_value(conf->enabled, prev->enabled, 0);
    ngx_conf_merge_ptr_value(conf->allow, prev->allow, NULL);

    return NGX_CONF_OK;
}


static char *
ngx_http_nres_control(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_nres_control_loc_conf_t  *ccf = conf;

    ngx_http_core_loc_conf_t  *clcf;

    if (ccf->enabled == 1) {
        return "is duplicate";
    }

    ccf->enabled = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_nres_control_handler;

    return NGX_CONF_OK;
}


/* nres_control_allow ADDRESS|CIDR ...: more clients besides loopback. */
static char *
ngx_http_nres_control_allow(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_nres_control_loc_conf_t  *ccf = conf;

    ngx_int_t    rc;
    ngx_str_t   *value;
    ngx_uint_t   i;
    ngx_cidr_t  *cidr;

    if (ccf->allow == NGX_CONF_UNSET_PTR || ccf->allow == NULL) {
        ccf->allow = ngx_array_create(cf->pool, 4, sizeof(ngx_cidr_t));
        if (ccf->allow == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {
        cidr = ngx_array_push(ccf->allow);
        if (cidr == NULL) {
            return NGX_CONF_ERROR;
        }

        rc = ngx_ptocidr(&value[i], cidr);

        if (rc == NGX_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%V: expected an address or a CIDR block "
                               "(10.1.0.0/16, 2001:db8::7), got \"%V\"",
                               &cmd->name, &value[i]);
            return NGX_CONF_ERROR;
        }

        if (rc == NGX_DONE) {
            ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                               "%V: low address bits of %V are meaningless",
                               &cmd->name, &value[i]);
        }
    }

    return NGX_CONF_OK;
}
